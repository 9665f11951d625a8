"""A DataLoader with two workers started by fork, iterated inside a recorded stage for two
epochs (four workers forked in all): each worker's __getitem__ runs tensor ops (cosh, which
only the workers run); the parent runs the model on every batch (and sinh). Small flushes
(flush_events=64), so a worker that recorded would flush too.

Pids go to SPIKETRACE_GUEST_OUT + ".pids" ("parent PID", "child PID" from worker_init_fn).
"""

import os

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from tests.guest.user import recording, report

PIDS = os.environ["SPIKETRACE_GUEST_OUT"] + ".pids"


def note(role: str, pid: int) -> None:
    with open(PIDS, "a") as out:
        out.write(f"{role} {pid}\n")


class Waves(Dataset):
    def __len__(self) -> int:
        return 24

    def __getitem__(self, index: int) -> torch.Tensor:
        base = torch.linspace(-1.0, 1.0, 8) * (index + 1) / 24
        return (base.cosh() - 1).mul(3).tanh()


torch.manual_seed(0)
net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
note("parent", os.getpid())
loader = DataLoader(Waves(), batch_size=4, num_workers=2, multiprocessing_context="fork",
                    worker_init_fn=lambda worker: note("child", os.getpid()))

outputs = []
with recording(model=net, flush_events=64) as rec:
    for _epoch in range(2):
        with rec.stage("forward"):
            for batch in loader:
                outputs.append(net(batch).sinh().sum(dim=1))
        rec.step()

report(outputs=outputs)
