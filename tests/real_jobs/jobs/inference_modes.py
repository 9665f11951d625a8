"""A user's SpikingJelly conv net evaluated under torch.no_grad() and under torch.inference_mode().

usage: python inference_modes.py OUT_DIR

Captures the same multi-step forward (conv, batch norm, LIF, max-pool, flatten, linear, LIF)
once under each mode (OUT_DIR/no_grad, OUT_DIR/inference_mode), and runs it uncaptured under
inference_mode too. Writes OUT_DIR/result.json: whether every output is bit-identical to the
uncaptured one, and the dtype/shape of the outputs.
"""

import json
import sys
from pathlib import Path

import torch
from spikingjelly.activation_based import functional, layer, neuron
from torch import nn

from spiketrace.capture import Recorder

out_dir = Path(sys.argv[1])
torch.manual_seed(0)
net = nn.Sequential(
    layer.Conv2d(2, 6, 3, padding=1),
    layer.BatchNorm2d(6),
    neuron.LIFNode(tau=2.0),
    layer.MaxPool2d(2),
    layer.Flatten(),
    layer.Linear(6 * 4 * 4, 5),
    neuron.LIFNode(tau=2.0),
)
functional.set_step_mode(net, "m")
with torch.no_grad():  # a trained-looking net: BN statistics that are not the identity
    net[1].running_mean.uniform_(-0.2, 0.2)
    net[1].running_var.uniform_(0.5, 1.5)
    net[0].weight.mul_(8.0)  # so that both neuron layers spike
    net[5].weight.mul_(8.0)
net.eval()
x = (torch.rand(4, 3, 2, 8, 8) < 0.3).float()


def forward(context, path=None):
    functional.reset_net(net)
    if path is None:
        with context():
            return net(x)
    with Recorder(path, model=net) as recorder, context(), recorder.stage("inference"):
        return net(x)


plain = forward(torch.inference_mode)
outputs = {
    "no_grad": forward(torch.no_grad, out_dir / "no_grad"),
    "inference_mode": forward(torch.inference_mode, out_dir / "inference_mode"),
}
result = {
    "identical": {name: bool(torch.equal(out, plain)) for name, out in outputs.items()},
    "inference_tensor": {name: out.is_inference() for name, out in outputs.items()},
    "spikes": int(plain.sum()),
}
(out_dir / "result.json").write_text(json.dumps(result))
