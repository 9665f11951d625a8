"""Capture and validation agree on one schema: every value capture writes for sparse tensors,
inference tensors and non-finite scalar arguments is one the schema documents, the
plausibility rules accept and the counters read.

The values, as schemas/tables.py documents them:
* a sparse tensor (COO, CSR: a non-strided layout) has no strides and no storage: `stride`
  is empty, `storage_offset` 0 and `storage_ptr` -1;
* an inference tensor (made under torch.inference_mode) keeps no version counter: `version`
  is -1;
* a NaN or infinite float argument is the JSON object {"$float": "nan"} ("inf", "-inf"),
  which the counters read as that double.
"""

from __future__ import annotations

import json
import warnings

import duckdb
import pytest
import torch

from spiketrace.analyze import open_trace
from spiketrace.analyze.counters import counts
from spiketrace.analyze.counters.sql import MACROS
from spiketrace.analyze.energy import MODELS, energy
from spiketrace.capture import Recorder
from spiketrace.schemas.plausibility import NO_STORAGE, NO_VERSION_COUNTER, RULES
from spiketrace.schemas.tables import EVENTS, TENSORS, field_doc


def _record(tmp_path, body):
    """Capture `body()` in one forward stage; the trace opened, validated and counted."""
    path = tmp_path / "trace"
    with Recorder(path) as rec:
        with rec.stage("forward"):
            body()
    trace = open_trace(path)
    assert trace.validate() == []
    assert len(counts(trace))
    return trace


def _outputs(trace, op: str) -> list[dict]:
    """The `tensors` rows of the outputs of every call of `op`."""
    return trace.sql(f"""
        SELECT t.* FROM events e
        JOIN event_tensors u ON u.rank = e.rank AND u.seq = e.seq AND u.role = 'out'
        JOIN tensors t ON t.rank = u.rank AND t.tensor_id = u.tensor_id
        WHERE e.op = '{op}' ORDER BY e.seq""").to_dict("records")


def _rule(table: str, column: str):
    (rule,) = [r for r in RULES if r.table == table and r.column == column]
    return rule


def _sql(value) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(map(_sql, value)) + "]"
    return "NULL" if value is None else repr(value)


def _holds(rule, **row) -> bool:
    columns = ", ".join(f"{_sql(value)}::{kind} AS {name}" for name, (value, kind) in row.items())
    return duckdb.connect().execute(f"SELECT {rule.holds} FROM (SELECT {columns})").fetchone()[0]


# --- sparse layouts ------------------------------------------------------------------------

def test_the_docs_say_a_non_strided_layout_has_no_stride_and_no_storage():
    assert "empty for a non-strided layout" in field_doc(TENSORS.field("stride"))
    assert f"storage_ptr {NO_STORAGE}" in field_doc(TENSORS.field("stride"))
    assert f"{NO_STORAGE} for a tensor without one" in field_doc(TENSORS.field("storage_ptr"))


def test_sparse_coo_and_csr_tensors_are_written_without_strides_and_validate(tmp_path):
    torch.manual_seed(0)
    dense = torch.randn(5, 4) * (torch.rand(5, 4) > 0.5)
    weight = torch.randn(4, 2)
    seen = {}

    def body():
        coo, csr = dense.to_sparse(), dense.to_sparse_csr()
        seen["product"] = torch.sparse.mm(coo, weight)
        seen["merged"] = (coo + coo).coalesce()
        seen["back"] = csr.to_dense()

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta")
        trace = _record(tmp_path, body)
    torch.testing.assert_close(seen["back"], dense)
    sparse = _outputs(trace, "aten._to_sparse.default") + _outputs(trace, "aten._to_sparse_csr.default") + \
        _outputs(trace, "aten.add.Tensor")
    assert len(sparse) == 3
    for row in sparse:
        assert (list(row["shape"]), list(row["stride"]), row["storage_offset"], row["storage_ptr"]) == \
            ([5, 4], [], 0, NO_STORAGE), row
    # every other state is strided: one stride per dimension
    rows = trace.sql("SELECT shape, stride, storage_ptr FROM tensors").to_dict("records")
    assert all(len(r["stride"]) == len(r["shape"]) for r in rows if r["storage_ptr"] != NO_STORAGE)


@pytest.mark.parametrize("shape, stride, storage_ptr, nested_shapes, plausible", [
    ([5, 4], [4, 1], 4096, None, True),
    ([5, 4], [], NO_STORAGE, None, True),  # sparse: no strides, no storage
    ([], [], 4096, None, True),  # 0-dim strided
    ([5, 4], [], 4096, None, False),  # a strided tensor lost its strides
    ([5, 4], [1], NO_STORAGE, None, False),  # a stride missing, storage or not
    ([2, None, 8], [], 4096, [[2, 8], [5, 8]], True),  # nested (1.4): no single stride, a storage
])
def test_the_stride_rule_allows_no_strides_exactly_where_there_is_no_storage(shape, stride, storage_ptr, nested_shapes,
                                                                            plausible):
    row = {"shape": (shape, "BIGINT[]"), "stride": (stride, "BIGINT[]"), "storage_ptr": (storage_ptr, "BIGINT"),
           "nested_shapes": (nested_shapes, "BIGINT[][]")}
    assert _holds(_rule("tensors", "stride"), **row) is plausible


@pytest.mark.parametrize("shape, numel, nested_shapes, plausible", [
    ([5, 4], 20, None, True),
    ([5, 4], 21, None, False),
    ([2, None, 8], 56, [[2, 8], [5, 8]], True),  # nested: its components' total
    ([2, None, 8], 80, [[2, 8], [5, 8]], False),  # the padded size is not its numel
    ([2, None, 3], 9, [[None, 3], [None, 3]], True),  # a meta one's lengths: unknown
])
def test_the_numel_rule_sums_a_nested_tensors_components(shape, numel, nested_shapes, plausible):
    row = {"shape": (shape, "BIGINT[]"), "numel": (numel, "BIGINT"), "nested_shapes": (nested_shapes, "BIGINT[][]")}
    (rule,) = [r for r in RULES if r.table == "tensors" and r.column == "numel" and "shape" in r.holds]
    assert _holds(rule, **row) in (plausible, None if plausible else False)  # NULL passes (schemas/plausibility.py)


# --- inference tensors ---------------------------------------------------------------------

def test_the_docs_say_version_minus_one_is_an_inference_tensor():
    doc = field_doc(TENSORS.field("version"))
    assert f"{NO_VERSION_COUNTER} for an inference tensor" in doc and "inference_mode" in doc


def test_inference_tensors_are_written_with_version_minus_one_and_validate(tmp_path):
    x = torch.randn(3, 4)
    net = torch.nn.Linear(4, 2)

    def body():
        with torch.inference_mode():
            made = net(x)
        made.softmax(dim=1).argmax(dim=1)  # used outside inference mode

    trace = _record(tmp_path, body)
    (inference,) = _outputs(trace, "aten.addmm.default")
    assert inference["version"] == NO_VERSION_COUNTER
    (softmax_input,) = trace.sql("""
        SELECT t.version FROM events e JOIN event_tensors u ON u.rank = e.rank AND u.seq = e.seq AND u.role = 'arg'
        JOIN tensors t ON t.rank = u.rank AND t.tensor_id = u.tensor_id
        WHERE e.op = 'aten._softmax.default'""")["version"]
    assert softmax_input == NO_VERSION_COUNTER
    (softmax_output,) = _outputs(trace, "aten._softmax.default")
    assert softmax_output["version"] == 0  # made outside inference mode: a counter of its own


@pytest.mark.parametrize("version, plausible", [(0, True), (7, True), (NO_VERSION_COUNTER, True), (-2, False)])
def test_the_version_rule_allows_minus_one_and_nothing_below(version, plausible):
    assert _holds(_rule("tensors", "version"), version=(version, "BIGINT")) is plausible


# --- non-finite scalar arguments -----------------------------------------------------------

def test_the_docs_say_how_a_non_finite_float_is_encoded():
    assert '{"$float": "nan"}' in field_doc(EVENTS.field("args"))


@pytest.mark.parametrize("name, call, op, recorded", [
    ("plus nan", lambda x: x + float("nan"), "aten.add.Tensor", {"args": [{"$t": 0}, {"$float": "nan"}]}),
    ("times inf", lambda x: x * float("inf"), "aten.mul.Tensor", {"args": [{"$t": 0}, {"$float": "inf"}]}),
    ("minus -inf", lambda x: x - float("-inf"), "aten.sub.Tensor", {"args": [{"$t": 0}, {"$float": "-inf"}]}),
    ("alpha nan", lambda x: torch.add(x, x, alpha=float("nan")), "aten.add.Tensor",
     {"kwargs": {"alpha": {"$float": "nan"}}}),
    ("value -inf", lambda x: torch.addcmul(x, x, x, value=float("-inf")), "aten.addcmul.default",
     {"kwargs": {"value": {"$float": "-inf"}}}),
    ("beta nan, alpha inf", lambda x: torch.addmm(x, x, x, beta=float("nan"), alpha=float("inf")), "aten.addmm.default",
     {"kwargs": {"beta": {"$float": "nan"}, "alpha": {"$float": "inf"}}}),
])
def test_non_finite_scalars_are_tagged_and_counted(tmp_path, name, call, op, recorded):
    x = torch.randn(4, 4)
    trace = _record(tmp_path, lambda: call(x))
    (event,) = trace.sql(f"SELECT args, kwargs FROM events WHERE op = '{op}'").to_dict("records")
    for column, value in recorded.items():
        assert json.loads(event[column]) == value, name
    for model in MODELS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # nothing here is a model's own work: it says so
            energy(trace, model=model)


def test_an_alpha_other_than_one_counts_its_multiply_when_it_is_nan(tmp_path):
    # add(x, y, alpha) is x + alpha * y: 16 adds, and 16 multiplies unless alpha is 1. NaN is
    # not 1, so 32 FLOPs, as for alpha 2.
    x = torch.randn(4, 4)
    trace = _record(tmp_path, lambda: (torch.add(x, x, alpha=float("nan")), torch.add(x, x, alpha=2.0)))
    flop = counts(trace, "flop")
    assert flop.query("scope == 'Global'")["value"].sum() == 2 * 32, flop


@pytest.mark.parametrize("text, number", [
    ('{"$float": "nan"}', float("nan")), ('{"$float": "inf"}', float("inf")),
    ('{"$float": "-inf"}', float("-inf")), ("2.5", 2.5), ("1", 1.0), ("null", None),
    ('{"$complex": [1.0, 2.0]}', None),  # no real number is meant
])
def test_json_number_reads_a_tagged_float_as_its_double(text, number):
    con = duckdb.connect()
    for macro in MACROS:
        con.execute(macro)
    (found,) = con.execute("SELECT json_number(?::JSON)", [text]).fetchone()
    assert found == number or (number != number and found != found)
