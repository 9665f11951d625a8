"""Negative views (torch._neg_view) of tensors small and large enough for each statistics path:
ops on the view, resolve_neg, a spike threshold of it, a GEMM with it."""

import torch

from tests.guest.user import recording, report

torch.manual_seed(0)
small = torch.randn(4, 5)
large = torch.randn(32, 64)  # past value_counts.SMALL_TENSOR: the vectorised statistics
spikes = (torch.randn(32, 64) > 0).float()
with recording() as rec:
    with rec.stage("forward"):
        outs = []
        for x in (small, large, spikes):
            y = torch._neg_view(x)
            z = y * 2
            outs += [z, y.resolve_neg(), (y < 0).float(), y.abs(), y.sum()]
        product = torch._neg_view(spikes) @ spikes.t()
report(outs=outs, product=product)
