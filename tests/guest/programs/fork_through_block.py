"""os.fork() inside an open recorder, the child not leaving with os._exit: it goes on through
the rest of the `with` block as the parent does (stages, its own op cosh, rec.step()), leaves
the block, so its copy of the Recorder's __exit__ runs, and ends with sys.exit(0). The parent
waits for it, then runs the same rest of the block (with sinh instead of cosh). Small flushes
(flush_events=64), so a child that recorded would flush, close and compact too.

Pids go to SPIKETRACE_GUEST_OUT + ".pids" ("parent PID", "child PID"); every on_trace_ready
call appends "ready PID" there (the plain run has no such calls).
"""

import os
import sys

import torch
from torch import nn

from tests.guest.user import recording, report

PIDS = os.environ["SPIKETRACE_GUEST_OUT"] + ".pids"


def note(role: str, pid: int) -> None:
    with open(PIDS, "a") as out:
        out.write(f"{role} {pid}\n")


torch.manual_seed(0)
net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
x = torch.randn(5, 8)
note("parent", os.getpid())

with recording(model=net, flush_events=64, on_trace_ready=lambda path: note("ready", os.getpid())) as rec:
    with rec.stage("forward"):
        before = net(x)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        torch.set_num_threads(1)  # a fork's OpenMP pool is not the parent's (as DataLoader's workers do)
        os.close(read_end)
    else:
        note("child", pid)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            child_value = pipe.read().decode()  # until the child's end closes: it has left the block
        _, status = os.waitpid(pid, 0)
    values = []
    for step in range(3):
        with rec.stage("forward"):
            out = net(x * (step + 1))
            values.append(out.cosh().sum() if pid == 0 else out.sinh().sum())
        rec.step()

if pid == 0:
    os.write(write_end, repr(sum(float(v.detach()) for v in values)).encode())
    sys.exit(0)

report(before=before, values=values, child_value=child_value, child_exit=os.waitstatus_to_exitcode(status))
