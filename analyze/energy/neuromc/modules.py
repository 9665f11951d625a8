"""Module fragments: the work of each Conv/Linear/BatchNorm/neuron call, as SpikingJelly's
NeuroMCEnergyProfiler maps it from its module hooks (spec 3.3.2), in one SQL pass.

Forward: one fragment per forward call. SpikingJelly skips a forward that a backward-phase
stage runs with grad enabled (checkpoint recomputation, as it guesses it); the trace flags
recomputation (`recompute`), so a recomputed forward gives its fragment when asked to
(`recompute=True`), and other grad-enabled forwards in backward stay skipped. Backward: per
full-backward call, conv/linear give a grad-input fragment (when the input gradient exists)
and a grad-weight fragment (when the weight requires grad), BN one, a neuron one. A non-neuron module's
backward pairs with a forward input through a per-module LIFO stack, exactly as
SpikingJelly's `_module_inputs[module].pop()`; the input's spike-ness picks the core type.

Default mode fixes two of SpikingJelly's miscounts (docs/deviations.md):
* a Linear's GEMM rows are every leading dim of its input, not just dim 0 (3-D Linear);
* a grouped conv reduces over C/groups input channels per group: loop dims C = in/g,
  K = out/g and G = g groups (SpikingJelly uses C = in_channels, over-counting by g).
Conv3d, which SpikingJelly refuses, folds its depth into the rows (OY = D*H, FY = KD*KH).
"""

from __future__ import annotations

import pandas as pd

from spiketrace.analyze import neurons
from spiketrace.analyze.energy.neuromc import rules as rules
from spiketrace.analyze.energy.neuromc.sql import (
    ignored_module_condition,
    layout,
    quoted_list,
    rows_of_features,
    tensor_columns,
    used_tensors,
)

MODEL = "neuromc"  # its name for analyze/neurons.py

KIND = f"""CASE WHEN list_has_any(mro, {quoted_list(rules.CONV_CLASSES)}) THEN 'conv'
    WHEN list_contains(mro, '{rules.CONV3D_CLASS}') THEN 'conv3d'
    WHEN list_contains(mro, '{rules.LINEAR_CLASS}') THEN 'linear'
    WHEN list_has_any(mro, {quoted_list(rules.BATCH_NORM_CLASSES)}) THEN 'bn'
    WHEN {{neuron}} THEN 'soma' END"""

# Every module of the model with its NeuroMC kind (NULL: no fragment of its own). A neuron is
# a SpikingJelly BaseNode, or (default mode) an snnTorch/Norse neuron of analyze/neurons.py:
# one soma per output element and step, whatever its model (Norse's LIF runs T steps a call).
MODULES_SQL = f"""
SELECT rank, module_id, path, tracker_name, class_name, kind, attributes,
    coalesce(attributes->>'step_mode', 's') = 'm' OR {{multi_step_neuron}} AS multi_step,
    coalesce((w[1]->>'numel')::BIGINT, 0) AS weight_numel,
    coalesce((w[1]->>'requires_grad')::BOOLEAN, false) AS weight_requires_grad,
    coalesce(TRY_CAST(attributes->>'groups' AS BIGINT), 1) AS groups,
    coalesce(TRY_CAST(attributes->'kernel_size' AS BIGINT[]), []::BIGINT[]) AS kernel,
    {{ignored}} AS ignored
FROM (SELECT *, {KIND} AS kind,
             list_filter(CAST(parameters AS JSON[]), lambda p: p->>'name' = 'weight') AS w
      FROM modules WHERE in_model) m
"""

FORWARD_CALLS = """
SELECT post.rank, post.module_id, post.seq, pre.seq AS pre_seq, post.step, post.stage, post.stage_id,
       coalesce(post.phase, 'forward') AS stage_phase, post.grad_enabled,
       coalesce(pre.inputs[1], post.kwarg_inputs[1]) AS x_id, post.outputs[1] AS out_id,
       coalesce(post.recompute, false) AS recompute
FROM module_events post JOIN module_events pre
  ON pre.rank = post.rank AND pre.module_id = post.module_id AND pre.call_index = post.call_index
 AND pre.kind = 'forward_pre'
WHERE post.kind = 'forward_post'
"""

# A backward-post event pairs with its backward-pre like parentheses, per module: a module
# called twice can see pre(2nd), pre(1st), post(1st), post(2nd) (its hooks share a tensor).
BACKWARD_CALLS = """
WITH hooks AS (
    SELECT *, sum(CASE kind WHEN 'backward_pre' THEN 1 ELSE -1 END)
              OVER (PARTITION BY rank, module_id ORDER BY seq ROWS UNBOUNDED PRECEDING) AS depth
    FROM module_events WHERE kind IN ('backward_pre', 'backward_post')
)
SELECT post.rank, post.module_id, post.seq, pre.seq AS pre_seq, post.step, post.stage, post.stage_id,
       post.inputs_require_grad, pre.outputs[1] AS grad_out_id,
       CASE WHEN post.inputs_require_grad THEN post.inputs[1] END AS grad_in_id
FROM (SELECT * FROM hooks WHERE kind = 'backward_post') post
ASOF JOIN (SELECT * FROM hooks WHERE kind = 'backward_pre') pre
  ON pre.rank = post.rank AND pre.module_id = post.module_id AND pre.depth = post.depth + 1 AND post.seq > pre.seq
"""

# SpikingJelly's per-module LIFO of forward inputs: a forward with grad enabled pushes its
# input, each backward call pops one. SpikingJelly's own hooks run one call at a time, in
# the order the calls' output gradients arrive (our backward-pre order), so the pop happens
# at the backward-pre. A pop at stack depth k takes the latest push that reached depth k.
PAIRING = """
WITH stack AS (
    SELECT f.rank, f.module_id, f.seq, 1 AS d, f.x_id FROM nmc_forward_calls f
    JOIN nmc_supported s USING (rank, module_id) WHERE s.kind <> 'soma' AND f.grad_enabled
    UNION ALL
    SELECT b.rank, b.module_id, b.pre_seq, -1 AS d, NULL FROM nmc_backward_calls b
    JOIN nmc_supported s USING (rank, module_id) WHERE s.kind <> 'soma'
),
depths AS (SELECT *, sum(d) OVER (PARTITION BY rank, module_id ORDER BY seq ROWS UNBOUNDED PRECEDING) AS depth
           FROM stack)
SELECT pop.rank, pop.module_id, pop.seq AS pre_seq, push.x_id, push.seq AS push_seq
FROM (SELECT * FROM depths WHERE d = -1) pop
ASOF LEFT JOIN (SELECT * FROM depths WHERE d = 1) push
  ON push.rank = pop.rank AND push.module_id = pop.module_id AND push.depth = pop.depth + 1 AND pop.seq > push.seq
"""

# The ops each module call ran: forward between its pre and post hooks; backward from its
# backward-pre to its backward-post, or, when no input needs a gradient (no post comes
# after the work), until another gradient's backward-pre or the end of the autograd pass.
# Every hook on one gradient fires at once, before the node that consumes it runs: a module
# whose output is also its parent's (the last child of a Sequential, a one-child wrapper)
# or an Identity's shares its gradient, so their backward-pres follow its own before any of
# its ops. Such a run of backward-pres on one gradient is one batch, and only the next
# batch (another gradient's turn) ends a region, whatever the nesting.
REGIONS = """
WITH pres AS (
    SELECT rank, seq, outputs IS DISTINCT FROM lag(outputs) OVER (PARTITION BY rank ORDER BY seq) AS new_batch
    FROM module_events WHERE kind = 'backward_pre'
),
open_ended AS (
    SELECT b.rank, b.module_id, b.pre_seq, b.seq, b.inputs_require_grad, n.seq AS next_batch, e.seq AS pass_end
    FROM nmc_backward_calls b
    ASOF LEFT JOIN (SELECT rank, seq FROM pres WHERE new_batch) n
      ON n.rank = b.rank AND n.seq > b.pre_seq
    ASOF LEFT JOIN (SELECT rank, seq FROM events WHERE NOT in_backward) e
      ON e.rank = b.rank AND e.seq > b.pre_seq
)
SELECT rank, module_id, pre_seq AS start_seq, seq AS end_seq FROM nmc_forward_calls
UNION ALL
SELECT rank, module_id, pre_seq,
       CASE WHEN inputs_require_grad THEN seq
            ELSE least(coalesce(next_batch, 9223372036854775807), coalesce(pass_end, 9223372036854775807)) END
FROM open_ended
"""

# Per module: forward inputs pushed less popped, and the pops (sums: they add up over step ranges).
STACK_BALANCES = """
SELECT s.path, s.class_name, sum(st.d)::BIGINT AS balance, count(*) FILTER (WHERE st.d < 0) AS pops
FROM (SELECT rank, module_id, 1 AS d FROM nmc_forward_calls WHERE grad_enabled
      UNION ALL SELECT rank, module_id, -1 FROM nmc_backward_calls) st
JOIN nmc_supported s USING (rank, module_id)
WHERE s.kind <> 'soma'
GROUP BY ALL
"""


def leftover_classes(balances: pd.DataFrame) -> list[str]:
    """The classes of modules whose forward inputs were pushed but never popped although the
    module ran backward (SpikingJelly's "selective backward"), from STACK_BALANCES rows."""
    added = balances.groupby(["path", "class_name"], as_index=False)[["balance", "pops"]].sum()
    return sorted(set(added.loc[(added["balance"] > 0) & (added["pops"] > 0), "class_name"]))


def _geometry(compat: bool, t: str) -> dict[str, str]:
    """Loop dims C, K, G, OY, OX, FY, FX of a conv from module attributes and the spatial dims of `t`."""
    groups = "1" if compat else "groups"
    return {
        "C": f"(attributes->>'in_channels')::BIGINT // {groups}",
        "K": f"(attributes->>'out_channels')::BIGINT // {groups}",
        "G": groups,
        "OY": f"nmc_rows({t}_spatial)", "OX": f"nmc_cols({t}_spatial)",
        "FY": "nmc_rows(kernel)", "FX": "nmc_cols(kernel)",
    }


def _forward_sql(compat: bool, recompute: bool) -> str:
    x, out = layout("x", "multi_step"), layout("out", "multi_step")
    conv = _geometry(compat, "out")
    linear_rows = x["B"] if compat else rows_of_features("x", "multi_step")
    x_select, x_join = tensor_columns("x", "x_id", "used")
    o_select, o_join = tensor_columns("out", "out_id", "used")
    return f"""
WITH c AS (SELECT f.*, s.kind, s.path, s.multi_step, s.weight_numel, s.groups, s.kernel, s.attributes
           FROM nmc_forward_calls f JOIN nmc_supported s USING (rank, module_id)
           WHERE NOT s.ignored AND NOT (f.stage_phase = 'backward' AND f.grad_enabled
                                        AND NOT ({str(recompute).lower()} AND f.recompute))),
used AS ({used_tensors("c", ("x_id", "out_id"))}),
facts AS (SELECT c.*, {x_select}, {o_select}, coalesce(o.reuse_weights, false) AS reuse
          FROM c {x_join} {o_join} LEFT JOIN stages o ON o.rank = c.rank AND o.stage_id = c.stage_id),
laid AS (SELECT *, nmc_spike(x_is01, x_numel) AS spike, {out['spatial']} AS out_spatial,
                {x['T']} AS x_T, {x['B']} AS x_B, {x['C']} AS x_C, {x['spatial']} AS x_spatial,
                {out['T']} AS out_T, {out['B']} AS out_B, {out['C']} AS out_C,
                (multi_step AND (len(x_shape) < 3 OR len(out_shape) < 3)) AS bad_layout
         FROM facts s)
SELECT rank, step, seq, 0 AS sub, stage, 'forward' AS phase, kind AS module_kind, path AS module, bad_layout,
    recompute, replace(kind, 'conv3d', 'conv') || '.forward' AS op_name,
    CASE WHEN kind IN ('conv', 'conv3d', 'linear') THEN CASE WHEN spike THEN 'fp_soma' ELSE 'ann_fe' END
         WHEN kind = 'bn' THEN CASE WHEN spike THEN 'fp_bn' ELSE 'ann_bn' END ELSE 'fp_soma' END AS core_type,
    CASE kind WHEN 'bn' THEN 'with_bn' WHEN 'soma' THEN 'with_sg' ELSE 'with_nothing' END AS process_key,
    CASE WHEN kind = 'soma' THEN out_B WHEN kind = 'linear' THEN {linear_rows} ELSE x_B END AS B,
    CASE WHEN kind = 'soma' THEN out_T ELSE x_T END AS T,
    CASE kind WHEN 'soma' THEN out_C WHEN 'bn' THEN x_C WHEN 'linear' THEN (attributes->>'in_features')::BIGINT
         ELSE {conv['C']} END AS C,
    CASE kind WHEN 'soma' THEN out_C WHEN 'bn' THEN x_C WHEN 'linear' THEN (attributes->>'out_features')::BIGINT
         ELSE {conv['K']} END AS K,
    CASE kind WHEN 'soma' THEN prod(out_spatial) WHEN 'bn' THEN prod(x_spatial) WHEN 'linear' THEN 1
         ELSE {conv['OY']} END AS OY,
    CASE WHEN kind IN ('conv', 'conv3d') THEN {conv['OX']} ELSE 1 END AS OX,
    CASE WHEN kind IN ('conv', 'conv3d') THEN {conv['FY']} ELSE 1 END AS FY,
    CASE WHEN kind IN ('conv', 'conv3d') THEN {conv['FX']} ELSE 1 END AS FX,
    CASE WHEN kind IN ('conv', 'conv3d') THEN {conv['G']} ELSE 1 END AS G,
    CASE WHEN kind IN ('conv', 'conv3d', 'linear') AND spike THEN 1 ELSE 16 END AS input_precision_bits,
    16 AS weight_precision_bits,
    CASE WHEN kind = 'soma' THEN 1 ELSE 16 END AS output_precision_bits,
    coalesce(x_numel, 0) AS input_numel,
    CASE kind WHEN 'soma' THEN 0 WHEN 'bn' THEN 2 * x_C ELSE weight_numel END AS weight_numel,
    coalesce(out_numel, 0) AS output_numel,
    kind IN ('conv', 'conv3d', 'linear') AS has_mac,
    '--' AS conv_type, 0 AS b_type,
    CASE WHEN kind <> 'bn' AND reuse THEN 1 ELSE 0 END AS t_type
FROM laid
"""


def _backward_sql(compat: bool) -> str:
    g = layout("grad_out", "multi_step")
    gi = layout("grad_in", "multi_step")
    conv = _geometry(compat, "grad_out")
    linear_rows = g["B"] if compat else rows_of_features("grad_out", "multi_step")
    g_select, g_join = tensor_columns("grad_out", "grad_out_id", "used")
    i_select, i_join = tensor_columns("grad_in", "grad_in_id", "used")
    x_select, x_join = tensor_columns("x", "x_id", "used")
    return f"""
WITH c AS (SELECT b.*, p.x_id, p.push_seq, s.kind, s.path, s.multi_step, s.weight_numel, s.weight_requires_grad,
                  s.groups, s.kernel, s.attributes
           FROM nmc_backward_calls b JOIN nmc_supported s USING (rank, module_id)
           LEFT JOIN nmc_pairing p USING (rank, module_id, pre_seq)
           WHERE NOT s.ignored),
used AS ({used_tensors("c", ("grad_out_id", "grad_in_id", "x_id"))}),
facts AS (SELECT c.*, {g_select}, {i_select}, {x_select},
                 coalesce(o.batch_norm_backward, true) AS bn_backward
          FROM c {g_join} {i_join} {x_join} LEFT JOIN stages o ON o.rank = c.rank AND o.stage_id = c.stage_id),
laid AS (SELECT *, nmc_spike(x_is01, x_numel) AS spike, grad_in_numel IS NOT NULL AS has_grad_in,
                {g['T']} AS g_T, {g['B']} AS g_B, {g['C']} AS g_C, {g['spatial']} AS grad_out_spatial,
                {gi['T']} AS i_T, {gi['B']} AS i_B, {gi['C']} AS i_C, {gi['spatial']} AS i_spatial,
                (multi_step AND len(grad_out_shape) < 3) AS bad_layout,
                kind <> 'soma' AND push_seq IS NULL AS unpaired
         FROM facts s),
parts AS (
    SELECT *, 0 AS sub, 'grad_input' AS part FROM laid WHERE kind IN ('conv', 'conv3d', 'linear') AND has_grad_in
    UNION ALL SELECT *, 1, 'grad_weight' FROM laid WHERE kind IN ('conv', 'conv3d', 'linear') AND weight_requires_grad
    UNION ALL SELECT *, 0, 'bn' FROM laid WHERE kind = 'bn'
    UNION ALL SELECT *, 0, 'soma' FROM laid WHERE kind = 'soma')
SELECT rank, step, seq, sub, stage, 'backward' AS phase, kind AS module_kind, path AS module, bad_layout, unpaired,
    false AS recompute,
    replace(kind, 'conv3d', 'conv') || '.backward' || CASE WHEN part IN ('bn', 'soma') THEN '' ELSE '.' || part END AS op_name,
    CASE part WHEN 'grad_input' THEN CASE WHEN spike THEN 'bp_grad' ELSE 'ann_be' END
              WHEN 'grad_weight' THEN CASE WHEN spike THEN 'wg' ELSE 'ann_we' END
              WHEN 'bn' THEN CASE WHEN spike THEN 'bp_bn' ELSE 'ann_bn_bp' END ELSE 'bp_grad' END AS core_type,
    CASE part WHEN 'bn' THEN 'with_bn' WHEN 'soma' THEN 'with_sg' ELSE 'with_nothing' END AS process_key,
    CASE WHEN part = 'soma' AND has_grad_in THEN i_B WHEN kind = 'linear' THEN {linear_rows} ELSE g_B END AS B,
    CASE WHEN part = 'soma' AND has_grad_in THEN i_T ELSE g_T END AS T,
    CASE WHEN part = 'soma' AND has_grad_in THEN i_C WHEN kind IN ('bn', 'soma') THEN g_C
         WHEN kind = 'linear' THEN (attributes->>'in_features')::BIGINT ELSE {conv['C']} END AS C,
    CASE WHEN part = 'soma' AND has_grad_in THEN i_C WHEN kind IN ('bn', 'soma') THEN g_C
         WHEN kind = 'linear' THEN (attributes->>'out_features')::BIGINT ELSE {conv['K']} END AS K,
    CASE WHEN part = 'soma' AND has_grad_in THEN prod(i_spatial) WHEN kind IN ('bn', 'soma') THEN prod(grad_out_spatial)
         WHEN kind = 'linear' THEN 1 ELSE {conv['OY']} END AS OY,
    CASE WHEN kind IN ('conv', 'conv3d') THEN {conv['OX']} ELSE 1 END AS OX,
    CASE WHEN kind IN ('conv', 'conv3d') THEN {conv['FY']} ELSE 1 END AS FY,
    CASE WHEN kind IN ('conv', 'conv3d') THEN {conv['FX']} ELSE 1 END AS FX,
    CASE WHEN kind IN ('conv', 'conv3d') THEN {conv['G']} ELSE 1 END AS G,
    CASE WHEN part = 'grad_weight' AND spike THEN 1 ELSE 16 END AS input_precision_bits,
    16 AS weight_precision_bits, 16 AS output_precision_bits,
    CASE WHEN part = 'grad_weight' THEN coalesce(x_numel, 0) ELSE coalesce(grad_out_numel, 0) END AS input_numel,
    CASE part WHEN 'grad_input' THEN weight_numel WHEN 'grad_weight' THEN coalesce(grad_out_numel, 0)
              WHEN 'bn' THEN 2 * g_C ELSE 0 END AS weight_numel,
    CASE part WHEN 'grad_weight' THEN weight_numel
              WHEN 'soma' THEN coalesce(grad_in_numel, grad_out_numel, 0) ELSE coalesce(grad_in_numel, 0) END AS output_numel,
    part IN ('grad_input', 'grad_weight') AS has_mac,
    CASE WHEN part = 'bn' AND NOT bn_backward THEN 'without_bp_bn' ELSE '--' END AS conv_type,
    0 AS b_type, 0 AS t_type
FROM parts
"""


def _register(con, ignore_names, compat: bool = False) -> None:
    ignored = ignored_module_condition("m.path", "m.rank", ignore_names)
    reference = "spikingjelly" if compat else None
    query = MODULES_SQL.format(ignored=ignored, neuron=neurons.is_neuron("mro", MODEL, reference),
                               multi_step_neuron=neurons.is_multi_step("mro", MODEL, reference))
    con.execute(f"CREATE OR REPLACE TEMP TABLE nmc_modules AS {query}")
    con.execute("CREATE OR REPLACE TEMP TABLE nmc_supported AS SELECT * FROM nmc_modules WHERE kind IS NOT NULL")
    con.execute(f"CREATE OR REPLACE TEMP TABLE nmc_forward_calls AS {FORWARD_CALLS}")
    con.execute(f"CREATE OR REPLACE TEMP TABLE nmc_backward_calls AS {BACKWARD_CALLS}")
    con.execute(f"CREATE OR REPLACE TEMP TABLE nmc_pairing AS {PAIRING}")
    con.execute(f"CREATE OR REPLACE TEMP TABLE nmc_regions AS {REGIONS}")


def module_fragments(trace, *, compat: bool, ignore_names=(),
                     recompute: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(fragments, balances): module fragments in FRAGMENT_COLUMNS order plus module_kind,
    bad_layout, unpaired and recompute (with `recompute`, recomputed forwards give fragments);
    balances the STACK_BALANCES rows (see leftover_classes)."""
    _register(trace.con, ignore_names, compat)
    forward = trace.sql(_forward_sql(compat, recompute)).assign(unpaired=False)
    backward = trace.sql(_backward_sql(compat))
    frame = pd.concat([f for f in (forward, backward) if len(f)] or [forward], ignore_index=True)
    return finish(frame, source="module"), trace.sql(STACK_BALANCES)


def finish(frame: pd.DataFrame, source: str) -> pd.DataFrame:
    """Clamp loop dims to >= 1 (SpikingJelly's _make_loop_dims), add the MAC count and flags."""
    frame = frame.copy()
    for dim in (*rules.LOOP_DIMS, "G"):
        frame[dim] = frame[dim].fillna(1).astype("int64").clip(lower=1)
    mac = frame["G"].copy()
    for dim in rules.LOOP_DIMS:
        mac = mac * frame[dim]
    frame["mac_count"] = mac.where(frame.pop("has_mac").astype(bool), 0).astype("int64")
    for column in ("input_numel", "weight_numel", "output_numel"):
        frame[column] = frame[column].fillna(0).astype("int64")
    frame["source"] = source
    for flag in ("optimizer_has_momentum", "optimizer_has_weight_decay", "optimizer_has_momentum_buffer"):
        frame[flag] = False
    return frame
