"""cumsum, masked_fill and where (analyze/counters/sql.py's CUMSUM_ADDS and SELECTIONS):
beyond SpikingJelly, which has no rule for them (compat leaves them uncovered).

A running sum along dim takes n - 1 adds per line of n elements (FLOPs and ACs alike); a
selection takes each element from an operand or the fill value: no FLOP, its bytes read and
written once."""

from __future__ import annotations

import torch

from spiketrace.analyze import open_trace
from spiketrace.analyze.counters import count
from spiketrace.capture import Recorder

OPS = ("aten.cumsum.default", "aten.masked_fill_.Scalar", "aten.where.self")


def _program():
    x = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)  # arange writes its 96 B
    running = torch.cumsum(x, dim=-2)               # lines of 3 along dim 1: 8 lines, 2 adds each
    mask = x > 10
    running.masked_fill_(mask, 0.0)                 # in place: reads x (96 B), mask (24 B), writes 96
    return torch.where(mask, x, running)            # reads mask, x, running, writes out


def test_counts_by_hand(tmp_path):
    expected_values = _program()
    with Recorder(tmp_path / "t") as recorder, recorder.stage("forward"):
        got_values = _program()
    assert torch.equal(got_values, expected_values)
    with open_trace(tmp_path / "t") as trace:
        result = count(trace, ["flop", "ac", "memory_access"], strict=True)
        compat = count(trace, ["flop", "ac", "memory_access"], compat="spikingjelly")
    frame = result.frame[result.frame.scope == "Global"].set_index(["counter", "op"])["value"]
    # cumsum over (2, 3, 4) along dim -2: 24 elements in 8 lines of 3: 24 - 8 = 16 adds
    assert frame["flop", "aten.cumsum.default"] == 16
    assert frame["ac", "aten.cumsum.default"] == 16
    assert frame["memory_access", "aten.cumsum.default"] == 96 + 96
    assert frame["flop", "aten.masked_fill_.Scalar"] == 0
    assert frame["memory_access", "aten.masked_fill_.Scalar"] == 96 + 24 + 96
    assert frame["flop", "aten.where.self"] == 0
    assert frame["memory_access", "aten.where.self"] == 24 + 96 + 96 + 96
    assert ("ac", "aten.where.self") not in frame.index  # a selection accumulates nothing
    assert frame["memory_access", "aten.arange.default"] == 96
    uncovered = set(zip(compat.unsupported.counter, compat.unsupported.op))
    assert {("flop", op) for op in OPS} | {("memory_access", op) for op in OPS} <= uncovered
