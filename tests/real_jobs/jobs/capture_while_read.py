"""A user's training loop captured with small flushes, slowly enough for a reader to watch.

usage: python capture_while_read.py OUT_DIR STEPS

Trains a small spiking conv net (multi-step LIF, BatchNorm, a Linear) with Adam for STEPS
steps into OUT_DIR/trace, flushing every 40 events, so the trace gains committed flushes
while a reader opens it again and again. Writes OUT_DIR/done when the Recorder has closed.
"""

import sys
from pathlib import Path

import torch
from spikingjelly.activation_based import functional, layer, neuron
from torch import nn

from spiketrace.capture import Recorder

out_dir, STEPS = Path(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(0)
net = nn.Sequential(
    layer.Conv2d(1, 4, 3, padding=1), layer.BatchNorm2d(4), neuron.LIFNode(),
    layer.Flatten(), layer.Linear(4 * 8 * 8, 5),
)
functional.set_step_mode(net, "m")
optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
with Recorder(out_dir / "trace", model=net, optimizer=optimizer, flush_events=40) as recorder:
    for _step in range(STEPS):
        x = (torch.rand(3, 2, 1, 8, 8) < 0.4).float()
        optimizer.zero_grad()
        with recorder.stage("forward"):
            loss = net(x).mean(0).pow(2).mean()
        with recorder.stage("backward"):
            loss.backward()
        with recorder.stage("optimizer"):
            optimizer.step()
        with recorder.suspend():
            functional.reset_net(net)
        recorder.step()
(out_dir / "done").write_text("ok")
