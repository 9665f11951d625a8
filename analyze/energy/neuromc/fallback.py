"""Trace fragments: SpikingJelly's fallback from aten ops (convolution, addmm/mm/bmm,
native_batch_norm and its backward), and the ops no rule covers (spec 3.3.2).

SpikingJelly maps every one of those ops and then drops a trace fragment whose signature
(SIGNATURE) equals some module fragment's (kinds.drop_trace_duplicates). The signature does
not always match (a Linear's backward GEMMs have C and K swapped, a 3-D Linear input has
more rows, a binary-input BN's backward is labelled ann_bn_bp), so SpikingJelly counts such
work twice. Default mode instead drops every op that ran inside a Conv/Linear/BN/neuron call
(between the call's hook events, see REGIONS in modules.py): the module fragment already is
that work, and the ops no rule maps there (a surrogate gradient's neg, say) are not uncosted
either. A GEMM or convolution inside a neuron's call is the exception: it is a product the
neuron makes with its own weights, mapped as a trace fragment (EVENT_ROLES). `compat=True`
keeps SpikingJelly's signature rule and its list of unsupported ops.

A backward GEMM's core type (bp_grad vs ann_be) comes from the spike-ness of the forward
GEMM it answers; SpikingJelly pairs them through LIFO queues keyed by shapes, which
gemm_queue.py replays.
"""

from __future__ import annotations

import pandas as pd

from spiketrace.analyze.energy.neuromc import rules as rules
from spiketrace.analyze.energy.neuromc.gemm_queue import forward_spike_of_backward_gemms
from spiketrace.analyze.energy.neuromc.modules import finish
from spiketrace.analyze.energy.neuromc.sql import quoted_list
from spiketrace.analyze.trace.views import record_key

SIGNATURE = ("rank", "stage", "phase", "core_type", "process_key", "BT", "C", "K", "OY", "OX", "FY", "FX",
             "input_precision_bits", "weight_precision_bits", "output_precision_bits",
             "input_numel", "weight_numel", "output_numel", "mac_count", "conv_type", "b_type", "t_type")

# The ops SpikingJelly ignores, decided once per distinct op (a table), not once per event:
# the distinct ops are a table of their own first, as DuckDB would push the test below a
# DISTINCT in the same query and run its lambda on every event (a cost per event, not per op).
DISTINCT_OPS = "SELECT DISTINCT op FROM events"
IGNORED_OPS = f"""SELECT op FROM nmc_distinct_ops
WHERE nmc_op_is_ignored(op, {quoted_list(rules.IGNORED_OP_PREFIXES)}) OR op IN {tuple(rules.AUXILIARY_OPS)}"""
_SPIKINGJELLY_IGNORES = "(op IN (SELECT op FROM nmc_ignored_ops))"

# Per op that may carry work: does it run inside a Conv/Linear/BN/neuron call (then it is
# that call's work) or inside an ignored module's call (nmc_regions, modules.py).
# A GEMM or convolution inside a neuron's call is no soma work but a product the neuron makes
# with its own weights (Norse's LIFRecurrentCell: W_in x + W_rec z), so only a layer's call
# (`in_layer`) takes those ops for its own; the soma covers the rest of the neuron's ops.
# Regions nest (a Sequential's call holds its children's), so an op may lie in several: a
# range join on record keys (see record_key), linear in the ops and regions.
EVENT_ROLES = f"""
SELECT e.rank, e.seq, bool_or(m.kind IS NOT NULL AND NOT m.ignored) AS covered,
       bool_or(m.kind IS NOT NULL AND m.kind <> 'soma' AND NOT m.ignored) AS in_layer, bool_or(m.ignored) AS ignored
FROM (SELECT rank, seq, {record_key("rank", "seq")} AS key FROM events WHERE NOT {_SPIKINGJELLY_IGNORES}) e
JOIN (SELECT rank, module_id, {record_key("rank", "start_seq")} AS start_key, {record_key("rank", "end_seq")} AS end_key
      FROM nmc_regions) r ON e.key > r.start_key AND e.key < r.end_key
JOIN nmc_modules m ON m.rank = r.rank AND m.module_id = r.module_id
GROUP BY ALL
"""

# Per (rank, scope): the deepest module the tracker has running, for attribution.
SCOPE_SQL = """
WITH named AS (SELECT rank, scope_id, UNNEST(parents) AS name FROM scopes)
SELECT n.rank, n.scope_id, arg_max(m.path, length(m.path)) AS module
FROM named n LEFT JOIN nmc_modules m ON m.rank = n.rank AND coalesce(m.tracker_name, m.path) = n.name
GROUP BY ALL
"""

_ROLES_JOIN = """JOIN nmc_scope_roles s ON s.rank = e.rank AND s.scope_id = e.scope_id
    LEFT JOIN nmc_event_roles r ON r.rank = e.rank AND r.seq = e.seq"""

EVENTS_SQL = f"""
WITH e AS MATERIALIZED (
    SELECT e.rank, e.seq, e.step, e.op, e.stage, e.stage_id, coalesce(e.recompute, false) AS recompute,
           -- a recomputed op is forward work, whichever stage it ran in
           CASE WHEN e.recompute THEN 'forward' ELSE coalesce(e.phase, 'forward') END AS stage_phase,
           e.grad_enabled, e.args, json_array_length(e.args)::INTEGER AS n_args, s.module,
           coalesce(r.covered, false) AS covered, coalesce(r.in_layer, false) AS in_layer,
           coalesce(r.ignored, false) AS ignored, coalesce(o.reuse_weights, false) AS reuse,
           coalesce(o.batch_norm_backward, true) AS bn_backward
    FROM events e {_ROLES_JOIN}
    LEFT JOIN stages o ON o.rank = e.rank AND o.stage_id = e.stage_id
    WHERE e.op IN {tuple(rules.FALLBACK_OPS)} AND coalesce(e.phase, '') <> 'optimizer'
      AND NOT (coalesce(e.phase, 'forward') = 'backward' AND e.grad_enabled
               AND NOT ({{map_recomputed}} AND coalesce(e.recompute, false)))
),
tensor AS MATERIALIZED (  -- the tensors of these ops only, not of every op of the trace
    SELECT u.rank, u.seq, u.role, u.position, t.shape, t.numel, t.is01, t.requires_grad
    FROM event_tensors u JOIN tensor_states t ON t.rank = u.rank AND t.tensor_id = u.tensor_id
    WHERE u.item IS NULL AND {record_key("u.rank", "u.seq")} IN (SELECT {record_key("rank", "seq")} FROM e)
)
SELECT e.* EXCLUDE (args, n_args),  -- the arguments' JSON, a string per event, is read here only
    x.numel AS x_numel, nmc_spike(x.is01, x.numel) AS x_spike, coalesce(x.requires_grad, false) AS x_requires_grad,
    y.numel AS y_numel, nmc_spike(y.is01, y.numel) AS y_spike, coalesce(y.requires_grad, false) AS y_requires_grad,
    o.numel AS out_numel,
    coalesce(len(x.shape), 0) AS x_ndim, coalesce(len(o.shape), 0) AS out_ndim,
    coalesce(x.shape[1], 1) AS x0, coalesce(x.shape[2], 1) AS x1, coalesce(x.shape[-1], 1) AS xl,
    coalesce(y.shape[-1], 1) AS yl, coalesce(o.shape[2], 1) AS out1,
    nmc_rows(o.shape[3:]) AS out_rows, nmc_cols(o.shape[3:]) AS out_cols,
    nmc_rows(x.shape[3:]) AS x_rows, nmc_cols(x.shape[3:]) AS x_cols,
    nmc_rows(y.shape[3:]) AS kernel_rows, nmc_cols(y.shape[3:]) AS kernel_cols,
    prod(x.shape[3:]) AS x_spatial,
    CAST(x.shape AS VARCHAR) AS x_key, CAST(o.shape AS VARCHAR) AS out_key,
    EXISTS (SELECT 1 FROM nmc_trainable_shapes p WHERE p.rank = e.rank AND p.shape = o.shape) AS out_trainable,
    CASE WHEN e.op = '{rules.CONVOLUTION}' THEN json_extract(e.args, '$[8]')::BIGINT ELSE 1 END AS groups,
    CASE WHEN e.op = '{rules.CONVOLUTION}' THEN json_extract(e.args, '$[6]')::BOOLEAN ELSE false END AS transposed
FROM e
LEFT JOIN tensor x ON x.rank = e.rank AND x.seq = e.seq AND x.role = 'arg'
     AND x.position = CASE WHEN e.op LIKE '%mm.default' THEN e.n_args - 2 ELSE 0 END
LEFT JOIN tensor y ON y.rank = e.rank AND y.seq = e.seq AND y.role = 'arg'
     AND y.position = CASE WHEN e.op LIKE '%mm.default' THEN e.n_args - 1 ELSE 1 END
LEFT JOIN tensor o ON o.rank = e.rank AND o.seq = e.seq AND o.role = 'out' AND o.position = 0
"""

TRAINABLE_SHAPES = """
SELECT DISTINCT rank, (p->'shape')::BIGINT[] AS shape
FROM modules, UNNEST(CAST(parameters AS JSON[])) AS u(p)
WHERE in_model AND (p->>'requires_grad')::BOOLEAN
"""


def _gemm_kind(events: pd.DataFrame) -> pd.Series:
    """forward / wg / bp for each GEMM event, by SpikingJelly's requires_grad rule: a weight
    gradient when only x requires grad, or when neither/both do and out has a trainable
    parameter's shape; else an input gradient."""
    x_req, y_req = events["x_requires_grad"].astype(bool), events["y_requires_grad"].astype(bool)
    weight_gradient = (x_req & ~y_req) | (~(x_req ^ y_req) & events["out_trainable"].astype(bool))
    kind = pd.Series("bp", index=events.index).where(~weight_gradient, "wg")
    return kind.where(events["stage_phase"] != "forward", "forward")


def _refusals(events: pd.DataFrame, masks: dict[str, pd.Series]) -> None:
    """SpikingJelly's trace-fallback errors (compat mode), in events['error']."""
    # SpikingJelly passes native_batch_norm_backward's (args, out) as (grad_input, grad_output),
    # so it reads the layout from out[0]; without an input gradient it crashes.
    events.loc[masks["bn_backward"] & events["out_numel"].isna(), "error"] = (
        "SpikingJelly's trace fallback fails on native_batch_norm_backward without an input gradient (AttributeError)")
    events.loc[masks["conv"] & ((events["x_ndim"] > 4) | (events["out_ndim"] > 4)), "error"] = (
        "NeuroMC runtime does not support multi-step or 3D Conv trace fallback yet.")
    events.loc[masks["bn"] & (events["x_ndim"] > 4), "error"] = (
        "NeuroMC runtime does not support multi-step or 3D BatchNorm trace fallback yet.")


def _labels(events: pd.DataFrame, spike: pd.Series, dense: str, spiking: str) -> pd.Series:
    return pd.Series(dense, index=events.index).where(~spike, spiking)


def _gemm_columns(frame: pd.DataFrame, events: pd.DataFrame) -> None:
    """addmm/mm/bmm, x = args[-2], y = args[-1]: rows B (x's leading dims), C = x.shape[-1],
    K = y.shape[-1]; a weight-gradient GEMM reads rows from x.shape[-1] and C from x.shape[0]."""
    kind = _gemm_kind(events).where(events["op"].isin(rules.GEMMS), "")
    x0, x1, xl = (events[c].astype("int64") for c in ("x0", "x1", "xl"))
    two_d = events["x_ndim"] == 2
    frame["B"] = x0.where(two_d, x0 * x1).where(kind != "wg", xl.where(two_d, x0 * xl))
    frame["C"] = xl.where(kind != "wg", x0.where(two_d, x1))
    frame["K"] = events["yl"].astype("int64")
    spike = events["x_spike"].astype(bool)
    queue_spike = forward_spike_of_backward_gemms(events, kind)
    frame["core_type"] = (_labels(events, spike, "ann_fe", "fp_soma")
                          .where(kind == "forward", _labels(events, spike, "ann_we", "wg"))
                          .where(kind != "bp", _labels(events, queue_spike, "ann_be", "bp_grad")))
    frame["input_precision_bits"] = pd.Series(16, index=events.index).where(~spike | (kind == "bp"), 1)


def _conv_columns(frame: pd.DataFrame, events: pd.DataFrame, conv: pd.Series, compat: bool) -> None:
    """convolution (forward phase): B = N, C = C_in, K = C_out, OY/OX from out, FY/FX from w.
    Default: C and K per group with G groups, and a transposed conv's rows are its input
    positions (each scatters into C_out/g x kernel taps)."""
    get = {c: events[c].astype("int64")[conv] for c in (
        "x0", "x1", "out1", "out_rows", "out_cols", "x_rows", "x_cols", "kernel_rows", "kernel_cols", "groups")}
    groups = 1 if compat else get["groups"].clip(lower=1)
    transposed = (events["transposed"].astype(bool) & (not compat))[conv]
    frame.loc[conv, "B"] = get["x0"]
    frame.loc[conv, "C"], frame.loc[conv, "K"], frame.loc[conv, "G"] = get["x1"] // groups, get["out1"] // groups, groups
    frame.loc[conv, "OY"] = get["out_rows"].where(~transposed, get["x_rows"])
    frame.loc[conv, "OX"] = get["out_cols"].where(~transposed, get["x_cols"])
    frame.loc[conv, "FY"], frame.loc[conv, "FX"] = get["kernel_rows"], get["kernel_cols"]
    spike = events["x_spike"].astype(bool)
    frame.loc[conv, "core_type"] = _labels(events, spike, "ann_fe", "fp_soma")[conv]
    frame.loc[conv, "input_precision_bits"] = pd.Series(16, index=events.index).where(~spike, 1)[conv]


def _batch_norm_columns(frame: pd.DataFrame, events: pd.DataFrame, forward: pd.Series, backward: pd.Series,
                        compat: bool) -> None:
    """native_batch_norm (x = args[0]) and its backward (grad_out = args[0], input = args[1]),
    cudnn_batch_norm and its backward (input = args[0], grad_out = args[1]: the same shapes),
    laid out as a single-step [N, C, ...] tensor; SpikingJelly never sees a trace BN backward's
    input as spiking (its predicate rejects trace snapshots), default mode does."""
    rows = forward | backward
    ndim, numel = events["x_ndim"], events["x_numel"].fillna(0).astype("int64")
    channels = events["x1"].astype("int64").where(ndim >= 2, numel)
    frame.loc[rows, "B"] = events["x0"].astype("int64").where(ndim > 0, 1)[rows]
    frame.loc[rows, "C"] = frame.loc[rows, "K"] = channels[rows]
    frame.loc[rows, "OY"] = events["x_spatial"].astype("int64")[rows]
    input_first = events["op"] == rules.CUDNN_BATCH_NORM_BACKWARD
    backward_input_spike = events["y_spike"].astype(bool).where(~input_first, events["x_spike"].astype(bool))
    spike = events["x_spike"].astype(bool).where(forward, False if compat else backward_input_spike)
    frame.loc[rows, "core_type"] = _labels(events, spike, "ann_bn", "fp_bn").where(
        forward, _labels(events, spike, "ann_bn_bp", "bp_bn"))[rows]
    frame.loc[rows, "process_key"] = "with_bn"
    frame.loc[rows, "input_precision_bits"] = 16
    frame.loc[rows, "weight_numel"] = 2 * channels[rows]
    frame.loc[rows, ["b_type", "t_type"]] = 0
    frame.loc[rows, "has_mac"] = False
    frame.loc[backward, "conv_type"] = events["bn_backward"].map({True: "--", False: "without_bp_bn"})[backward]
    frame.loc[backward, "phase"] = "backward"


def trace_fragments(trace, *, compat: bool, recompute: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(fragments, events): trace fragments (before deduplication) and the fallback events,
    the latter with a `mapped` flag and an `error` message for ops SpikingJelly refuses.
    SpikingJelly skips every op a backward stage runs with grad enabled (recomputation, as it
    guesses it); with `recompute` the ops the trace flags as recomputed are mapped, as forward work."""
    trace.con.execute(f"CREATE OR REPLACE TEMP TABLE nmc_distinct_ops AS {DISTINCT_OPS}")
    trace.con.execute(f"CREATE OR REPLACE TEMP TABLE nmc_ignored_ops AS {IGNORED_OPS}")
    trace.con.execute(f"CREATE OR REPLACE TEMP TABLE nmc_scope_roles AS {SCOPE_SQL}")
    trace.con.execute(f"CREATE OR REPLACE TEMP TABLE nmc_event_roles AS {EVENT_ROLES}")
    trace.con.execute(f"CREATE OR REPLACE TEMP TABLE nmc_trainable_shapes AS {TRAINABLE_SHAPES}")
    query = EVENTS_SQL.replace("{map_recomputed}", str(bool(recompute)).lower())
    events = trace.sql(query).sort_values(["rank", "seq"], kind="stable").reset_index(drop=True)
    events["error"] = None
    op, forward_phase = events["op"], events["stage_phase"] == "forward"
    norms, backwards = ((rules.BATCH_NORM,), (rules.BATCH_NORM_BACKWARD,)) if compat else (
        rules.BATCH_NORMS, rules.BATCH_NORM_BACKWARDS)
    masks = {"conv": (op == rules.CONVOLUTION) & forward_phase, "bn": op.isin(norms) & forward_phase,
             "bn_backward": op.isin(backwards), "gemm": op.isin(rules.GEMMS)}
    if compat:
        _refusals(events, masks)
    events["mapped"] = (masks["conv"] | masks["bn"] | masks["bn_backward"] | masks["gemm"]) & events["error"].isna()
    if not compat:
        events["mapped"] &= ~events["in_layer"]
    events.loc[events["ignored"], "mapped"] = False

    frame = events[["rank", "step", "seq", "stage", "module", "recompute"]].copy()
    frame["sub"], frame["T"], frame["OY"], frame["OX"], frame["FY"], frame["FX"], frame["G"] = 0, 1, 1, 1, 1, 1, 1
    frame["phase"] = events["stage_phase"]
    frame["op_name"] = op.replace({**{name: "bn.forward" for name in rules.BATCH_NORMS},
                                   **{name: "bn.backward" for name in rules.BATCH_NORM_BACKWARDS}})
    frame["process_key"], frame["conv_type"], frame["has_mac"] = "with_nothing", "--", True
    frame["input_numel"] = events["x_numel"].fillna(0).astype("int64")
    frame["weight_numel"] = events["y_numel"].fillna(0).astype("int64")
    frame["output_numel"] = events["out_numel"].fillna(0).astype("int64")
    frame["b_type"], frame["t_type"] = 0, events["reuse"].astype(bool).astype("int64")
    frame["weight_precision_bits"] = frame["output_precision_bits"] = 16
    _gemm_columns(frame, events)
    _conv_columns(frame, events, masks["conv"], compat)
    _batch_norm_columns(frame, events, masks["bn"], masks["bn_backward"], compat)
    frame = finish(frame[events["mapped"]], source="trace")
    if compat:  # SpikingJelly builds BN trace fragments with its module constructors
        frame.loc[frame["process_key"] == "with_bn", "source"] = "module"
    return frame, events


UNCOSTED_SQL = f"""
WITH candidates AS MATERIALIZED (
    SELECT e.rank, e.step, e.seq, e.op, e.stage, coalesce(e.phase, 'forward') AS phase, s.module,
           coalesce(e.recompute, false) AS recompute
    FROM events e {_ROLES_JOIN}
    WHERE coalesce(e.phase, '') <> 'optimizer' AND NOT {_SPIKINGJELLY_IGNORES} AND {{scope}}
),
volumes AS (  -- keyed on record keys: a join on rank alone of candidates and tensors is then impossible
    SELECT u.rank, u.seq,
           sum(CASE WHEN u.role <> 'out' THEN t.numel ELSE 0 END) AS input_elements,
           sum(CASE WHEN u.role <> 'out' THEN t.numel * t.element_size ELSE 0 END) AS bytes_read,
           sum(CASE WHEN u.role = 'out' THEN t.numel ELSE 0 END) AS output_elements,
           sum(CASE WHEN u.role = 'out' THEN t.numel * t.element_size ELSE 0 END) AS bytes_written
    FROM event_tensors u JOIN tensor_states t ON t.rank = u.rank AND t.tensor_id = u.tensor_id
    WHERE {record_key("u.rank", "u.seq")} IN (SELECT {record_key("rank", "seq")} FROM candidates)
    GROUP BY ALL
)
SELECT c.*, coalesce(v.input_elements, 0) AS input_elements, coalesce(v.output_elements, 0) AS output_elements,
       coalesce(v.bytes_read, 0) AS bytes_read, coalesce(v.bytes_written, 0) AS bytes_written
FROM candidates c LEFT JOIN volumes v ON v.rank = c.rank AND v.seq = c.seq
"""


# SpikingJelly's _module_conv_backward_calls: backward hook calls of Conv1d/2d/3d modules.
CONV_BACKWARD_CALLS = """SELECT count(*) FROM nmc_backward_calls b JOIN nmc_supported s USING (rank, module_id)
WHERE s.kind IN ('conv', 'conv3d')"""


def uncosted_ops(trace, events: pd.DataFrame, *, compat: bool) -> tuple[pd.DataFrame, dict | None]:
    """(ops, convolution_backward): one row per op event that no fragment costs (calls
    aggregated later), with volumes.

    Compat follows SpikingJelly's `_unsupported_ops`: every op but the ignored/auxiliary
    ones, the six fallback ops, and convolution_backward up to the conv modules' backward
    calls: those events are given apart ({"rows", "events", "calls"}: uncosted unless the
    trace's events are no more than its calls, which the caller decides over every range of
    a trace). Default: every op outside a Conv/Linear/BN/neuron call that gave no fragment."""
    frame = trace.sql(UNCOSTED_SQL.format(scope="NOT coalesce(r.ignored, false)" if compat
                                        else "NOT coalesce(r.covered OR r.ignored, false)"))
    if compat:
        frame = frame[~frame["op"].isin(rules.SPIKINGJELLY_FALLBACK_OPS)].assign(
            reason="SpikingJelly has no NeuroMC rule for this op")
        conv_backward = (frame["op"] == rules.CONVOLUTION_BACKWARD).to_numpy()
        calls = int(trace.con.execute(CONV_BACKWARD_CALLS).fetchone()[0])
        given_apart = {"rows": frame[conv_backward].reset_index(drop=True), "events": int(conv_backward.sum()),
                       "calls": calls}
        return frame[~conv_backward].reset_index(drop=True), given_apart
    else:
        mapped = events.loc[events["mapped"], ["rank", "seq"]].assign(_mapped=True)
        frame = frame.merge(mapped, on=["rank", "seq"], how="left")
        frame = frame[frame.pop("_mapped").isna()].assign(
            reason="no NeuroMC rule for this op outside a Conv/Linear/BN/neuron call")
    return frame.reset_index(drop=True), None
