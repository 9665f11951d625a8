"""The synaptic layers of a trace, as the paper convention sees them: one row per (layer,
rank, recorder step, how its inputs arrived), summed over that step's calls, in one DuckDB pass.

A synaptic layer is a conv, a linear map or a matrix product of two activations (an
attention matmul), found by its forward op (backward ops are left out):

    op                              left operand  right operand  dense MACs (padding included)
    aten.convolution.default        x   args[0]   w   args[1]    out numel * C_in/g * prod(k)
                                                                 (transposed: x numel * C_out/g * prod(k))
    aten.conv{1,2,3}d.*             x   args[0]   w   args[1]    out numel * C_in/g * prod(k)
    aten.mm / aten.bmm              args[0]       args[1]        M * K * N (times the batch)
    aten.addmm / aten.baddbmm       args[1]       args[2]        as mm / bmm (the bias is no MAC)
    aten.linear.default             x   args[0]   w   args[1]    numel(x) * out features

A product whose operand is a parameter (or a view of one: the same storage), or that runs
inside an nn.Linear/Conv module, is a weight layer (`linear`, `conv`): its input x is the
other operand. Any other product is a `matmul` of two activations. An operand is a spike
when its values are 0/1 (`is01`), or for x when NeuroBench's `x_ternary` statistic says
-1/0/1. A layer is named by its innermost module scope and `index`, its position among the
synaptic ops of one forward call of that module (an nn.Linear has one; an attention module
its q @ k^T, then attn @ v).

Per group the pass sums each operand's nnz and numel, the dense MACs and the (nonzero,
nonzero) pairs NeuroBench's SynapticOperations counts (the capture's `*_nonzero_pairs`
statistics, analyze/counters/neurobench/convention.py): the exact products event mode charges.
"""

from __future__ import annotations

import pandas as pd

from spiketrace.analyze.counters.engine import ignored_scopes_sql
from spiketrace.analyze.counters.fused_attention import FUSED_LAYERS
from spiketrace.analyze.counters.neurobench.convention import LAYERS, SYNAPTIC_OPS, MissingStatisticsError
from spiketrace.analyze.counters.sql import MACROS

_CONV_TAPS = "r_shape[2] * prod(r_shape[3:])"  # C_in/groups (C_out/groups transposed) * kernel taps
# op -> dense MACs of one call, over the operand facts l_* (left), r_* (right), o_* (output)
DENSE_MACS: dict[str, str] = {
    "aten.convolution.default":
        f"CASE WHEN json_extract(args, '$[6]')::BOOLEAN THEN l_numel ELSE o_numel END * {_CONV_TAPS}",
    **{op: f"o_numel * {_CONV_TAPS}" for op in SYNAPTIC_OPS if op.startswith("aten.conv") and "volution" not in op},
    "aten.mm.default": "l_numel * r_shape[2]",
    "aten.addmm.default": "l_numel * r_shape[2]",
    "aten.bmm.default": "l_numel * r_shape[3]",
    "aten.baddbmm.default": "l_numel * r_shape[3]",
    "aten.linear.default": "l_numel * r_shape[1]",
}
CONVOLUTIONS = tuple(op for op in SYNAPTIC_OPS if op.startswith("aten.conv"))
# The columns of a mapping's rows, after the group keys.
SUMS = ("calls", "dense_mac", "x_nnz", "x_numel", "y_nnz", "y_numel", "pairs", "first_seq")
KEYS = ("rank", "step", "stage", "scope", "index", "kind", "x_spike", "y_spike")
# Forward ops that multiply activations but whose operands a rule here cannot read: fused
# attention kernels. Reported, never costed silently as nothing.
UNCOSTED = ("aten._scaled_dot_product%", "aten.scaled_dot_product%", "aten._flash_attention%",
            "aten._efficient_attention%", *(op.removesuffix(".default") + "%" for op in FUSED_LAYERS))
# Why each kind of fused op is no layer here, and what costs it.
_ATTENTION_NOTE = ("calls of a fused attention kernel are not costed (its operands' spikes are not in the trace); "
                   "compute attention with matmuls (or torch.matmul) to cost it")
_LAYER_NOTE = ("calls of torch's fused transformer fast path are not costed (the inputs of its projections and "
               "attention are not in the trace); run the layer with torch.backends.mha.set_fastpath_enabled(False) "
               "(or in training mode) to cost it")


def _quote(text: str) -> str:
    return "'" + str(text).replace("'", "''") + "'"


def _case(mapping: dict[str, object]) -> str:
    arms = " ".join(f"WHEN {_quote(op)} THEN {value}" for op, value in mapping.items())
    return f"CASE op {arms} END"


def layers_sql(where: str, ignored: str | None) -> str:
    """One row per (KEYS) with the SUMS, over the forward synaptic ops of `where`."""
    ops = ", ".join(map(_quote, SYNAPTIC_OPS))
    left = _case({op: x for op, (_, _, x) in SYNAPTIC_OPS.items()})
    pairs = _case({op: _quote(p) for op, (p, _, _) in SYNAPTIC_OPS.items()})
    ternary = _case({op: _quote(t) for op, (_, t, _) in SYNAPTIC_OPS.items()})
    dense = _case({op: f"({rule})" for op, rule in DENSE_MACS.items()})
    layers = ", ".join(map(_quote, LAYERS))
    skip = f"AND (rank, scope_id) NOT IN ({ignored})" if ignored else ""
    return f"""
    WITH synaptic AS (
        SELECT rank, seq, step, stage, op, scope_id, args, {left} AS l_pos, {pairs} AS pairs_stat, {ternary} AS ternary_stat
        FROM events WHERE ({where}) AND NOT in_backward AND op IN ({ops}) {skip}
    ), weights AS (
        SELECT DISTINCT rank, device, storage_ptr FROM tensor_states WHERE is_parameter AND storage_ptr <> -1
    ), operands AS (
        SELECT s.rank, s.seq, any_value(s.step) AS step, any_value(s.stage) AS stage, any_value(s.op) AS op,
               any_value(s.scope_id) AS scope_id,
               any_value(s.args) AS args, any_value(s.pairs_stat) AS pairs_stat, any_value(s.ternary_stat) AS ternary_stat,
               {", ".join(f"any_value(t.{fact}) FILTER (WHERE {test}) AS {slot}_{fact}"
                          for slot, test in (("l", "u.role = 'arg' AND u.position = s.l_pos"),
                                             ("r", "u.role = 'arg' AND u.position = s.l_pos + 1"),
                                             ("o", "u.role = 'out' AND u.position = 0"))
                          for fact in ("shape", "numel", "nnz", "is01"))},
               bool_or(w.storage_ptr IS NOT NULL) FILTER (WHERE u.role = 'arg' AND u.position = s.l_pos) AS l_weight,
               bool_or(w.storage_ptr IS NOT NULL) FILTER (WHERE u.role = 'arg' AND u.position = s.l_pos + 1) AS r_weight
        FROM synaptic s
        JOIN event_tensors u ON u.rank = s.rank AND u.seq = s.seq AND u.item IS NULL
             AND ((u.role = 'arg' AND u.position IN (s.l_pos, s.l_pos + 1)) OR (u.role = 'out' AND u.position = 0))
        JOIN tensor_states t ON t.rank = u.rank AND t.tensor_id = u.tensor_id
        LEFT JOIN weights w ON w.rank = t.rank AND w.device = t.device AND w.storage_ptr = t.storage_ptr
        GROUP BY s.rank, s.seq
    ), innermost AS (  -- per tracker state, its deepest scope and that module
        SELECT s.rank, s.scope_id,
               first(p.name ORDER BY p.name = 'Global', len(string_split(p.name, '.')) DESC, p.name DESC) AS scope
        FROM scopes s, UNNEST(s.parents) AS p(name) GROUP BY s.rank, s.scope_id
    ), named AS (
        SELECT rank, coalesce(tracker_name, path) AS scope, min(module_id) AS module_id,
               bool_or(list_has_any(mro, [{layers}])) AS in_layer
        FROM modules GROUP BY ALL
    ), facts AS (
        SELECT o.*, i.scope, n.module_id, coalesce(n.in_layer, false) AS in_layer,
               pairs.value AS pairs, ternary.value AS ternary, {dense} AS dense_mac
        FROM operands o
        JOIN innermost i ON i.rank = o.rank AND i.scope_id = o.scope_id
        LEFT JOIN named n ON n.rank = o.rank AND n.scope = i.scope
        LEFT JOIN op_stats pairs ON pairs.rank = o.rank AND pairs.seq = o.seq AND pairs.stat = o.pairs_stat
        LEFT JOIN op_stats ternary ON ternary.rank = o.rank AND ternary.seq = o.seq AND ternary.stat = o.ternary_stat
    ), called AS (  -- the forward call of the innermost module each op runs in
        SELECT f.*, c.call_seq FROM facts f
        ASOF LEFT JOIN (SELECT rank, module_id, seq AS call_seq FROM module_events WHERE kind = 'forward_pre') c
             ON c.rank = f.rank AND c.module_id = f.module_id AND f.seq > c.call_seq
    ), classified AS (
        SELECT *,
               row_number() OVER (PARTITION BY rank, scope, coalesce(call_seq, -1),
                                  CASE WHEN call_seq IS NULL THEN step END ORDER BY seq) AS index,
               CASE WHEN op IN ({", ".join(map(_quote, CONVOLUTIONS))}) THEN 'conv'
                    WHEN in_layer OR l_weight OR r_weight THEN 'linear' ELSE 'matmul' END AS kind,
               coalesce(l_is01, false) OR coalesce(ternary = 1, false) AS l_spike,
               coalesce(r_is01, false) AS r_spike
        FROM called
    ), oriented AS (  -- x: a weight layer's input (left unless the left operand is the weight); y: the other
        SELECT *, kind <> 'matmul' AND coalesce(l_weight, false) AND NOT coalesce(r_weight, false) AS flipped
        FROM classified
    )
    SELECT rank, step, stage, scope, index, kind,
           CASE WHEN flipped THEN r_spike ELSE l_spike END AS x_spike,
           CASE WHEN kind = 'matmul' THEN r_spike ELSE false END AS y_spike,
           count(*) AS calls, sum(dense_mac)::HUGEINT AS dense_mac,
           sum(CASE WHEN flipped THEN r_nnz ELSE l_nnz END)::HUGEINT AS x_nnz,
           sum(CASE WHEN flipped THEN r_numel ELSE l_numel END)::HUGEINT AS x_numel,
           sum(CASE WHEN flipped THEN l_nnz ELSE r_nnz END)::HUGEINT AS y_nnz,
           sum(CASE WHEN flipped THEN l_numel ELSE r_numel END)::HUGEINT AS y_numel,
           sum(pairs)::HUGEINT AS pairs, min(seq) AS first_seq,
           count(*) FILTER (WHERE pairs IS NULL) AS missing_pairs,
           count(*) FILTER (WHERE l_nnz IS NULL OR r_nnz IS NULL) AS missing_nnz,
           bool_or(in_layer) AS neurobench, any_value(op) AS op
    FROM oriented GROUP BY ALL ORDER BY rank, step, stage, first_seq
    """


def uncosted_notes(trace, where: str = "true", patterns=UNCOSTED) -> list[str]:
    """A note per fused op of UNCOSTED (or `patterns`) the selection ran forward: its calls are
    no layer here."""
    like = " OR ".join(f"op LIKE {_quote(pattern)}" for pattern in patterns)
    rows = trace.con.execute(f"SELECT op, count(*) FROM events WHERE ({where}) AND NOT in_backward AND ({like}) "
                             "GROUP BY op ORDER BY op").fetchall()
    return [f"{op}: {calls} {_LAYER_NOTE if op in FUSED_LAYERS else _ATTENTION_NOTE}" for op, calls in rows]


def map_layers(trace, where: str = "true", ignore_modules=(), *, pairs: bool = False) -> pd.DataFrame:
    """The rows of layers_sql over `trace` (sums as float64: exact below 2**53).
    MissingStatisticsError where the trace lacks an operand's nnz, or with `pairs` (event
    mode reads them) the nonzero pairs (value statistics off, or a trace older than schema 1.3)."""
    for macro in MACROS:
        trace.con.execute(macro)
    ignored = ignored_scopes_sql(list(ignore_modules), None) if ignore_modules else None
    frame = trace.con.execute(layers_sql(where, ignored)).df()
    missing = frame[((frame["missing_pairs"] > 0) & pairs) | (frame["missing_nnz"] > 0)]
    if len(missing):
        first = missing.iloc[0]
        what = "the nnz of an operand" if first["missing_nnz"] else "the nonzero pairs (schema 1.3's NeuroBench statistics)"
        raise MissingStatisticsError(
            f"the paper convention needs op statistics this trace lacks: {what} of {int(first['calls'])} "
            f"{first['op']} calls in {first['scope']}; capture it again with value statistics on")
    for column in ("dense_mac", "x_nnz", "x_numel", "y_nnz", "y_numel", "pairs"):
        frame[column] = frame[column].astype("float64")
    return frame.drop(columns=["missing_pairs", "missing_nnz"])
