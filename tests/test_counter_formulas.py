"""Each counter formula on a tiny captured case, the expected number worked out by hand.

Also the documented deviations (docs/deviations.md): the default number, and what
compat="spikingjelly" does instead.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from analyze import open_trace
from analyze.counters import StrictModeError, count
from capture import Recorder


def capture_ops(tmp_path, fn):
    with Recorder(tmp_path / "t") as recorder, recorder.stage("forward"):
        fn()
    return open_trace(tmp_path / "t")


def value(result, counter, op):
    return result.spikingjelly(counter)["Global"][op]


def test_dense_mm(tmp_path):
    x, y = torch.randn(2, 3) + 5, torch.randn(3, 4) + 5  # no 0/1 values: neither operand binary
    with capture_ops(tmp_path, lambda: x @ y) as trace:
        result = count(trace, ["flop", "memory_access", "mac", "ac", "synop"])
    op = "aten.mm.default"
    assert value(result, "flop", op) == 2 * 2 * 4 * 3  # 2*m*n*k
    assert value(result, "memory_access", op) == (6 + 12 + 8) * 4  # x, y, out in float32
    assert value(result, "mac", op) == 2 * 4 * 3
    assert value(result, "ac", op) == 0 and value(result, "synop", op) == 0


def test_binary_times_dense_mm(tmp_path):
    x = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]])  # 3 spikes
    y = torch.randn(3, 4) + 5
    with capture_ops(tmp_path, lambda: x @ y) as trace:
        result = count(trace, ["mac", "ac", "synop"])
    assert value(result, "mac", "aten.mm.default") == 0  # a spike operand: no multiplies
    assert value(result, "ac", "aten.mm.default") == 3 * 4  # each spike meets n=4 weights
    assert value(result, "synop", "aten.mm.default") == 12


def test_binary_conv1d_spike_taps(tmp_path):
    x = torch.tensor([[[1.0, 0.0, 1.0, 1.0]]])  # N=1, C=1, I=4
    w = torch.randn(1, 1, 3) + 5
    with capture_ops(tmp_path, lambda: torch.nn.functional.conv1d(x, w, padding=1)) as trace:
        result = count(trace, ["flop", "ac", "mac"])
    op = "aten.convolution.default"
    # K=3, pad=1, stride 1: output positions o=0..3 read inputs o-1..o+1, so each input
    # position is read cov = [2, 3, 3, 2] times; spikes at 0, 2, 3 -> 2 + 3 + 2 = 7 taps.
    assert value(result, "ac", op) == 7
    assert value(result, "mac", op) == 0
    assert value(result, "flop", op) == 2 * 1 * 3 * 4 * 1 * 1  # 2*C_in*K*O*C_out*N, no bias


def test_add_of_spikes_out_of_place_and_in_place(tmp_path):
    def ops():
        a, b = torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.tensor([1.0, 0.0, 0.0, 0.0])
        a + b  # both binary: nnz(a) + nnz(b) = 2 accumulates
        a.add_(b)  # in place: a is [2, 0, 0, 0] afterwards, no longer binary: numel(out) = 4

    with capture_ops(tmp_path, ops) as trace:
        result = count(trace, ["ac", "flop"])
    assert value(result, "ac", "aten.add.Tensor") == 2
    assert value(result, "ac", "aten.add_.Tensor") == 4
    assert value(result, "flop", "aten.add.Tensor") == 4


def test_reductions_sigmoid_and_batch_norm(tmp_path):
    bn = nn.BatchNorm1d(3)

    def ops():
        torch.ones(2, 5).sum(dim=1)  # 10 elements into 2
        torch.ones(6).sigmoid()
        bn(torch.randn(4, 3))  # train mode, affine, running stats

    with capture_ops(tmp_path, ops) as trace:
        result = count(trace, ["flop", "ac", "mac"])
    assert value(result, "flop", "aten.sum.dim_IntList") == 10 - 2
    assert value(result, "flop", "aten.sigmoid.default") == 4 * 6
    n, c = 12, 3
    # mean n, var 2n+2c, eps+sqrt 2c, normalise 2n, affine 2n, running stats 6c
    assert value(result, "flop", "aten.native_batch_norm.default") == n + 2 * n + 2 * c + 2 * c + 2 * n + 2 * n + 6 * c
    assert value(result, "ac", "aten.native_batch_norm.default") == (n - c) + n + c + n + 2 * c
    assert value(result, "mac", "aten.native_batch_norm.default") == n + 2 * c


def test_scopes_receive_parent_counts(tmp_path):
    model = nn.Sequential(nn.Linear(3, 2, bias=False))
    with Recorder(tmp_path / "t", model=model), torch.no_grad():
        model(torch.randn(4, 3) + 5)
    with open_trace(tmp_path / "t") as trace:
        counts = count(trace, ["flop"]).spikingjelly("flop")
    mm = 2 * 4 * 2 * 3
    assert counts["Global"]["aten.mm.default"] == counts["Sequential"]["aten.mm.default"] == mm
    assert counts["Sequential.0"]["aten.mm.default"] == mm
    assert counts["Global"]["aten.t.default"] == 0  # covered ops are recorded even at 0


# --- documented deviations ------------------------------------------------------------------

def test_scalar_add_positional_alpha(tmp_path):
    x = torch.randn(5)
    with capture_ops(tmp_path, lambda: torch.ops.aten.add.Scalar(x, 2.0, 3.0)) as trace:
        fixed = count(trace, ["flop"])
        compat = count(trace, ["flop"], compat="spikingjelly")
    assert value(fixed, "flop", "aten.add.Scalar") == 1 + 5  # alpha=3 scales the scalar: one more flop
    assert value(compat, "flop", "aten.add.Scalar") == 5  # SpikingJelly reads alpha from kwargs only


def test_logical_not_memory(tmp_path):
    x = torch.tensor([True, False] * 4)
    with capture_ops(tmp_path, lambda: torch.logical_not(x)) as trace:
        fixed = count(trace, ["memory_access"])
        compat = count(trace, ["memory_access"], compat="spikingjelly")
        with pytest.raises(StrictModeError, match="logical_not"):
            count(trace, ["memory_access"], compat="spikingjelly", strict=True)
    assert value(fixed, "memory_access", "aten.logical_not.default") == 8 + 8  # read x, write out
    assert compat.aborts.to_dict("records") == [{"counter": "memory_access", "op": "aten.logical_not.default", "calls": 1}]


def test_batch_norm_backward_without_affine(tmp_path):
    bn = nn.BatchNorm1d(3, affine=False)
    x = torch.randn(4, 3, requires_grad=True)
    with Recorder(tmp_path / "t") as recorder:
        out = bn(x)
        with recorder.stage("backward"):
            out.sum().backward()
    with open_trace(tmp_path / "t") as trace:
        fixed = count(trace, ["flop"])
        compat = count(trace, ["flop"], compat="spikingjelly")
    n, c = 12, 3  # grad_input only (mask [True, False, False]) in training
    expected = 2 * n + (n - c) + (2 * n - c) + (5 * n + 2 * c)
    assert value(fixed, "flop", "aten.native_batch_norm_backward.default") == expected
    assert list(compat.aborts["op"]) == ["aten.native_batch_norm_backward.default"]


def test_unsupported_ops_are_reported_with_volume(tmp_path):
    with capture_ops(tmp_path, lambda: torch.ones(4).exp()) as trace:
        result = count(trace, ["flop"])
        with pytest.raises(StrictModeError, match="aten.exp.default"):
            count(trace, ["flop"], strict=True)
    rows = result.unsupported.set_index("op")
    assert rows.loc["aten.exp.default", "calls"] == 1
    assert rows.loc["aten.exp.default", "tensor_bytes"] == 16 + 16


def test_filters_select_events(tmp_path):
    with Recorder(tmp_path / "t") as recorder:
        with recorder.stage("forward"):
            torch.ones(3).neg()  # 3 flops
        with recorder.stage("backward"):
            torch.ones(5).neg()  # 5 flops
            torch.ones(2, 2).sum()  # 4 - 1 = 3 flops
    with open_trace(tmp_path / "t") as trace:
        forward = count(trace, ["flop"], stage="forward").totals()["flop"]
        backward = count(trace, ["flop"], phase="backward").totals()["flop"]
        neg_only = count(trace, ["flop"], ops="aten.neg").totals()["flop"]
        by_stage = count(trace, ["flop"], by=["stage"]).frame
    assert (forward, backward, neg_only) == (3, 5 + 3, 3 + 5)
    global_rows = by_stage[by_stage.scope == "Global"].groupby("stage")["value"].sum().to_dict()
    assert global_rows == {"forward": 3, "backward": 8}


def test_chunked_counting_equals_one_pass(tmp_path):
    from capture.example import record_demo

    with open_trace(record_demo(tmp_path / "demo")) as trace:
        whole = count(trace, by=["stage"])
        chunked = count(trace, by=["stage"], chunk_events=37)  # 225 events in 7 chunks
    key = ["counter", "scope", "op", "stage"]
    assert chunked.frame.sort_values(key, ignore_index=True).equals(whole.frame.sort_values(key, ignore_index=True))
    assert chunked.unsupported.equals(whole.unsupported)
