"""A user's training loop whose trace directory runs out of space part-way.

usage: python write_failure.py TRACE_DIR RESULT_JSON

Eight SGD steps of a small spiking CNN under one Recorder with small parts (flushes happen
inside the model's forward) and bit-packed binary inputs kept; from step 5 the batches are
large, so the parts grow. The test puts TRACE_DIR on a tiny filesystem or caps the file
size. An uncaptured twin takes the same steps. RESULT_JSON (elsewhere) gets both runs'
losses (float.hex) and whether the parameters ended bit-identical.
"""

import copy
import json
import sys

import torch
import torch.nn.functional as F
from spikingjelly.activation_based import surrogate
from torch import nn

from spiketrace.capture import Recorder

trace_dir, result_path = sys.argv[1], sys.argv[2]
torch.manual_seed(0)


class SpikingCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 4, 3, stride=2, padding=1)
        self.spike = surrogate.ATan()
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        s = self.spike(self.conv1(x))
        s = self.spike(self.conv2(s))
        return self.head(s.mean((2, 3)))


generator = torch.Generator().manual_seed(1)
batches = []
for step in range(8):
    size = 16 if step < 5 else 128  # large random spike maps: parts of tens of kB each
    batches.append(((torch.rand(4, 1, size, size, generator=generator) < 0.5).float(), torch.tensor([0, 1, 2, 0])))

model = SpikingCNN()
twin = copy.deepcopy(model)


def train(net, optimizer, recorder=None):
    losses = []
    for x, y in batches:
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()).hex())
        if recorder is not None:
            recorder.step()
    return losses


twin_losses = train(twin, torch.optim.SGD(twin.parameters(), lr=0.1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
with Recorder(trace_dir, model=model, optimizer=optimizer, keep_binary_inputs=True, flush_events=150) as recorder:
    losses = train(model, optimizer, recorder)

with open(result_path, "w") as handle:
    json.dump({
        "losses": losses,
        "twin_losses": twin_losses,
        "parameters_identical": all(torch.equal(a, b) for a, b in zip(model.parameters(), twin.parameters())),
    }, handle)
