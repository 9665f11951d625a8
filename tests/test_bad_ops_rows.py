"""One bad op costs at most that op's rows, never the trace (in process; tests/guest/test_bad_ops.py
runs the same cases as a user's scripts).

An op's rows are all or nothing: its event, its event_tensors rows and their run (the event's
seq and row count, capture/store/table_buffer.py BUFFER_RUNS) are appended together once every
tensor is described, so a failure reported while describing one (which drops partial rows)
cannot leave a run longer than its rows. Tensors whose memory does not hold their values as
they read (negative views, quantized tensors) get exact statistics of their values; a nested
tensor, which has no single shape, is recorded with null at its ragged dimension
(tests/test_nested_tensors.py).
"""

from __future__ import annotations

import json
import warnings

import pyarrow.parquet as pq
import pytest
import torch

import spiketrace.capture.tensors.registry
from spiketrace.analyze import open_trace
from spiketrace.capture import Recorder
from spiketrace.capture.store.table_buffer import TableBuffer
from spiketrace.capture.tensors.value_counts import immediate_stats, python_stats
from spiketrace.schemas.tables import TABLES

# SPIKETRACE_SLOW_PATHS of the Python record (the compiled one checks every tensor before it
# appends a row) with the compiled scan (immediate_stats) or the Python one (python_stats)
SCANS = {"compiled_scan": "native_record", "python_scan": "all"}


def _manifest(path) -> dict:
    return json.loads((path / "manifest.json").read_text())


def _valid(path) -> None:
    opened = open_trace(path)
    try:
        assert opened.validate() == []
    finally:
        close = getattr(opened, "close", None)
        if close is not None:
            close()


def _runs_are_whole(path) -> dict[int, list[int]]:
    """Every event's event_tensors rows numbered 0..n-1, each naming a tensors row; seq -> ks."""
    uses = pq.read_table(path / "event_tensors").to_pylist()
    tensor_ids = set(pq.read_table(path / "tensors", columns=["tensor_id"]).column(0).to_pylist())
    events = set(pq.read_table(path / "events", columns=["seq"]).column(0).to_pylist())
    ks: dict[int, list[int]] = {}
    for row in uses:
        ks.setdefault(row["seq"], []).append(row["k"])
        assert row["tensor_id"] in tensor_ids and row["seq"] in events, row
    for seq, numbers in ks.items():
        assert numbers == list(range(len(numbers))), (seq, numbers)
    return ks


@pytest.mark.parametrize("scan", sorted(SCANS))
def test_a_statistic_failing_mid_op_costs_that_statistic_not_the_trace(tmp_path, monkeypatch, scan):
    # The second operand of the add fails its scan: the op keeps all three event_tensors rows
    # (x, y, out), y's statistics null, one `statistics` entry naming the op; before the fix its
    # run of 3 covered 2 rows and the flush failed the whole trace ("rows end inside a run").
    monkeypatch.setenv("SPIKETRACE_SLOW_PATHS", SCANS[scan])
    x, y = torch.randn(3, 4), torch.full((3, 4), 7.0)
    registry = spiketrace.capture.tensors.registry
    scans = {"immediate_stats": registry.immediate_stats, "python_stats": registry.python_stats}

    def failing(real):
        def scan(t):
            if t.numel() == 12 and bool((t == 7).all()):
                raise RuntimeError("injected")
            return real(t)
        return scan

    for name, real in scans.items():
        monkeypatch.setattr(spiketrace.capture.tensors.registry, name, failing(real))
    with Recorder(tmp_path / "t") as rec, rec.stage("forward"):
        z = x + y
        w = z * 2
    manifest = _manifest(tmp_path / "t")
    assert manifest["status"] == "complete"
    assert [(e["site"], e["what"]) for e in manifest["degraded"]] == [("statistics", "aten.add.Tensor")]
    _valid(tmp_path / "t")
    events = pq.read_table(tmp_path / "t" / "events").to_pylist()
    assert [e["op"] for e in events] == ["aten.add.Tensor", "aten.mul.Tensor"]
    ks = _runs_are_whole(tmp_path / "t")
    assert [len(ks[e["seq"]]) for e in events] == [3, 2]  # x, y, out; z, out (2 is no tensor)
    nnz = {row["tensor_id"]: row["nnz"] for row in pq.read_table(tmp_path / "t" / "tensors").to_pylist()}
    uses = [u for u in pq.read_table(tmp_path / "t" / "event_tensors").to_pylist() if u["seq"] == events[0]["seq"]]
    assert [nnz[u["tensor_id"]] for u in uses] == [12, None, 12]  # randn, the failed one, randn + 7
    assert w.shape == (3, 4)


def test_a_describe_failing_mid_op_leaves_none_of_its_rows(tmp_path, monkeypatch):
    # A failure that stops the record itself (not a statistic): the op has no event and no
    # event_tensors row; the ops before and after it are whole.
    monkeypatch.setenv("SPIKETRACE_SLOW_PATHS", "all")
    real = spiketrace.capture.tensors.registry.TensorRegistry.describe
    marked = torch.full((5,), 3.0)

    def describe(self, t, seq, *args, **kwargs):
        if t is marked:
            raise RuntimeError("injected")
        return real(self, t, seq, *args, **kwargs)

    monkeypatch.setattr(spiketrace.capture.tensors.registry.TensorRegistry, "describe", describe)
    a = torch.ones(5)
    with Recorder(tmp_path / "t") as rec, rec.stage("forward"):
        b = a + 1
        c = a * marked  # marked is the second operand: a's row was described before it failed
        d = b - 1
    manifest = _manifest(tmp_path / "t")
    assert manifest["status"] == "complete"
    assert [(e["site"], e["what"]) for e in manifest["degraded"]] == [("dispatch", "aten.mul.Tensor")]
    _valid(tmp_path / "t")
    events = pq.read_table(tmp_path / "t" / "events").to_pylist()
    assert [e["op"] for e in events] == ["aten.add.Tensor", "aten.sub.Tensor"]
    assert sorted(len(ks) for ks in _runs_are_whole(tmp_path / "t").values()) == [2, 2]  # a tensor, out
    assert c.shape == d.shape == (5,)


def test_a_run_its_rows_no_longer_fill_is_dropped_with_them():
    # Runs [2, 3] over 5 rows, then the last two rows lost (a record cut short after its run):
    # the broken run goes with the row it still holds, so no row is left in a run not its own.
    buffer = TableBuffer("event_tensors", TABLES["event_tensors"])
    slots, ids = buffer.columns["$slot"], buffer.columns["tensor_id"]
    for seq, count in ((7, 2), (8, 3)):
        for k in range(count):
            slots.append(("arg", k, None, None))
            ids.append(10 * seq + k)
        buffer.run_values.append(seq)
        buffer.run_lengths.append(count)
    del slots[3:], ids[3:]
    buffer.drop_partial_row()
    assert len(buffer) == buffer.complete_rows() == 2 and list(buffer.run_values) == [7]
    assert buffer.to_arrow(2).column("tensor_id").to_pylist() == [70, 71]


# -- tensors whose memory does not hold their values as they read --------------------------------

def _expected(values: torch.Tensor) -> tuple[int, bool]:
    return int((values != 0).sum()), bool(((values == 0) | (values == 1)).all())


@pytest.mark.parametrize("numel", [20, 4096])  # both sides of value_counts.SMALL_TENSOR
@pytest.mark.parametrize("kind", ["analog", "binary"])
def test_negative_views_get_the_statistics_of_their_values(numel, kind):
    torch.manual_seed(0)
    x = torch.randn(numel) if kind == "analog" else -(torch.randn(numel) > 0).float()  # -x is 0/1
    x[::7] = 0
    view = torch._neg_view(x)
    assert view.is_neg()
    for scan in (python_stats, immediate_stats):
        assert scan(view) == _expected(-x)


@pytest.mark.parametrize("numel", [20, 4096])
def test_quantized_tensors_get_the_statistics_of_their_dequantized_values(numel):
    torch.manual_seed(0)
    x = torch.randn(numel)
    spikes = (torch.randn(numel) > 0).float()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch deprecates quantized tensor creation
        cases = [torch.quantize_per_tensor(x, 0.1, 0, torch.quint8),  # zero point 0: int_repr's zeros
                 torch.quantize_per_tensor(x, 0.05, 10, torch.qint8),  # zero is the stored 10
                 torch.quantize_per_tensor(spikes, 1.0, 0, torch.quint8),  # 0/1 exactly
                 torch.quantize_per_channel(x.reshape(4, -1), torch.full((4,), 0.1), torch.zeros(4, dtype=torch.long),
                                            0, torch.qint8)]
    for q in cases:
        for scan in (python_stats, immediate_stats):
            assert scan(q) == _expected(q.dequantize()), q.qscheme()
    assert python_stats(cases[2])[1] is True


@pytest.mark.parametrize("defer", [False, True])
def test_negative_views_and_quantized_tensors_are_recorded_with_statistics(tmp_path, defer):
    torch.manual_seed(0)
    x = torch.randn(32, 40)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = torch.quantize_per_tensor((x > 0).float(), 1.0, 0, torch.quint8)
    with Recorder(tmp_path / "t", defer_statistics=defer) as rec, rec.stage("forward"):
        y = torch._neg_view(x)
        z = y * 2
        r = y.resolve_neg()
        d = q.dequantize()
        i = q.int_repr()
    manifest = _manifest(tmp_path / "t")
    assert manifest["status"] == "complete" and manifest["degraded"] == []
    _valid(tmp_path / "t")
    _runs_are_whole(tmp_path / "t")
    rows = pq.read_table(tmp_path / "t" / "tensors").to_pylist()
    assert rows and all(row["nnz"] is not None for row in rows)
    quantized = [row for row in rows if row["dtype"] == "quint8"]
    assert quantized and all((row["nnz"], row["is01"]) == _expected(d) for row in quantized)
    assert z.shape == r.shape == i.shape == (32, 40)


def test_a_warning_made_an_error_by_the_user_is_not_a_capture_failure(tmp_path, monkeypatch):
    # A scan that warns (torch's warnings, under the user's warnings.simplefilter("error")):
    # the statistics are taken all the same, nothing is degraded, and the user's filter stays.
    real = spiketrace.capture.tensors.registry.immediate_stats

    def warning_scan(t):
        warnings.warn("a torch warning met while scanning", UserWarning, stacklevel=1)
        return real(t)

    monkeypatch.setattr(spiketrace.capture.tensors.registry, "immediate_stats", warning_scan)
    monkeypatch.setenv("SPIKETRACE_SLOW_PATHS", "native_record")  # every scan through the registry
    x = torch.randn(8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Recorder(tmp_path / "t") as rec, rec.stage("forward"):
            spikes = (x > 0).float()
        with pytest.raises(UserWarning):
            warnings.warn("the user's own warning", UserWarning, stacklevel=1)
    manifest = _manifest(tmp_path / "t")
    assert manifest["status"] == "complete" and manifest["degraded"] == []
    rows = pq.read_table(tmp_path / "t" / "tensors").to_pylist()
    assert rows and all(row["nnz"] is not None for row in rows)
    assert spikes.shape == (8, 8)


def test_a_functorch_wrapped_tensor_has_null_statistics_and_no_failure():
    seen = []
    registry = spiketrace.capture.tensors.registry.TensorRegistry(
        TableBuffer("tensors", TABLES["tensors"]), TableBuffer("tensor_frees", TABLES["tensor_frees"]),
        lambda: 0, {}, report_failure=lambda exc, seq: seen.append(exc))

    def statistics(t):
        assert torch._C._functorch.is_functorch_wrapped_tensor(t)
        assert registry._statistics(t, 0) == (None, None)
        return t.sum()

    torch.func.vmap(statistics)(torch.randn(4, 300))
    torch.func.grad(statistics)(torch.randn(300))
    assert seen == []


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
@pytest.mark.parametrize("layout", [torch.strided, torch.jagged])
def test_an_op_on_a_nested_tensor_is_recorded_with_the_rest(tmp_path, layout):
    # Before schema 1.4 the op on the nested tensor was left out (named in `degraded`); now it
    # is recorded, its nested operand with null at the ragged dimension.
    parts = [torch.randn(2, 3), torch.randn(4, 3)]
    with Recorder(tmp_path / "t") as rec, rec.stage("forward"):
        before = parts[0] + 1
        nested = torch.nested.nested_tensor(parts, layout=layout)
        doubled = nested * 2
        after = parts[1] * 3
    manifest = _manifest(tmp_path / "t")
    assert manifest["status"] == "complete" and manifest["degraded"] == []
    _valid(tmp_path / "t")
    _runs_are_whole(tmp_path / "t")
    ops = [e["op"] for e in pq.read_table(tmp_path / "t" / "events").to_pylist()]
    assert ops[0] == "aten.add.Tensor" and ops[-1] == "aten.mul.Tensor" and ops.count("aten.mul.Tensor") == 2
    rows = pq.read_table(tmp_path / "t" / "tensors").to_pylist()
    # (the jagged layout's construction also views a meta placeholder, whose lengths are unknown)
    assert {(tuple(r["shape"]), r["numel"]) for r in rows if r["nested_shapes"] and not r["is_meta"]} == \
        {((2, None, 3), 18)}
    assert [t.shape for t in doubled.unbind()] == [(2, 3), (4, 3)] and before.shape == (2, 3) and after.shape == (4, 3)
