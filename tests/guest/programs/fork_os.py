"""os.fork() inside an open recorder: the child runs forwards of the model (and an op of its
own, cosh) and leaves with os._exit; the parent waits for it, then runs more ops (sinh) and a
second step. Small flushes (flush_events=64), so a child that recorded would flush too.

Pids go to SPIKETRACE_GUEST_OUT + ".pids" ("parent PID", "child PID"), for the test's checks.
"""

import os
import traceback

import torch
from torch import nn

from tests.guest.user import recording, report

PIDS = os.environ["SPIKETRACE_GUEST_OUT"] + ".pids"


def note(role: str, pid: int) -> None:
    with open(PIDS, "a") as out:
        out.write(f"{role} {pid}\n")


def child_work(net, x) -> float:
    torch.set_num_threads(1)  # as DataLoader's workers do: a fork's OpenMP pool is not the parent's
    with torch.no_grad():
        return sum(float(net(x * (i + 1)).cosh().sum()) for i in range(20))


torch.manual_seed(0)
net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
x = torch.randn(5, 8)
note("parent", os.getpid())

with recording(model=net, flush_events=64) as rec:
    with rec.stage("forward"):
        before = net(x)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_end)
            os.write(write_end, repr(child_work(net, x)).encode())
            code = 0
        except BaseException:  # noqa: BLE001 - the forked child reports anything, then _exit()s
            traceback.print_exc()
        finally:
            os._exit(code)
    note("child", pid)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        child_value = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    with rec.stage("forward"):
        after = net(x).sinh()
    rec.step()
    with rec.stage("forward"):
        second = net(x + 1)
    rec.step()

report(before=before, after=after, second=second, child_value=child_value,
       child_exit=os.waitstatus_to_exitcode(status))
