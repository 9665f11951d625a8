"""Nested tensors (strided and jagged layouts) in a user's program: the trace keeps every op
around them, and records the nested tensors themselves (schema 1.4): `shape` holds the
component count first and null at each dimension where the components differ (the ragged
one), `nested_shapes` each component's shape, `numel` the components' total; so the counters
take the ragged dimension at its actual lengths.

What the dispatch mode sees of a Linear over a jagged tensor is one `aten.linear.default`
whose x is the NestedTensor subclass: the ops on its values buffer run inside the subclass's
own handler, below any mode. Its rules read numel(x), so they count the rows the components
really have.
"""

from __future__ import annotations

import json
import re
from collections import Counter

import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.fx.experimental.symbolic_shapes import ShapeEnv
from torch.overrides import resolve_name
from torch.utils._python_dispatch import TorchDispatchMode

from spiketrace.analyze import open_trace
from spiketrace.analyze.counters import count
from spiketrace.capture import Recorder
from spiketrace.capture.ops.arguments import encode_call
from spiketrace.capture.store.writer import TraceWriter
from tests.test_fast_paths import read_tables
from tests.trace_surgery import rewrite_part

pytestmark = pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")

# SPIKETRACE_SLOW_PATHS: the compiled record (which leaves a nested tensor to the Python one)
# and the Python record alone
RECORDS = {"compiled_record": "", "python_record": "all"}
LENGTHS = (2, 5)  # the components' rows: 7 in all, of 8 features each


def _manifest(path) -> dict:
    return json.loads((path / "manifest.json").read_text())


def _program(path, net):
    """The user's program: plain ops before and after, both nested layouts, to_padded_tensor,
    the Linear over the jagged tensor and over the padded one."""
    torch.manual_seed(0)
    parts = [torch.randn(n, 8) for n in LENGTHS]
    with Recorder(path, model=net) as rec, rec.stage("forward"):
        before = parts[0] + 1
        jagged = torch.nested.nested_tensor(parts, layout=torch.jagged)
        strided = torch.nested.nested_tensor(parts)
        padded = strided.to_padded_tensor(0.0)
        jagged_out = net(jagged)
        padded_out = net(padded)
        after = parts[1] * 3
    return parts, before, jagged_out, padded_out, after


@pytest.fixture(params=sorted(RECORDS))
def traced(request, tmp_path, monkeypatch):
    monkeypatch.setenv("SPIKETRACE_SLOW_PATHS", RECORDS[request.param])
    net = nn.Linear(8, 4)
    return tmp_path / "t", net, _program(tmp_path / "t", net)


def test_a_program_with_nested_tensors_keeps_its_whole_trace(traced):
    # Before: status 'failed', 0 events of the ops it ran (ArrowInvalid: Could not convert j1
    # with type SymInt), after degraded entries for every op touching a nested tensor.
    path, net, (parts, before, jagged_out, padded_out, after) = traced
    manifest = _manifest(path)
    assert manifest["status"] == "complete", manifest.get("error")
    assert manifest["degraded"] == []
    ops = [e["op"] for e in pq.read_table(path / "events").to_pylist()]
    assert ops[0] == "aten.add.Tensor" and ops[-1] == "aten.mul.Tensor"
    for op in ("aten._nested_tensor_from_tensor_list.default", "aten.to_padded_tensor.default",
               "aten.linear.default", "aten.addmm.default"):
        assert op in ops, op
    kinds = [e["kind"] for e in pq.read_table(path / "module_events").to_pylist()]
    assert kinds == ["forward_pre", "forward_post"] * 2  # the Linear's two calls, nested one included
    # the user's values are untouched
    expected = [net(p) for p in parts]
    assert all(torch.equal(a, b) for a, b in zip(jagged_out.unbind(), expected))
    assert torch.allclose(padded_out[1], expected[1]) and torch.allclose(padded_out[0, :2], expected[0])
    assert torch.equal(before, parts[0] + 1) and torch.equal(after, parts[1] * 3)
    with open_trace(path) as trace:
        assert trace.validate() == []


def test_a_nested_tensor_row_holds_null_at_its_ragged_dimension(traced):
    path = traced[0]
    with open_trace(path) as trace:
        rows = trace.arrow("""
            SELECT e.op, u.role, t.shape, t.stride, t.numel, t.nested_shapes, t.nnz, t.is01
            FROM events e JOIN event_tensors u USING (rank, seq) JOIN tensors t USING (rank, tensor_id)
            WHERE t.nested_shapes IS NOT NULL ORDER BY e.seq, u.k""").to_pylist()
        plain = trace.sql("SELECT count(*) AS n FROM tensors WHERE nested_shapes IS NULL")["n"][0]
    assert plain > 0
    by_op = {(r["op"], r["role"]): r for r in rows}
    # jagged (2, j1, 8): lengths 2 and 5; the strided layout's components are the same
    made = by_op[("aten._nested_tensor_from_tensor_list.default", "out")]
    linear_x, linear_out = by_op[("aten.linear.default", "arg")], by_op[("aten.linear.default", "out")]
    for row, features in ((made, 8), (linear_x, 8), (linear_out, 4)):
        assert row["shape"] == [2, None, features] and row["stride"] == []
        assert row["nested_shapes"] == [[2, features], [5, features]] and row["numel"] == 7 * features
    # statistics of the components' values (random floats: none 0, not 0/1)
    assert linear_x["nnz"] == 56 and linear_x["is01"] is False


def test_a_linear_over_a_jagged_tensor_counts_its_actual_rows(traced):
    # aten.linear(x, w, b) with x of components (2, 8) and (5, 8): a GEMM of 2 + 5 = 7 rows, 8 in
    # and 4 out features.
    #   FLOPs: 2 * 7 * 8 * 4 = 448 for the products, + 7 * 4 = 28 bias adds (addmm's mn) = 476
    #   MACs:  7 * 8 * 4 = 224 (x not 0/1)
    #   bytes: x 7 * 8 + w 4 * 8 + out 7 * 4 + bias 4 = 120 float32 elements = 480
    # The padded tensor (2, 5, 8), 10 rows (3 of them padding), goes through t + addmm:
    #   FLOPs: 2 * 10 * 8 * 4 + 10 * 4 = 680; MACs: 10 * 8 * 4 = 320
    # Building and padding move the components' 7 * 8 = 56 elements (224 bytes): the strided
    # nested tensor reads the two parts and writes 56 elements, 448 bytes; to_padded_tensor
    # reads 56 and writes 2 * 5 * 8 = 80, (56 + 80) * 4 = 544 bytes.
    path = traced[0]
    with open_trace(path) as trace:
        result = count(trace, ["flop", "mac", "memory_access"])
    flops, macs = result.spikingjelly("flop")["Global"], result.spikingjelly("mac")["Global"]
    memory = result.spikingjelly("memory_access")["Global"]
    assert flops["aten.linear.default"] == 476 and macs["aten.linear.default"] == 224
    assert flops["aten.addmm.default"] == 680 and macs["aten.addmm.default"] == 320
    assert memory["aten.linear.default"] == 480
    assert memory["aten._nested_tensor_from_tensor_list.default"] == 448
    assert memory["aten.to_padded_tensor.default"] == 544
    for counter in ("flop", "mac", "memory_access"):
        assert not {"aten.linear.default", "aten.to_padded_tensor.default"} & set(result.unsupported_of(counter))
    # building, viewing and padding nested tensors do no arithmetic; a layout query no tensor work
    assert not {op for op in result.unsupported_of("flop") if "nested" in op or "padded" in op or "prim." in op}


@pytest.mark.parametrize("record", sorted(RECORDS))
def test_a_module_called_on_a_strided_nested_tensor_is_recorded(tmp_path, monkeypatch, record):
    # A strided nested tensor is a plain torch.Tensor that refuses `.shape`: the compiled record
    # leaves it (its hooks' and its ops') to the Python one instead of failing; before, each of
    # its hooks and ops was a `degraded` entry (RuntimeError: NestedTensorImpl doesn't support sizes).
    monkeypatch.setenv("SPIKETRACE_SLOW_PATHS", RECORDS[record])
    net = nn.Linear(8, 4)
    strided = torch.nested.nested_tensor([torch.randn(n, 8) for n in LENGTHS])
    with Recorder(tmp_path / "t", model=net) as rec, rec.stage("forward"):
        out = net(strided)
    assert _manifest(tmp_path / "t")["degraded"] == []
    with open_trace(tmp_path / "t") as trace:
        hooks = trace.arrow("""
            SELECT m.kind, t.shape, t.nested_shapes, t.numel
            FROM module_events m, UNNEST(coalesce(m.inputs, m.outputs)) AS u(tensor_id)
            JOIN tensors t ON t.rank = m.rank AND t.tensor_id = u.tensor_id ORDER BY m.seq""").to_pylist()
        flops = count(trace, ["flop"]).spikingjelly("flop")["Global"]
    assert hooks == [{"kind": "forward_pre", "shape": [2, None, 8], "nested_shapes": [[2, 8], [5, 8]], "numel": 56},
                     {"kind": "forward_post", "shape": [2, None, 4], "nested_shapes": [[2, 4], [5, 4]], "numel": 28}]
    assert flops == {"aten.linear.default": 2 * 7 * 8 * 4 + 7 * 4}
    assert [t.shape for t in out.unbind()] == [(2, 4), (5, 4)]


@pytest.mark.parametrize("record", sorted(RECORDS))
def test_spikes_through_a_linear_over_a_jagged_tensor(tmp_path, monkeypatch, record):
    # Components of 2 and 5 rows, 8 features: 3 spikes in the first (row 0, features 0-2), 5 in
    # the second (feature 0 of each row): nnz(x) = 8, x 0/1; the weight (4, 8) has no zero.
    #   ACs = SynOps = nnz(x) * out_features = 8 * 4 = 32; MACs 0 (a 0/1 operand)
    #   NeuroBench's pairs: sum_k nnz(x[..., k]) * nnz(w[:, k]), nnz(w[:, k]) = 4: feature 0 has
    #   1 + 5 = 6 spikes, features 1 and 2 one each, the rest none: (6 + 1 + 1) * 4 = 32
    monkeypatch.setenv("SPIKETRACE_SLOW_PATHS", RECORDS[record])
    torch.manual_seed(0)
    net = nn.Linear(8, 4)
    with torch.no_grad():
        net.weight.copy_(torch.rand(4, 8) + 0.5)
    first, second = torch.zeros(2, 8), torch.zeros(5, 8)
    first[0, :3] = 1
    second[:, 0] = 1
    with Recorder(tmp_path / "t", model=net) as rec, rec.stage("forward"):
        net(torch.nested.nested_tensor([first, second], layout=torch.jagged))
    assert _manifest(tmp_path / "t")["degraded"] == []
    with open_trace(tmp_path / "t") as trace:
        result = count(trace, ["ac", "synop", "mac"])
        totals = {c: result.spikingjelly(c)["Global"]["aten.linear.default"] for c in ("ac", "synop", "mac")}
        assert totals == {"ac": 32, "synop": 32, "mac": 0}
        stats = dict(trace.sql("SELECT stat, value FROM op_stats").itertuples(index=False))
        assert stats == {"linear_nonzero_pairs": 32.0, "x_ternary": 1.0}
        neurobench = count(trace, ["synop"], convention="neurobench")
        assert neurobench.spikingjelly("synop")["Global"]["aten.linear.default"] == 32


def test_the_compiled_and_the_python_record_write_the_same_rows(tmp_path, monkeypatch):
    # The compiled record leaves every nested tensor to the Python one (a strided one refuses
    # `.shape`, a jagged one is a subclass); the two traces are equal row for row.
    tables = {}
    for name, slow in RECORDS.items():
        monkeypatch.setenv("SPIKETRACE_SLOW_PATHS", slow)
        torch.manual_seed(1)
        _program(tmp_path / name, nn.Linear(8, 4))
        tables[name] = read_tables(tmp_path / name)
        for column in ("args", "kwargs", "out"):  # a nested int's name (j1, j2, ...) counts up per process
            tables[name]["events"][column] = tables[name]["events"][column].str.replace(r'"j\d+"', '"j"', regex=True)
    for table, frame in tables["compiled_record"].items():
        pd.testing.assert_frame_equal(tables["python_record"][table], frame, check_dtype=True, obj=table)


def test_a_trace_of_schema_1_3_reads_nested_shapes_as_null(tmp_path):
    # A 1.3 part lacks the column: it reads as NULL and the counts are those of 1.4.
    net = nn.Linear(8, 4)
    with Recorder(tmp_path / "t", model=net) as rec, rec.stage("forward"):
        net(torch.randn(3, 8))
    with open_trace(tmp_path / "t") as trace:
        before = count(trace, ["flop"]).spikingjelly("flop")["Global"]
    for part in sorted((tmp_path / "t" / "tensors").rglob("part-*.parquet")):
        rewrite_part(part, lambda t: t.drop_columns(["nested_shapes"]), version="1.3")
    with open_trace(tmp_path / "t") as trace:
        assert trace.sql("SELECT count(*) AS n FROM tensors WHERE nested_shapes IS NOT NULL")["n"][0] == 0
        after = count(trace, ["flop"]).spikingjelly("flop")["Global"]
        assert after == before and after["aten.addmm.default"] == 2 * 3 * 8 * 4 + 3 * 4
        assert trace.validate() == []


class _OddSizes(torch.Tensor):
    """A tensor subclass whose sizes are not all ints (as a symbolic or nested size is not)."""

    @property
    def shape(self):  # type: ignore[override]
        return (self.size(0), "s0")


def test_a_size_that_is_no_int_never_reaches_a_column(tmp_path):
    # A size that is no int is null in `shape` (the op and every other row recorded); before,
    # it reached the writer and failed the whole trace.
    odd = torch.randn(3, 2).as_subclass(_OddSizes)
    with Recorder(tmp_path / "t") as rec, rec.stage("forward"):
        before = torch.ones(2) + 1
        doubled = torch.Tensor.mul(odd, 2)
        after = before * 3
    manifest = _manifest(tmp_path / "t")
    assert manifest["status"] == "complete" and manifest["degraded"] == []
    shapes = [r["shape"] for r in pq.read_table(tmp_path / "t" / "tensors").to_pylist()]
    assert [3, None] in shapes and [2] in shapes
    assert doubled.shape == (3, "s0") and after.tolist() == [6.0, 6.0]


# -- every table, not only `tensors`: no size that is not an int reaches a column --------------

class _Ops(TorchDispatchMode):
    """The ops a program runs, counted (what `events` must hold at least)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[resolve_name(func)] += 1
        return func(*args, **(kwargs or {}))


class _Heads(nn.Module):
    """Attention over a jagged batch as users write it: the ragged length `x.size(1)` (a nested
    int, j1) passed on to view, reshape and expand."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.out = nn.Linear(8, 8), nn.Linear(8, 4)

    def forward(self, x):
        batch, length = x.size(0), x.size(1)
        heads = self.q(x).view(batch, length, 2, 4).transpose(1, 2)
        attended = F.scaled_dot_product_attention(heads, heads, heads).transpose(1, 2).reshape(batch, length, 8)
        widened = x.detach().unsqueeze(-1).expand(batch, length, 8, 3).sum(-1)  # no grad: NJT has no backward for it
        return self.out(attended + widened)


def _train(net, optimizer, parts, layout):
    x = torch.nested.nested_tensor(parts, layout=layout, requires_grad=True)
    padded = net(x).to_padded_tensor(0.0)
    padded.sum().backward()
    optimizer.step()
    optimizer.zero_grad()
    return padded.detach(), x.grad.to_padded_tensor(0.0), [p.detach().clone() for p in net.parameters()]


def _fresh(net_class=_Heads):
    torch.manual_seed(0)
    net = net_class()
    return net, torch.optim.Adam(net.parameters(), lr=0.1), [torch.randn(n, 8) for n in LENGTHS]


def _same(a, b) -> bool:
    return all(_same(x, y) for x, y in zip(a, b)) if isinstance(a, list | tuple) else torch.equal(a, b)


@pytest.mark.parametrize("record", sorted(RECORDS))
def test_a_training_step_over_a_jagged_batch_keeps_every_op_and_writes_its_sizes_as_symint(tmp_path, monkeypatch,
                                                                                          record):
    # SDPA, view, reshape and expand given the nested int j1, a Linear, to_padded_tensor, backward
    # and an Adam step. The ragged length in an op's arguments or result is written as its
    # expression, {"$symint": "j1"} (before: {"$repr": "j1"}, the marker of an unknown object).
    monkeypatch.setenv("SPIKETRACE_SLOW_PATHS", RECORDS[record])
    expected = _train(*_fresh(), torch.jagged)
    net, optimizer, parts = _fresh()
    with _Ops() as ran:
        _train(net, optimizer, parts, torch.jagged)
    net, optimizer, parts = _fresh()
    with Recorder(tmp_path / "t", model=net, optimizer=optimizer) as rec:
        with rec.stage("forward"):
            got = _train(net, optimizer, parts, torch.jagged)
        rec.step()
    assert _same(got, expected)
    manifest = _manifest(tmp_path / "t")
    assert manifest["status"] == "complete" and manifest["degraded"] == []
    with open_trace(tmp_path / "t") as trace:
        assert trace.validate() == []
        events = trace.sql("SELECT op, args, out FROM events")
        steps = trace.sql("SELECT count(*) AS n FROM optimizer_steps")["n"][0]
    recorded = Counter(events["op"])
    assert {op: n for op, n in ran.ops.items() if recorded[op] < n} == {}  # every op the program ran
    named = {(op, re.sub(r'"j\d+"', '"j"', args)) for op, args in zip(events["op"], events["args"])}
    for shape in ('[2,{"$symint":"j"},2,4]', '[2,{"$symint":"j"},8]', '[2,{"$symint":"j"},8,3]'):
        assert any(args == f'[{{"$t":0}},{shape}]' for _, args in named), shape
    assert not any("$repr" in text for text in (*events["args"], *events["out"]))
    assert steps == 4


def test_symbolic_values_are_written_as_their_expression_without_a_guard():
    # Unbacked symbols (export, data-dependent sizes): int() of one raises, of a backed one it
    # would guard, specializing the user's graph. Before: {"$repr": ...}.
    env = ShapeEnv()
    size, scale, flag = env.create_unbacked_symint(), env.create_unbacked_symfloat(), env.create_unbacked_symbool()
    t = torch.ones(2)
    for intern in (True, False):
        args, kwargs, out, _ = encode_call((t, [2, size * 2], scale), {"flag": flag}, size, intern=intern)
        assert json.loads(args)[1:] == [[2, {"$symint": f"2*{size}"}], {"$symfloat": str(scale)}]
        assert json.loads(kwargs) == {"flag": {"$symbool": str(flag)}}
        assert json.loads(out) == {"$symint": str(size)}


@pytest.mark.parametrize("layout", [torch.jagged, torch.strided], ids=["jagged", "strided"])
def test_an_optimizer_step_on_a_nested_parameter_writes_its_row(tmp_path, layout):
    # Before: jagged, the row's shape held j1 and the flush failed, the whole trace with it
    # (status 'failed', ArrowInvalid: Could not convert j1 with type SymInt); strided, `.shape`
    # raised and the row was a `degraded` optimizer_hook entry.
    torch.manual_seed(0)
    weight = nn.Parameter(torch.nested.nested_tensor([torch.randn(n, 8) for n in LENGTHS], layout=layout))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    expected = [p - 0.1 * 2 for p in weight.detach().unbind()]
    with Recorder(tmp_path / "t", optimizer=optimizer) as rec:
        with rec.stage("forward"):
            (weight * 2).to_padded_tensor(0.0).sum().backward()
            optimizer.step()
        rec.step()
    assert _same(list(weight.detach().unbind()), expected)
    manifest = _manifest(tmp_path / "t")
    assert manifest["status"] == "complete" and manifest["degraded"] == []
    rows = pq.read_table(tmp_path / "t" / "optimizer_steps").to_pylist()
    assert [(r["shape"], r["ndim"], r["numel"], r["has_grad"]) for r in rows] == [([2, None, 8], 3, 56, True)]
    ops = [e["op"] for e in pq.read_table(tmp_path / "t" / "events").to_pylist()]
    assert "aten.to_padded_tensor.default" in ops and "aten.add_.Tensor" in ops


class _Masked(nn.Module):
    """A layer keeping a nested tensor as a buffer and one as a parameter."""

    def __init__(self, layout) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.register_buffer("mask", torch.nested.nested_tensor([torch.ones(n, 8) for n in LENGTHS], layout=layout))
        self.bias = nn.Parameter(torch.nested.nested_tensor([torch.zeros(n, 8) for n in LENGTHS], layout=layout))

    def forward(self, x):
        return self.lin(x)


@pytest.mark.parametrize("layout", [torch.jagged, torch.strided], ids=["jagged", "strided"])
def test_a_model_holding_nested_tensors_is_bound_and_listed(tmp_path, layout):
    # Before: Recorder.__enter__ raised into the user's code, binding the model: its modules row
    # lists the buffer's shape (jagged: TypeError: Object of type SymInt is not JSON serializable;
    # strided: RuntimeError: NestedTensorImpl doesn't support sizes).
    net = _Masked(layout)
    x = torch.randn(3, 8)
    with Recorder(tmp_path / "t", model=net) as rec, rec.stage("forward"):
        out = net(x)
    assert torch.equal(out, net.lin(x))
    manifest = _manifest(tmp_path / "t")
    assert manifest["status"] == "complete" and manifest["degraded"] == []
    row = next(r for r in pq.read_table(tmp_path / "t" / "modules").to_pylist() if r["path"] == "_Masked")
    listed = {"shape": [2, None, 8], "dtype": "float32", "numel": 56}
    assert json.loads(row["buffers"]) == [{"name": "mask", "requires_grad": False, **listed}]
    assert json.loads(row["parameters"]) == [{"name": "bias", "requires_grad": True, **listed}]


@pytest.mark.parametrize("record", sorted(RECORDS))
def test_a_strided_nested_input_that_requires_grad_keeps_its_modules_backward_hooks(tmp_path, monkeypatch, record):
    # Before: the hold on a leaf strided nested tensor failed (torch reaches a leaf's gradient
    # accumulator through view_as, which it refuses: RuntimeError: NestedTensorImpl doesn't
    # support sizes), a `degraded` module_hook entry per module it enters, and their
    # backward_post rows were missing.
    monkeypatch.setenv("SPIKETRACE_SLOW_PATHS", RECORDS[record])
    net, optimizer, parts = _fresh(lambda: nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4)))
    expected = _train(*_fresh(lambda: nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))), torch.strided)
    with Recorder(tmp_path / "t", model=net, optimizer=optimizer) as rec:
        with rec.stage("forward"):
            got = _train(net, optimizer, parts, torch.strided)
        rec.step()
    assert _same(got, expected)
    assert _manifest(tmp_path / "t")["degraded"] == []
    with open_trace(tmp_path / "t") as trace:
        kinds = trace.sql("""SELECT d.path, list(m.kind ORDER BY m.seq) AS kinds FROM module_events m
                             JOIN modules d USING (rank, module_id) GROUP BY d.path ORDER BY d.path""")
        assert trace.validate() == []
    hooks = ["forward_pre", "forward_post", "backward_pre", "backward_post"]
    assert {path: list(k) for path, k in kinds.itertuples(index=False)} == {
        "Sequential": hooks, "Sequential.0": hooks, "Sequential.1": hooks, "Sequential.2": hooks}


def test_a_value_no_column_can_hold_is_null_and_the_rest_of_the_flush_is_written(tmp_path):
    # The writer's guard behind the record paths': a nested int in a list (a shape) or in a
    # nullable column is null, a `writer` entry names the column. Before: the flush failed,
    # and every table's rows with it (status 'failed', ArrowInvalid: Could not convert j1).
    ragged = torch.nested.nested_tensor([torch.randn(n, 8) for n in LENGTHS], layout=torch.jagged).size(1)
    writer = TraceWriter(tmp_path / "t")
    row = dict(seq=0, step=0, optimizer_index=0, call_index=0, optimizer_class="SGD", group_index=0,
               hyperparameters="{}", param_index=0, parameter=None, module_id=None, ndim=3, numel=56,
               dtype="float32", has_grad=True, state_keys=())
    writer.tables["optimizer_steps"].append(**row, shape=(2, ragged, 8))
    writer.tables["optimizer_steps"].append(**{**row, "seq": 1, "module_id": ragged}, shape=(4, 8))
    writer.tables["tensor_frees"].append(uid=3, freed_seq=1)
    assert writer.flush()
    writer.close()
    manifest = _manifest(tmp_path / "t")
    assert manifest["status"] == "complete"
    assert {(d["site"], d["what"]) for d in manifest["degraded"]} == {
        ("writer", "optimizer_steps.shape"), ("writer", "optimizer_steps.module_id")}
    rows = pq.read_table(tmp_path / "t" / "optimizer_steps").to_pylist()
    assert [(r["shape"], r["module_id"], r["numel"]) for r in rows] == [([2, None, 8], None, 56), ([4, 8], None, 56)]
    assert [(r["uid"], r["freed_seq"]) for r in pq.read_table(tmp_path / "t" / "tensor_frees").to_pylist()] == [(3, 1)]
