"""A user's multi-step SpikingJelly CNN trained with a loss *module*, captured two ways.

usage: python snn_loss_module.py OUT_DIR

Step 1 goes through record_training_step (loss suspended), step 2 through the manual API
with the loss recorded. A plain uncaptured twin takes the same two steps. Writes
OUT_DIR/result.json: both runs' losses (float.hex), whether every parameter ended
bit-identical, and what SpikingJelly's own ActiveModuleTracker does on this run.
"""

import copy
import json
import sys
from pathlib import Path

import torch
from spikingjelly.activation_based import functional, layer, neuron
from spikingjelly.activation_based.op_counter.base import ActiveModuleTracker
from torch import nn

from spiketrace.capture import Recorder, record_training_step

out_dir = Path(sys.argv[1])
T, BATCH = 4, 3

torch.manual_seed(0)
net = nn.Sequential(
    layer.Conv2d(1, 4, 3, padding=1, bias=False),
    layer.BatchNorm2d(4),
    neuron.LIFNode(tau=2.0),
    layer.MaxPool2d(2),
    layer.Flatten(),
    layer.Linear(4 * 4 * 4, 10),
    neuron.IFNode(),
)
functional.set_step_mode(net, "m")
twin = copy.deepcopy(net)
x = (torch.rand(2, T, BATCH, 1, 8, 8) < 0.4).float()
y = torch.tensor([[1, 3, 5], [2, 4, 6]])
ce = nn.CrossEntropyLoss()


def loss_fn(out, target):
    return ce(out.mean(0), target)


def plain_step(model, optimizer, step):
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x[step]), y[step])
    loss.backward()
    optimizer.step()
    functional.reset_net(model)
    return loss.detach()


# The uncaptured twin.
twin_optimizer = torch.optim.SGD(twin.parameters(), lr=0.5, momentum=0.9)
twin_losses = [plain_step(twin, twin_optimizer, step) for step in range(2)]

# Step 1: the one-call scenario, as SpikingJelly's NeuroMC estimator runs it.
optimizer = torch.optim.SGD(net.parameters(), lr=0.5, momentum=0.9)
captured_losses = []
record_training_step(
    out_dir / "scenario", net, x[0], target=y[0],
    loss_fn=lambda out, target: captured_losses.append(loss_fn(out, target)) or captured_losses[-1],
    optimizer=optimizer, keep_step=True,  # this run goes on training from the recorded step
)
functional.reset_net(net)

# Step 2: the manual API, loss recorded (unlabeled), then reset.
with Recorder(out_dir / "manual", model=net, optimizer=optimizer) as recorder:
    optimizer.zero_grad(set_to_none=True)
    with recorder.stage("forward"):
        out = net(x[1])
    loss = loss_fn(out, y[1])
    with recorder.stage("backward"):
        loss.backward()
    with recorder.stage("optimizer"):
        optimizer.step()
    functional.reset_net(net)
captured_losses.append(loss.detach())

# What SpikingJelly 2.0.0's own tracker does on the same run (a third copy, uncaptured).
probe = copy.deepcopy(twin)
try:
    with ActiveModuleTracker():
        loss_fn(probe(x[0]), y[0]).backward()
    spikingjelly = "completed"
except RuntimeError as exc:
    spikingjelly = str(exc)

(out_dir / "result.json").write_text(json.dumps({
    "captured_losses": [float(v.detach()).hex() for v in captured_losses],
    "twin_losses": [float(v).hex() for v in twin_losses],
    "parameters_identical": all(
        torch.equal(a, b) for a, b in zip(net.state_dict().values(), twin.state_dict().values())
    ),
    "spikingjelly_tracker": spikingjelly,
}))
