"""A user's CNN trained with activation checkpointing (torch.utils.checkpoint), captured.

usage: python checkpointed_training.py OUT_DIR

Three variants of one training step: eager (no checkpointing), use_reentrant=False and
use_reentrant=True; of the two checkpointed functions one runs a Conv-BN-ReLU block and
functional ops, the other a block alone (so recomputation stops inside a module's forward).
Each is captured into OUT_DIR/<variant> under a probe dispatch mode (stacked below the
recorder's, so it sees exactly the ops the recorder records) that notes, per op, whether it
ran inside which checkpointed function during backward, i.e. is recomputation (and during
forward: the ops recomputation repeats). Each variant
also runs uncaptured. Writes OUT_DIR/result.json: the probe's flags per variant and whether
the captured gradients and parameters are bit-identical to the uncaptured ones.
"""

import copy
import json
import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint

from spiketrace.capture import Recorder

out_dir = Path(sys.argv[1])
inside = [0]  # which checkpointed function is running (1 or 2), 0 for none


class Block(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.bn(self.conv(x)))


class Net(nn.Module):
    def __init__(self, reentrant) -> None:
        super().__init__()
        self.reentrant = reentrant
        self.stem = nn.Conv2d(2, 4, 3, padding=1)
        self.block = Block(4)
        self.block2 = Block(4)
        self.head = nn.Linear(4 * 6 * 6, 3)

    def checkpointed(self, x):  # ends in functional ops
        inside[0] = 1
        try:
            return torch.sigmoid(self.block(x)) * 2.0
        finally:
            inside[0] = 0

    def checkpointed2(self, x):  # ends inside a module: recomputation stops in its forward
        inside[0] = 2
        try:
            return self.block2(x)
        finally:
            inside[0] = 0

    def forward(self, x):
        x = self.stem(x)
        for function in (self.checkpointed, self.checkpointed2):
            x = function(x) if self.reentrant is None else checkpoint(function, x, use_reentrant=self.reentrant)
        return self.head(x.flatten(1))


class Probe(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.recomputed: list[int] = []  # which checkpointed function ran the op in backward, or 0
        self.checkpointed: list[int] = []  # which checkpointed function ran the op in forward, or 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        in_backward = torch._C._current_graph_task_id() != -1
        self.recomputed.append(inside[0] if in_backward else 0)
        self.checkpointed.append(0 if in_backward else inside[0])
        return out


torch.manual_seed(0)
reference = Net(None)
x = torch.randn(3, 2, 6, 6)


def step(model, recorder=None):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    stage = recorder.stage if recorder is not None else (lambda name: torch.enable_grad())
    with stage("forward"):
        loss = model(x).square().mean()
    with stage("backward"):
        loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    with stage("optimizer"):
        optimizer.step()
    return grads, [p.detach().clone() for p in model.parameters()]


result = {}
for name, reentrant in (("eager", None), ("nonreentrant", False), ("reentrant", True)):
    plain = copy.deepcopy(reference)
    plain.reentrant = reentrant
    captured = copy.deepcopy(plain)
    plain_grads, plain_parameters = step(plain)
    probe = Probe()
    with probe, Recorder(out_dir / name, model=captured) as recorder:
        grads, parameters = step(captured, recorder)
    result[name] = {
        "recomputed": probe.recomputed,
        "checkpointed": probe.checkpointed,
        "identical": all(torch.equal(a, b) for a, b in zip(grads + parameters, plain_grads + plain_parameters)),
    }
(out_dir / "result.json").write_text(json.dumps(result))
