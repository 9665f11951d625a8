"""A user's spiking CNN whose convolutions carry every argument form torch passes to aten.

usage: python conv_argument_forms.py OUT_DIR

padding="valid" and "same" modules, functional convs with one-element lists (stride=[2],
padding=[1]), a fixed binary kernel, conv1d, conv3d and transposed convs, all fed spikes.
One SGD step is captured under OUT_DIR/trace. OUT_DIR/result.json holds, per forward conv in
call order, SpikingJelly's spike-tap count computed here independently (sum of the same conv
with an all-ones kernel; aten expands the short forms itself) divided by the output channels
per group, the both-binary sum for the binary kernel, and the loss of the captured and an
uncaptured run (float.hex).
"""

import copy
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from spikingjelly.activation_based import surrogate
from torch import nn

from spiketrace.capture import Recorder

out_dir = Path(sys.argv[1])
spike = surrogate.ATan()  # Heaviside forward, surrogate gradient backward


class FormsNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.valid = nn.Conv2d(1, 4, 3, padding="valid")
        self.same = nn.Conv2d(4, 4, 3, padding="same", dilation=2, bias=False)
        self.grouped = nn.Parameter(torch.randn(6, 2, 3, 3) * 0.6)
        self.register_buffer("edges", (torch.rand(2, 6, 2, 2) < 0.5).float())
        self.line = nn.Conv1d(6, 3, 3, stride=2, padding="valid")
        self.volume = nn.Conv3d(1, 2, (2, 3, 3), padding="valid")
        self.up = nn.ConvTranspose2d(6, 2, 3, stride=2, padding=1, output_padding=1)
        self.up_weight = nn.Parameter(torch.randn(6, 1, 2, 2) * 0.6)
        self.head = nn.LazyLinear(5)
        self.calls = None  # a list while the expectations are being taken
        for module in (self.valid, self.same, self.line, self.volume, self.up):
            module.register_forward_pre_hook(self.log_module_call)

    def log_module_call(self, module, args):
        if self.calls is not None:
            kind = {nn.Conv1d: "conv1d", nn.Conv2d: "conv2d", nn.Conv3d: "conv3d"}.get(type(module), "conv_transpose2d")
            options = dict(stride=module.stride, padding=module.padding, dilation=module.dilation, groups=module.groups)
            if kind == "conv_transpose2d":
                options["output_padding"] = module.output_padding
            self.calls.append((kind, args[0].detach().clone(), module.weight.detach().clone(), options))

    def conv(self, kind, x, w, **options):
        if self.calls is not None:
            self.calls.append((kind, x.detach().clone(), w.detach().clone(), options))
        return getattr(F, kind)(x, w, **options)

    def forward(self, x):
        s1 = spike(self.valid(x))
        s2 = spike(self.same(s1))
        s3 = spike(self.conv("conv2d", s2, self.grouped, stride=[2], padding=[1], groups=2))
        edges = self.conv("conv2d", s3, self.edges, stride=[2])
        line = self.line(s3.flatten(2))
        volume = self.volume(s1[:, :1].unsqueeze(1).expand(-1, -1, 3, -1, -1))
        up = self.up(s3)
        up2 = self.conv("conv_transpose2d", s3, self.up_weight, stride=[2], groups=6)
        features = [t.flatten(1) for t in (edges, line, volume, up, up2)]
        return self.head(torch.cat(features, 1))


torch.manual_seed(0)
model = FormsNet()
x = (torch.rand(2, 1, 12, 12) < 0.4).float()
target = torch.tensor([1, 3])
model(x)  # materialise the lazy head
twin = copy.deepcopy(model)


def train_step(net, optimizer):
    optimizer.zero_grad()
    loss = F.cross_entropy(net(x), target)
    loss.backward()
    optimizer.step()
    return loss.detach()


twin_loss = train_step(twin, torch.optim.SGD(twin.parameters(), lr=0.1))

optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model.calls = []
with torch.no_grad():
    model(x)  # the calls the captured step is about to make, with the same values
calls, model.calls = model.calls, None
with Recorder(out_dir / "trace", model=model, optimizer=optimizer) as recorder:
    optimizer.zero_grad()
    with recorder.stage("forward"):
        out = model(x)
    loss = F.cross_entropy(out, target)
    with recorder.stage("backward"):
        loss.backward()
    with recorder.stage("optimizer"):
        optimizer.step()

expected = []
with torch.no_grad():
    for kind, inp, w, options in calls:
        transposed = kind.startswith("conv_transpose")
        groups = options.get("groups", 1)
        per_group_out = w.shape[1] if transposed else w.shape[0] // groups
        taps = getattr(F, kind)(inp.double(), torch.ones_like(w, dtype=torch.float64), **options).sum().item()
        row = {"kind": kind, "taps": taps / per_group_out}
        if bool(((w == 0) | (w == 1)).all()):
            row["both_binary_sum"] = getattr(F, kind)(inp.double(), w.double(), **options).sum().item()
        expected.append(row)

(out_dir / "result.json").write_text(json.dumps({
    "expected": expected,
    "captured_loss": float(loss.detach()).hex(),
    "twin_loss": float(twin_loss).hex(),
}))
