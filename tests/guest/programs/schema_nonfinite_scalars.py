"""Ops with NaN and infinite Python scalars, positional and keyword (alpha, value, beta): the
events record them as {"$float": "nan" | "inf" | "-inf"} and the counters read them as those
doubles."""

import torch

from tests.guest.user import recording, report

torch.manual_seed(0)
net = torch.nn.Linear(4, 4)
x = torch.randn(3, 4)
with recording(model=net) as rec:
    with rec.stage("forward"):
        h = net(x)
        with_nan = h + float("nan")
        times_inf = h * float("inf")
        minus_neg_inf = h - float("-inf")
        nan_alpha = torch.add(h, x, alpha=float("nan"))
        inf_alpha = torch.sub(h, 1, alpha=float("inf"))
        inf_value = torch.addcmul(h, x, x, value=float("-inf"))
        gemm = torch.addmm(h, x, net.weight.detach().T, beta=float("nan"), alpha=float("inf"))
        clamped = h.clamp(min=float("-inf"), max=float("inf"))
report(with_nan=with_nan, times_inf=times_inf, minus_neg_inf=minus_neg_inf, nan_alpha=nan_alpha,
       inf_alpha=inf_alpha, inf_value=inf_value, gemm=gemm, clamped=clamped)
