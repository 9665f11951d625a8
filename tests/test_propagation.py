"""Each statistics propagation rule (capture/tensors/propagation.py) gives exactly what a scan of the
output gives, on operands chosen to break a careless rule: NaN, infinities, -0.0, values that
underflow or round, unsigned wrap-around, promotion and broadcasting; and it applies where
it should (a rule that always said "scan" would pass the first test and fail the second)."""

from __future__ import annotations

import math

import pytest
import torch

from spiketrace.capture.tensors.propagation import PROPAGATION
from spiketrace.capture.tensors.value_counts import immediate_stats


def _tensors():
    g = torch.Generator().manual_seed(0)
    binary = (torch.rand(600, generator=g) < 0.3).float()
    odd = torch.randn(600, generator=g)
    odd[:6] = torch.tensor([math.nan, math.inf, -math.inf, -0.0, 0.0, 1e-45])
    return {
        "binary": binary, "binary f16": binary.half(), "binary f64": binary.double(),
        "binary u8": binary.to(torch.uint8), "binary i64": binary.long(), "bool": binary.bool(),
        "odd": odd, "odd f16": odd.half(), "zeros": torch.zeros(600), "minus zeros": torch.full((600,), -0.0),
        "zeros u8": torch.zeros(600, dtype=torch.uint8), "row": torch.ones(1),
    }


SCALARS = [0, 0.0, -0.0, 1, 1.0, 2, 2.5, -1.0, 1e-50, 1e-30, 1e300, 1.0000001, 65504.0, 1e5, math.inf, math.nan, True]
OPS = {"aten.add.Tensor": torch.add, "aten.sub.Tensor": torch.sub, "aten.mul.Tensor": torch.mul,
       "aten.div.Tensor": torch.div}


def _check(op, args, kwargs, out, applied):
    known = {id(t): immediate_stats(t) for t in args if isinstance(t, torch.Tensor)}
    result = PROPAGATION[op](args, kwargs, out, lambda t: known.get(id(t)))
    if result is not None:
        assert tuple(result) == immediate_stats(out), (op, args, kwargs)
        applied.append(op)


def test_arithmetic_rules_equal_a_scan_of_the_output():
    tensors, applied = _tensors(), []
    for op, function in OPS.items():
        for x in tensors.values():
            for c in SCALARS:
                for kwargs in ({}, {"alpha": 2}) if op in ("aten.add.Tensor", "aten.sub.Tensor") else ({},):
                    try:
                        out = function(x, c, **kwargs)
                    except RuntimeError:  # e.g. subtraction with a bool tensor
                        continue
                    _check(op, (x, c), kwargs, out, applied)
            if op in ("aten.add.Tensor", "aten.sub.Tensor"):
                for y in tensors.values():
                    for kwargs in ({}, {"alpha": 2}):
                        try:
                            out = function(x, y, **kwargs)
                        except RuntimeError:
                            continue
                        _check(op, (x, y), kwargs, out, applied)
    # Where each rule must apply (counted over the cases above): x * 0 and x * 2.5 of a 0/1 x,
    # x + 0, x - 0.0, x * 1, x / 1 of any x, and an all-zero tensor operand of add and sub.
    assert all(applied.count(op) > 0 for op in OPS), {op: applied.count(op) for op in OPS}


@pytest.mark.parametrize("op, x, c, expected", [
    # Hand-derived: 600-element tensors; the binary one has n ones.
    ("aten.mul.Tensor", "binary", 0.0, lambda n: (0, True)),
    ("aten.mul.Tensor", "binary", -0.0, lambda n: (0, True)),  # -0.0 is a zero
    ("aten.mul.Tensor", "binary", 2.5, lambda n: (n, False)),
    ("aten.mul.Tensor", "binary f16", 1e-30, lambda n: (0, True)),  # 1e-30 rounds to 0 in half
    ("aten.mul.Tensor", "binary f16", 1.0000001, lambda n: (n, True)),  # rounds to 1 in half
    ("aten.mul.Tensor", "odd", 1.0, lambda n: None),  # x * 1: x's own statistics
    ("aten.sub.Tensor", "odd", 0.0, lambda n: None),
    ("aten.div.Tensor", "binary", 1, lambda n: None),
])
def test_a_rule_applies_with_the_hand_derived_result(op, x, c, expected):
    tensors = _tensors()
    t = tensors[x]
    out = OPS[op](t, c)
    n = int((tensors["binary"] != 0).sum())
    known = {id(t): immediate_stats(t)}
    result = PROPAGATION[op]((t, c), {}, out, lambda u: known.get(id(u)))
    assert result is not None
    assert tuple(result) == (expected(n) or immediate_stats(t))
    assert tuple(result) == immediate_stats(out)


def test_no_rule_for_what_does_not_follow():
    tensors = _tensors()
    known = {id(t): immediate_stats(t) for t in tensors.values()}
    stats = lambda t: known.get(id(t))  # noqa: E731 - the rules' stats callback, in one line
    x, row = tensors["odd"], tensors["row"]
    assert PROPAGATION["aten.mul.Tensor"]((x, 2.5), {}, x * 2.5, stats) is None  # not 0/1: 2.5 * 1e-45 underflows
    assert PROPAGATION["aten.mul.Tensor"]((x, math.inf), {}, x * math.inf, stats) is None
    assert PROPAGATION["aten.add.Tensor"]((x, 0), {"alpha": 2}, torch.add(x, 0, alpha=2), stats) is None
    zeros = torch.zeros(600, 1)
    known[id(zeros)] = immediate_stats(zeros)
    assert PROPAGATION["aten.add.Tensor"]((row, zeros), {}, row + zeros, stats) is None  # broadcast
    assert PROPAGATION["aten.mul.Tensor"]((tensors["binary i64"], 2.5), {}, tensors["binary i64"] * 2.5, stats) is None
