"""A small spiking net trained for several steps, on one or two ranks: the multi-step,
multi-rank traces the scaling and per-step energy tests read.

The net has what every energy model looks at: a Conv2d fed binary spikes (conv spike taps,
SpikeSim crossbars), BatchNorm, LIF and IF neurons, a Linear; multi-step mode (T = 2).
Each step is forward, loss (suspended), backward and an SGD-with-momentum step, in stages
named as NeuroMC expects, then an inference forward in eval mode (stage "eval": the work
inference-only models such as SpikeSim cost), closed by `recorder.step()`. Runs are
deterministic: the same (rank, steps) gives the same tensors, so a step recorded alone
(schedule) equals that step of a longer recording.
"""

from __future__ import annotations

import torch
from spikingjelly.activation_based import functional, layer, neuron, surrogate
from torch import nn

from spiketrace.capture import Recorder, schedule

T, BATCH, SIDE = 2, 2, 6


def build() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(
        layer.Conv2d(2, 4, 3, padding=1), layer.BatchNorm2d(4),
        neuron.LIFNode(tau=2.0, surrogate_function=surrogate.ATan()),
        layer.Flatten(), layer.Linear(4 * SIDE * SIDE, 10), neuron.IFNode(surrogate_function=surrogate.ATan()),
    )
    functional.set_step_mode(net, "m")
    return net


def batches(rank: int, steps: int):
    """(spike input, target) per step; each rank sees its own data."""
    generator = torch.Generator().manual_seed(1 + rank)
    for _ in range(steps):
        x = (torch.rand(T, BATCH, 2, SIDE, SIDE, generator=generator) < 0.3).float()
        yield x, torch.rand(T, BATCH, 10, generator=generator)


def record(path, steps: int, *, rank: int = 0, world_size: int = 1, only_step: int | None = None, **settings):
    """Train `steps` steps on `rank`'s data, recording every step into `path` (as rank
    `rank` of `world_size`), or only step `only_step` (a schedule)."""
    net = build()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    if only_step is not None:
        settings["schedule"] = schedule(skip_first=only_step, active=1, repeat=1)
    with Recorder(path, model=net, optimizer=optimizer, rank=rank, world_size=world_size,
                  keep_binary_inputs=True, **settings) as recorder:
        for x, target in batches(rank, steps):
            optimizer.zero_grad()
            with recorder.stage("forward"):
                out = net(x)
            with recorder.suspend():
                loss = nn.functional.mse_loss(out, target)
            with recorder.stage("backward"):
                loss.backward()
            with recorder.stage("optimizer"):
                optimizer.step()
            with recorder.suspend():
                functional.reset_net(net)
                net.eval()
            with torch.no_grad(), recorder.stage("eval", phase="forward"):
                net(x)
            with recorder.suspend():
                functional.reset_net(net)
                net.train()
            recorder.step()
    return path


def record_ranks(path, steps: int, ranks: int = 2, **options):
    """`ranks` ranks of the same training into one trace directory."""
    for rank in range(ranks):
        record(path, steps, rank=rank, world_size=ranks, **options)
    return path
