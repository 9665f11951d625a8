"""A user's training job while parts of the capture itself are broken (fault injection).

usage: python injected_failures.py OUT_DIR

The capture's own functions are replaced by ones that raise, one per place torch calls into
the capture: a per-op statistic (conv_spike_taps), tensor statistics of large tensors, the
description of one op (aten.sigmoid), the module hooks of the Dropout, the optimizer hook
and one stage marker. Two SGD steps of a small spiking CNN with dropout run under a Recorder
(OUT_DIR/trace); an uncaptured twin takes the same steps. Writes OUT_DIR/result.json: both
runs' losses (float.hex) and whether the parameters ended bit-identical.
"""

import copy
import json
import os
import sys
from pathlib import Path

# The functions replaced below are the Python path's; the compiled per-op record and scan
# (capture/native/__init__.py) would take these ops without reaching them, so they are switched off
# (tests/test_native.py injects a failure the compiled path meets).
os.environ["SPIKETRACE_SLOW_PATHS"] = "native_record,native_statistics"

import torch
import torch.nn.functional as F
from torch import nn

import spiketrace.capture.modules.catalog
import spiketrace.capture.ops.dispatch
import spiketrace.capture.ops.op_statistics
import spiketrace.capture.ops.optimizers
import spiketrace.capture.tensors.registry
from spiketrace.capture import Recorder
from spiketrace.capture.session.example import SpikeFunction

out_dir = Path(sys.argv[1])


class Injected(RuntimeError):
    pass


def broken(name):
    def fail(*args, **kwargs):
        raise Injected(f"injected failure in {name}")

    return fail


real_python_stats = spiketrace.capture.tensors.registry.python_stats
real_written_arguments = spiketrace.capture.ops.dispatch.written_arguments
real_module_id = spiketrace.capture.modules.catalog.ModuleCatalog.module_id


def python_stats(t):
    if t.numel() > 1000:
        raise Injected("injected failure in a tensor scan")
    return real_python_stats(t)


def written_arguments(func):
    if "sigmoid" in str(func):
        raise Injected("injected failure describing sigmoid")
    return real_written_arguments(func)


def module_id(self, module, tracker_name=None, **kwargs):
    if tracker_name is not None and isinstance(module, nn.Dropout):  # from the hooks only
        raise Injected("injected failure in a module hook")
    return real_module_id(self, module, tracker_name, **kwargs)


spiketrace.capture.ops.op_statistics.STATISTIC_FUNCTIONS["conv_spike_taps"] = broken("conv_spike_taps")
# the scan a tensor's state takes with the compiled scan off (capture/tensors/registry.py)
spiketrace.capture.tensors.registry.python_stats = python_stats
spiketrace.capture.ops.dispatch.written_arguments = written_arguments
spiketrace.capture.modules.catalog.ModuleCatalog.module_id = module_id
spiketrace.capture.ops.optimizers._hyperparameters = broken("the optimizer hook")


class Spiking(nn.Module):
    def forward(self, x):
        return SpikeFunction.apply(x - 0.5)


torch.manual_seed(0)
model = nn.Sequential(
    nn.Conv2d(1, 8, 3, padding=1), Spiking(), nn.Dropout(0.2),
    nn.Conv2d(8, 8, 3, stride=2, padding=1), Spiking(),
    nn.Flatten(), nn.Linear(8 * 8 * 8, 4), nn.Sigmoid(),
)
twin = copy.deepcopy(model)
x = (torch.rand(2, 4, 1, 16, 16) < 0.4).float()
y = torch.tensor([[0, 1, 2, 3], [3, 2, 1, 0]])


def train_step(net, optimizer, step, recorder=None):
    optimizer.zero_grad()
    torch.manual_seed(100 + step)  # the same dropout masks in both runs
    if recorder is None:
        loss = F.mse_loss(net(x[step]), F.one_hot(y[step], 4).float())
        loss.backward()
        optimizer.step()
        return float(loss.detach()).hex()
    with recorder.stage("forward"):
        out = net(x[step])
    loss = F.mse_loss(out, F.one_hot(y[step], 4).float())
    with recorder.stage("backward"):
        loss.backward()
    with recorder.stage("optimizer"):
        optimizer.step()
    recorder.step()
    return float(loss.detach()).hex()


twin_optimizer = torch.optim.SGD(twin.parameters(), lr=0.5, momentum=0.9)
twin_losses = [train_step(twin, twin_optimizer, step) for step in range(2)]

optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
with Recorder(out_dir / "trace", model=model, optimizer=optimizer) as recorder:
    markers = recorder.writer.tables["stage_markers"]
    real_append = markers.append

    def append(**row):
        if row["name"] == "optimizer" and row["kind"] == "end":
            raise Injected("injected failure writing a stage marker")
        real_append(**row)

    markers.append = append
    losses = [train_step(model, optimizer, step, recorder) for step in range(2)]

(out_dir / "result.json").write_text(json.dumps({
    "losses": losses,
    "twin_losses": twin_losses,
    "parameters_identical": all(torch.equal(a, b) for a, b in zip(model.parameters(), twin.parameters())),
}))
