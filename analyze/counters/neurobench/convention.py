"""The NeuroBench convention of the synop and mac counters (`count(..., convention="neurobench")`).

NeuroBench's SynapticOperations metric (neurobench/metrics/workload/synaptic_operations.py,
metrics/utils/layers/macs.py) hooks the model's layers, binarises each call's input and the
layer's weights (nonzero -> 1), zeroes the bias, reruns the layer and sums its output. So a
layer call costs its **pairs of a nonzero input and a nonzero weight that meet inside the
output** (a tap landing in zero padding meets nothing; the bias is no synaptic operation):

    Linear, x (rows, in), w (out, in):  sum_k nnz(x[:, k]) * nnz(w[:, k])
    Conv,   x, w, any geometry:         sum(conv(x != 0, w != 0))
    RNNCell(x, h):                      the pairs of W_ih x plus those of W_hh h

A call whose input x has values in {-1, 0, 1} only is spiking: its operations are ACs
("Effective_ACs", our synop), any other call's are MACs ("Effective_MACs", our mac). Only
nn.Linear, nn.Conv1d/2d/3d and nn.RNNCellBase layers count (subclasses too, by MRO), forward
calls only. NeuroBench divides the totals by the samples it was given (`data[0].size(0)` of
each batch, whatever the time steps); `samples()` infers them from the trace (batches.py) and
`per_sample` divides. With dense weights and 0/1 inputs the pairs are exactly SpikingJelly's synops.

The per-call facts come from the capture's op statistics (schemas/statistics.py, schema 1.3):
`*_nonzero_pairs` per synaptic op and `x_ternary` of its input. A trace captured before them
raises MissingStatisticsError naming what it lacks; no number is guessed.

LSTMCell and GRUCell calls also cost NeuroBench's gate and cell-state products
(cells.py), one row per call under the op "<class> gate and state products".
nn.RNN/LSTM/GRU layers, which NeuroBench refuses, are listed as unsupported.

Samples are each batch's (recorder step's) batch dimension, summed (batches.py): dim 1 of the
first SpikingJelly multi-step module's [T, B, ...] input, else dim 0 of the bound model's first
input, NeuroBench's batch-first rule. Where a model with multi-step modules falls back to the
latter and it is ambiguous, count() warns, naming the dim it took; give the count yourself
(`per_sample(result, samples)`, `--samples N`).
"""

from __future__ import annotations

import warnings

import pandas as pd

from spiketrace.analyze.counters.engine import ignored_scopes_sql
from spiketrace.analyze.counters.neurobench import cells as neurobench_cells
from spiketrace.analyze.counters.neurobench.batches import first_inputs, sample_count, samples
from spiketrace.analyze.counters.result import CounterResult, StrictModeError
from spiketrace.schemas.statistics import NEUROBENCH_ADDED_IN
from spiketrace.schemas.version import parse_version

CONVENTIONS = (None, "neurobench")
COUNTERS = ("synop", "mac")  # Effective_ACs, Effective_MACs
# neurobench/blocks/layer.py: STATELESS_LAYERS and RECURRENT_CELLS, matched in the recorded MRO
LAYERS = ("torch.nn.modules.linear.Linear", "torch.nn.modules.conv.Conv1d", "torch.nn.modules.conv.Conv2d",
          "torch.nn.modules.conv.Conv3d", "torch.nn.modules.rnn.RNNCellBase")
CELL = neurobench_cells.CELL_BASE
REFUSED = "torch.nn.modules.rnn.RNNBase"  # NeuroBench: "This layer is not yet supported"

_CONV_OPS = ("aten.convolution.default", *(f"aten.conv{n}d.{o}" for n in (1, 2, 3) for o in ("default", "padding")))
# synaptic op -> (its pairs statistic, its x_ternary statistic, the position of its input x)
SYNAPTIC_OPS: dict[str, tuple[str, str, int]] = {
    **{op: ("conv_nonzero_pairs", "x_ternary", 0) for op in _CONV_OPS},
    "aten.mm.default": ("mm_nonzero_pairs", "x_ternary", 0),
    "aten.bmm.default": ("mm_nonzero_pairs", "x_ternary", 0),
    "aten.addmm.default": ("addmm_nonzero_pairs", "addmm_x_ternary", 1),
    "aten.baddbmm.default": ("addmm_nonzero_pairs", "addmm_x_ternary", 1),
    "aten.linear.default": ("linear_nonzero_pairs", "x_ternary", 0),
}


__all__ = ["CONVENTIONS", "COUNTERS", "MissingStatisticsError", "count", "first_inputs", "per_sample", "sample_count",
           "samples", "summary"]


class MissingStatisticsError(ValueError):
    """The trace lacks op statistics the NeuroBench convention needs (an older capture)."""


def _quote(text: str) -> str:
    return "'" + str(text).replace("'", "''") + "'"


def _list(values) -> str:
    return "[" + ", ".join(_quote(v) for v in values) + "]"


def _case(column: str, mapping: dict[str, object]) -> str:
    arms = " ".join(f"WHEN {_quote(op)} THEN {_quote(v) if isinstance(v, str) else v}" for op, v in mapping.items())
    return f"CASE {column} {arms} END"


def _events_sql(where: str, group_by: tuple[str, ...], ignore_modules) -> str:
    """One row per synaptic op of a NeuroBench layer's forward call: its pairs, whether its
    call is spiking (NULL where the trace cannot tell), its scope and group columns."""
    ops = list(SYNAPTIC_OPS)
    ignored = ignore_modules and f"AND (rank, scope_id) NOT IN ({ignored_scopes_sql(list(ignore_modules), None)})"
    groups = [g for g in group_by if g != "rank"]
    return f"""
    WITH layers AS (
        SELECT rank, module_id, list_has_any(mro, {_list([CELL])}) AS cell
        FROM modules WHERE list_has_any(mro, {_list(LAYERS)})
    ), calls AS (
        SELECT p.rank, p.module_id, l.cell, p.seq AS first_seq, q.seq AS last_seq, p.thread, p.inputs[1] AS input_id
        FROM module_events p
        JOIN layers l ON l.rank = p.rank AND l.module_id = p.module_id
        JOIN module_events q ON q.rank = p.rank AND q.module_id = p.module_id AND q.call_index = p.call_index
             AND q.kind = 'forward_post' AND q.thread = p.thread AND q.seq > p.seq
        WHERE p.kind = 'forward_pre'
    ), selected AS (
        SELECT * FROM events
        WHERE ({where}) AND NOT in_backward AND op IN ({", ".join(map(_quote, ops))}) {ignored or ""}
    ), synaptic AS (
        SELECT e.rank, e.seq, e.op, e.scope_id{"".join(f", e.{g}" for g in groups)}, c.cell, c.first_seq, c.input_id,
               {_case("e.op", {op: p for op, (p, _, _) in SYNAPTIC_OPS.items()})} AS pairs_stat,
               {_case("e.op", {op: t for op, (_, t, _) in SYNAPTIC_OPS.items()})} AS ternary_stat,
               {_case("e.op", {op: x for op, (_, _, x) in SYNAPTIC_OPS.items()})} AS x_position
        FROM selected e JOIN calls c
             ON e.rank = c.rank AND e.thread = c.thread AND e.seq > c.first_seq AND e.seq < c.last_seq
    ), facts AS (
        SELECT s.*, pairs.value AS pairs, ternary.value AS ternary, xt.is01 AS x_is01, xt.storage_ptr AS x_storage,
               it.is01 AS input_is01, it.storage_ptr AS input_storage
        FROM synaptic s
        LEFT JOIN op_stats pairs ON pairs.rank = s.rank AND pairs.seq = s.seq AND pairs.stat = s.pairs_stat
        LEFT JOIN op_stats ternary ON ternary.rank = s.rank AND ternary.seq = s.seq AND ternary.stat = s.ternary_stat
        LEFT JOIN event_tensors u ON u.rank = s.rank AND u.seq = s.seq AND u.role = 'arg'
             AND u.position = s.x_position AND u.item IS NULL
        LEFT JOIN tensors xt ON xt.rank = u.rank AND xt.tensor_id = u.tensor_id
        LEFT JOIN tensors it ON it.rank = s.rank AND it.tensor_id = s.input_id
    ), classified AS (
        -- a cell's call is spiking by its input x (NeuroBench tests inputs[0] only): the
        -- x_ternary of the op reading x's storage (W_ih x), not of the one reading h
        SELECT *, max(CASE WHEN x_storage = input_storage THEN ternary END)
                      OVER (PARTITION BY rank, first_seq) AS input_ternary
        FROM facts
    )
    SELECT rank, seq, op, scope_id{"".join(f", {g}" for g in groups)}, pairs_stat, ternary_stat, pairs, first_seq, cell,
           CASE WHEN cell THEN CASE WHEN input_is01 THEN true WHEN input_ternary IS NULL THEN NULL
                                    ELSE input_ternary = 1 END
                ELSE CASE WHEN x_is01 THEN true WHEN ternary IS NULL THEN NULL ELSE ternary = 1 END
           END AS spiking
    FROM classified
    """


def _missing(con, events: str, trace_versions: dict[int, str]) -> None:
    rows = con.execute(f"""
        SELECT op, CASE WHEN pairs IS NULL THEN pairs_stat ELSE ternary_stat END AS stat, count(*) AS calls
        FROM ({events}) WHERE pairs IS NULL OR spiking IS NULL GROUP BY ALL ORDER BY calls DESC, op
    """).fetchall()
    if not rows:
        return
    listed = "; ".join(f"{stat} of {calls} {op} calls" for op, stat, calls in rows)
    older = sorted({v for v in trace_versions.values() if parse_version(v) < parse_version(NEUROBENCH_ADDED_IN)})
    why = (f"the trace was captured with schema {', '.join(older)}, before spiketrace recorded these statistics "
           f"({NEUROBENCH_ADDED_IN}): capture it again" if older else
           "the capture did not take them (value statistics off, or failed: see the manifest's degraded list)")
    raise MissingStatisticsError(f"the NeuroBench convention needs op statistics this trace lacks ({listed}); {why}")


def count(con, names, *, where: str = "true", module_where: str = "true", group_by: tuple[str, ...] = (),
          ignore_modules=(), strict: bool = False, trace_versions: dict[int, str] | None = None) -> CounterResult:
    """synop (NeuroBench's Effective_ACs) and mac (Effective_MACs) over the events of `where`,
    per (scope, op, group_by): totals over every sample; frame.attrs["samples"] holds what
    NeuroBench divides them by (samples(), over the module events of `module_where`)."""
    names = list(names)
    events = _events_sql(where, tuple(group_by), ignore_modules)
    _missing(con, events, trace_versions or {})
    keys = "".join(f", {g}" for g in group_by if g != "rank")
    cells = neurobench_cells.calls_sql(events, tuple(g for g in group_by if g != "rank"))
    gates = (f"SELECT rank, scope_id, class_name || ' gate and state products' AS op{keys}, extra AS pairs, spiking "
             f"FROM ({cells}) WHERE kind <> 'rnn' AND extra IS NOT NULL")
    rows = f"SELECT rank, scope_id, op{keys}, pairs, spiking FROM ({events}) UNION ALL {gates}"
    sums = " UNION ALL ".join(
        f"SELECT {_quote(name)} AS counter, rank, scope_id, op{keys}, CAST(pairs AS BIGINT) AS value "
        f"FROM ({rows}) WHERE {'spiking' if name == 'synop' else 'NOT spiking'}" for name in names)
    frame = con.execute(f"""
        SELECT v.counter, a.scope, v.op{"".join(f", v.{g}" for g in group_by)}, CAST(sum(v.value) AS BIGINT) AS value
        FROM ({sums}) v JOIN scopes s ON s.rank = v.rank AND s.scope_id = v.scope_id, UNNEST(s.parents) AS a(scope)
        GROUP BY ALL
    """).df()
    order = {name: i for i, name in enumerate(names)}
    frame = frame.assign(_counter=frame["counter"].map(order)).sort_values(
        ["_counter", "scope", "op", *group_by], ignore_index=True, kind="stable")
    frame = frame[["counter", "scope", "op", *group_by, "value"]].astype({"value": "int64"})
    frame.attrs["samples"], frame.attrs["samples_notes"] = sample_count(con, module_where)
    frame.attrs["notes"] = neurobench_cells.notes(con, events)
    for note in frame.attrs["samples_notes"]:
        warnings.warn(note, stacklevel=3)
    selected = con.execute(f"SELECT count(*) FROM ({events})").fetchone()[0]
    unsupported = _unsupported(con, names, module_where)
    result = CounterResult(frame=frame, unsupported=unsupported, selected_events=int(selected))
    if strict and len(unsupported):
        first = unsupported.iloc[0]
        raise StrictModeError(f"strict: the NeuroBench convention does not count {first['op']} "
                              f"({int(first['calls'])} calls) as NeuroBench does")
    return result


def _unsupported(con, names, module_where: str) -> pd.DataFrame:
    """Per counter, the layer calls NeuroBench refuses (recurrent layers), by class: counter,
    op, calls, tensor_bytes (0)."""
    calls = con.execute(f"""
        SELECT m.class_name || ' (NeuroBench does not count recurrent layers)' AS op, count(*) AS calls
        FROM (SELECT * FROM module_events WHERE {module_where}) me
        JOIN modules m ON m.rank = me.rank AND m.module_id = me.module_id
        WHERE me.kind = 'forward_pre' AND list_has_any(m.mro, {_list([REFUSED])})
        GROUP BY ALL ORDER BY op
    """).fetchall()
    rows = [(name, op, n, 0) for name in names for op, n in calls]
    return pd.DataFrame(rows, columns=["counter", "op", "calls", "tensor_bytes"]).astype(
        {"calls": "int64", "tensor_bytes": "int64"})


def per_sample(result: CounterResult, samples: int | None) -> dict[str, float | int | None]:
    """NeuroBench's SynapticOperations.compute() from the convention's totals: Effective_ACs
    (synop) and Effective_MACs (mac) per sample, and the samples divided by."""
    totals = result.totals()
    if not samples:
        return {"Effective_MACs": None, "Effective_ACs": None, "samples": samples}
    return {"Effective_MACs": totals.get("mac", 0) / samples, "Effective_ACs": totals.get("synop", 0) / samples,
            "samples": samples}


def summary(result: CounterResult, samples: int | None = None) -> tuple[dict, str]:
    """(per_sample's dict, one line saying it) of a convention result, for the CLI; `samples`
    overrides the count the trace gives."""
    numbers = per_sample(result, samples or result.frame.attrs.get("samples"))
    if numbers["samples"] is None:
        return numbers, ("NeuroBench per sample: unknown (no forward call of a bound model to take the batch from); "
                         "divide the totals by your samples")
    return numbers, (f"NeuroBench per sample ({numbers['samples']} samples): Effective_ACs {numbers['Effective_ACs']:g}, "
                     f"Effective_MACs {numbers['Effective_MACs']:g}")
