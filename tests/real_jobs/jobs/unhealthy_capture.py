"""A user's training step whose capture has everything to report about itself.

usage: python unhealthy_capture.py OUT_DIR

A multi-step SpikingJelly CNN, wrapped by torch.compile (backend "eager"), trained one step
through record_training_step with a loss module (SpikingJelly's tracker would abort there:
a tracker underflow), while the capture's description of every convolution fails (injected,
as a real bug in capture/ would): the trace is degraded. Writes OUT_DIR/trace and
OUT_DIR/result.json ({"skip": reason} where torch.compile cannot run here).
"""

import json
import sys
from pathlib import Path

import torch
from spikingjelly.activation_based import functional, layer, neuron
from torch import nn

import spiketrace.capture.ops.dispatch
from spiketrace.capture import record_training_step

out_dir = Path(sys.argv[1])
try:
    torch.compile(lambda t: t * 2, backend="eager")(torch.ones(2))
except Exception as exc:  # noqa: BLE001 - whatever stops torch.compile here skips the job
    (out_dir / "result.json").write_text(json.dumps({"skip": f"torch.compile cannot run here: {exc}"}))
    sys.exit(0)

real_written_arguments = spiketrace.capture.ops.dispatch.written_arguments


def written_arguments(func):
    if "convolution" in str(func):
        raise ValueError("injected: describing a convolution fails")
    return real_written_arguments(func)


spiketrace.capture.ops.dispatch.written_arguments = written_arguments

torch.manual_seed(0)
T, BATCH = 2, 3
net = nn.Sequential(
    layer.Conv2d(1, 4, 3, padding=1, bias=False), neuron.LIFNode(tau=2.0),
    layer.Flatten(), layer.Linear(4 * 6 * 6, 5), neuron.IFNode(),
)
functional.set_step_mode(net, "m")
model = torch.compile(net, backend="eager")
x = (torch.rand(T, BATCH, 1, 6, 6) < 0.4).float()
y = torch.tensor([1, 3, 4])
ce = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
record_training_step(out_dir / "trace", model, x, target=y, loss_fn=lambda out, target: ce(out.mean(0), target),
                     optimizer=optimizer)
(out_dir / "result.json").write_text(json.dumps({"ok": True}))
