"""torch.func transforms inside an open Recorder: grad of a loss and vmap over a batch of
functions doing tensor ops, spiking-like thresholds included."""

import torch

from tests.guest.user import recording, report

torch.manual_seed(0)
x = torch.randn(8, 300)  # each row past value_counts.SMALL_TENSOR


def loss(t):
    return (t * t).sum() + (t > 0).float().mul(t).sum()


def per_row(t):
    return ((t * 2).relu() + (t > 0).float()).sum()


net = torch.nn.Sequential(torch.nn.Linear(300, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
params = dict(net.named_parameters())


def model_loss(p, t):
    return torch.func.functional_call(net, p, (t,)).pow(2).sum()


# Bound to the model: its module hooks see the transforms' wrapped tensors, which have no storage.
with recording(model=net) as rec:
    with rec.stage("forward"):
        gradient = torch.func.grad(loss)(x)
        rows = torch.func.vmap(per_row)(x)
        both = torch.func.vmap(torch.func.grad(loss))(x)
        per_sample = torch.func.vmap(torch.func.grad(model_loss), in_dims=(None, 0))(params, x)
        outputs = torch.func.vmap(net)(x)
report(gradient=gradient, rows=rows, both=both, per_sample=per_sample, outputs=outputs)
