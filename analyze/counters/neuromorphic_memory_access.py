"""Neuromorphic memory access, as SpikingJelly 2.0.0's NeuromorphicMemoryAccessCounter counts it.

A module-level counter: one value set per forward call of a synaptic module (Linear,
Conv1d/2d/3d and subclasses) or a neuron (BaseNode subclass) of the model:
* synaptic: weight_read_bytes = weight uses * weight element size, where weight uses are
  nnz(x) * out_features (Linear) or the conv's spike taps * C_out/groups (Conv) for a binary
  input x, and numel(out) * in_features or numel(out) * prod(w.shape[1:]) otherwise;
  bias_read_bytes = numel(out) * bias element size;
* neuron: neuron_state_read_bytes = neuron_state_write_bytes = the bytes of its memories
  after the forward, times T in multi-step mode. An snnTorch or Norse neuron (analyze/neurons.py;
  default mode only, SpikingJelly knows BaseNode alone) keeps no `_memories`: its state is
  read and written once per step like a SpikingJelly neuron's, so its bytes are its state
  variables (Leaky 1, Synaptic 2, Alpha 3, RLeaky 2 with its last spikes, Norse LIFCell/LIF 2,
  LIFBoxCell 1) times the numel and element size of its output spikes (all T steps of them).
Scopes are the static ones of SpikingJelly's ModuleCounterMode: "Global", the root class
name and "Root.<every dotted prefix of the module's path>".

The conv spike taps come from the aten convolution the module dispatched (SpikingJelly
recomputes them on the padded, flattened module input; the two are equal, spec 5.2).

A TransformerEncoderLayer that ran torch's fused fast path (`_transformer_encoder_layer_fwd`,
analyze/counters/fused_attention.py) never calls its linear1 and linear2, which the same layer
with the fast path off does (as does SpikingJelly's own counting, whose module hooks turn the
fast path off): each such call counts their reads as those calls would, on inputs that are
not binary (intermediates), T = numel(src) / d_model rows each.
"""

from __future__ import annotations

import pandas as pd

from spiketrace.analyze import neurons
from spiketrace.analyze.counters.fused_attention import ENCODER_LAYER
from spiketrace.analyze.trace.views import record_key

METRICS = ("weight_read_bytes", "bias_read_bytes", "neuron_state_read_bytes", "neuron_state_write_bytes")
SYNAPTIC_CLASSES = (
    "torch.nn.modules.linear.Linear",
    "torch.nn.modules.conv.Conv1d",
    "torch.nn.modules.conv.Conv2d",
    "torch.nn.modules.conv.Conv3d",
)
MODEL = "neuromorphic_memory_access"
LINEAR_CLASS = SYNAPTIC_CLASSES[0]
ELEMENT_SIZE = (
    "CASE {dtype} WHEN 'float64' THEN 8 WHEN 'int64' THEN 8 WHEN 'complex64' THEN 8 WHEN 'float32' THEN 4"
    " WHEN 'int32' THEN 4 WHEN 'float16' THEN 2 WHEN 'bfloat16' THEN 2 WHEN 'int16' THEN 2 ELSE 1 END"
)


def _list(names) -> str:
    return "[" + ", ".join(f"'{n}'" for n in names) + "]"


CALLS_SQL = f"""
WITH model_modules AS (
    SELECT m.rank, m.module_id, m.path, m.mro, m.attributes, m.parameters,
           list_has_any(m.mro, {_list(SYNAPTIC_CLASSES)}) AS synaptic,
           list_contains(m.mro, '{LINEAR_CLASS}') AS linear,
           n.module_id IS NOT NULL AS neuron, n.framework <> 'spikingjelly' AS foreign_neuron, n.states
    FROM modules m LEFT JOIN ({{neurons}}) n ON n.rank = m.rank AND n.module_id = m.module_id
    WHERE m.in_model
),
weights AS (
    SELECT m.rank, m.module_id, p->>'name' AS name, (p->'shape')::BIGINT[] AS shape, p->>'dtype' AS dtype
    FROM model_modules m, UNNEST(CAST(m.parameters AS JSON[])) AS u(p)
),
calls AS (
    SELECT pre.rank, pre.module_id, pre.call_index, pre.seq AS pre_seq, post.seq AS post_seq,
           pre.inputs[1] AS x_id, post.outputs[1] AS out_id, pre.stage, pre.phase, pre.step
    FROM (SELECT * FROM module_events WHERE {{where}}) pre JOIN module_events post
      ON post.rank = pre.rank AND post.module_id = pre.module_id AND post.call_index = pre.call_index
     AND post.kind = 'forward_post' AND pre.kind = 'forward_pre'
    WHERE (pre.rank, pre.module_id) IN (SELECT rank, module_id FROM model_modules WHERE synaptic OR neuron)
),
snapshots AS (
    SELECT c.rank, c.module_id, c.call_index, nm.tensor_id
    FROM calls c JOIN neuron_memories nm ON nm.rank = c.rank AND nm.module_id = c.module_id AND nm.seq = c.post_seq
),
used AS (  -- just the tensor states these calls read (a semi join on them, not a hash table of every state)
    SELECT t.rank, t.tensor_id, t.is01, t.nnz, t.numel, t.shape, t.element_size
    FROM tensor_states t SEMI JOIN (SELECT rank, x_id AS tensor_id FROM calls UNION ALL SELECT rank, out_id FROM calls
                                    UNION ALL SELECT rank, tensor_id FROM snapshots) w
      ON w.rank = t.rank AND w.tensor_id = t.tensor_id
),
fused_layers AS (  -- TransformerEncoderLayer calls that ran the fused op: their src's elements
    SELECT e.rank, e.stage, e.phase, e.step, m.path, x.numel AS src_numel
    FROM (SELECT * FROM events WHERE op = '{ENCODER_LAYER}' AND {{where}}) e
    JOIN scopes s ON s.rank = e.rank AND s.scope_id = e.scope_id
    JOIN model_modules m ON m.rank = e.rank AND list_contains(s.active_modules, m.module_id)
     AND list_contains(m.mro, 'torch.nn.modules.transformer.TransformerEncoderLayer')
    JOIN event_tensors et ON et.rank = e.rank AND et.seq = e.seq AND et.role = 'arg' AND et.position = 0
    JOIN tensor_states x ON x.rank = e.rank AND x.tensor_id = et.tensor_id
),
states AS (
    SELECT s.rank, s.module_id, s.call_index, coalesce(sum(t.numel * t.element_size), 0) AS state_bytes
    FROM snapshots s LEFT JOIN used t ON t.rank = s.rank AND t.tensor_id = s.tensor_id
    GROUP BY ALL
)
SELECT c.rank, c.module_id, m.path, c.stage, c.phase, c.step,
    CASE WHEN m.synaptic THEN
        CASE WHEN x.is01 THEN
            CASE WHEN m.linear THEN x.nnz * (m.attributes->>'out_features')::BIGINT
                 ELSE CAST(ct.taps AS BIGINT) * (w.shape[1] // (m.attributes->>'groups')::BIGINT) END
        ELSE CASE WHEN m.linear THEN o.numel * (m.attributes->>'in_features')::BIGINT
                  ELSE o.numel * prod(w.shape[2:]) END
        END * ({ELEMENT_SIZE.format(dtype="w.dtype")})
    END AS weight_read_bytes,
    CASE WHEN m.synaptic THEN CASE WHEN bias.name IS NULL THEN 0
         ELSE o.numel * ({ELEMENT_SIZE.format(dtype="bias.dtype")}) END END AS bias_read_bytes,
    CASE WHEN m.neuron AND NOT m.synaptic AND m.foreign_neuron THEN coalesce(o.numel * o.element_size * m.states, 0)
         WHEN m.neuron AND NOT m.synaptic THEN
        coalesce(st.state_bytes, 0) * CASE WHEN m.attributes->>'step_mode' = 'm' THEN x.shape[1] ELSE 1 END
    END AS neuron_state_bytes
FROM calls c JOIN model_modules m ON m.rank = c.rank AND m.module_id = c.module_id AND (m.synaptic OR m.neuron)
LEFT JOIN used x ON x.rank = c.rank AND x.tensor_id = c.x_id
LEFT JOIN used o ON o.rank = c.rank AND o.tensor_id = c.out_id
LEFT JOIN weights w ON w.rank = c.rank AND w.module_id = c.module_id AND w.name = 'weight'
LEFT JOIN weights bias ON bias.rank = c.rank AND bias.module_id = c.module_id AND bias.name = 'bias'
LEFT JOIN nmac_conv_taps ct ON ct.rank = c.rank AND ct.module_id = c.module_id AND ct.call_index = c.call_index
LEFT JOIN states st ON st.rank = c.rank AND st.module_id = c.module_id AND st.call_index = c.call_index
UNION ALL
SELECT f.rank, m.module_id, m.path, f.stage, f.phase, f.step,
    f.src_numel // (m.attributes->>child.d_model)::BIGINT * (m.attributes->>'out_features')::BIGINT
        * (m.attributes->>'in_features')::BIGINT * ({ELEMENT_SIZE.format(dtype="w.dtype")}) AS weight_read_bytes,
    CASE WHEN bias.name IS NULL THEN 0 ELSE f.src_numel // (m.attributes->>child.d_model)::BIGINT
        * (m.attributes->>'out_features')::BIGINT * ({ELEMENT_SIZE.format(dtype="bias.dtype")}) END AS bias_read_bytes,
    NULL AS neuron_state_bytes
FROM fused_layers f CROSS JOIN (VALUES ('linear1', 'in_features'), ('linear2', 'out_features')) AS child(name, d_model)
JOIN model_modules m ON m.rank = f.rank AND m.path = f.path || '.' || child.name AND m.linear
LEFT JOIN weights w ON w.rank = m.rank AND w.module_id = m.module_id AND w.name = 'weight'
LEFT JOIN weights bias ON bias.rank = m.rank AND bias.module_id = m.module_id AND bias.name = 'bias'
"""

# The conv spike taps of each forward call: the convolutions run between its hooks. Its own
# statement: a range join on record keys runs as a sort-based IEJoin only in a statement
# without materialised CTEs (CALLS_SQL's are), and as a piecewise merge join, which compares
# each call with every conv before it, otherwise.
CONV_TAPS_SQL = f"""
CREATE OR REPLACE TEMP TABLE nmac_conv_taps AS
SELECT c.rank, c.module_id, c.call_index, any_value(t.value) AS taps
FROM (SELECT pre.rank, pre.module_id, pre.call_index, {record_key("pre.rank", "pre.seq")} AS start_key,
             {record_key("post.rank", "post.seq")} AS end_key
      FROM (SELECT * FROM module_events WHERE kind = 'forward_pre' AND {{where}}) pre JOIN module_events post
        ON post.rank = pre.rank AND post.module_id = pre.module_id AND post.call_index = pre.call_index
       AND post.kind = 'forward_post') c
JOIN (SELECT {record_key("e.rank", "e.seq")} AS key, s.value
      FROM events e JOIN op_stats s ON s.rank = e.rank AND s.seq = e.seq AND s.stat = 'conv_spike_taps'
      WHERE e.op = 'aten.convolution.default') t ON t.key > c.start_key AND t.key < c.end_key
GROUP BY ALL
"""

# Static scopes of SpikingJelly's ModuleCounterMode: Global plus every dotted prefix of the path.
SCOPES_SQL = """
SELECT v.*, UNNEST(['Global'] || list_transform(range(1, len(string_split(v.path, '.')) + 1),
                   lambda i: array_to_string(string_split(v.path, '.')[1:i], '.'))) AS scope
FROM ({calls}) v
"""


GROUPS = ("rank", "step", "stage", "phase")


SUMS = """coalesce(sum(weight_read_bytes), 0)::BIGINT AS weight_read_bytes,
           coalesce(sum(bias_read_bytes), 0)::BIGINT AS bias_read_bytes,
           coalesce(sum(neuron_state_bytes), 0)::BIGINT AS neuron_state_read_bytes,
           coalesce(sum(neuron_state_bytes), 0)::BIGINT AS neuron_state_write_bytes"""


def _columns(names, allowed=GROUPS) -> list[str]:
    if any(g not in allowed for g in names):
        raise ValueError(f"neuromorphic_memory_access groups by {allowed} only, not {list(names)}")
    return list(names)


def neuromorphic_memory_access(trace, ignore_modules=(), where: str = "true", group_by=(),
                               compat: str | None = None) -> pd.DataFrame:
    """Tidy frame: scope, [group_by columns,] metric, value (SpikingJelly's get_counts() of
    the counter, per group: the groups of a scope add up to its count).

    `where` selects forward calls by their module_events columns (stage, phase, step, rank);
    `group_by` splits the counts by those of GROUPS (a forward call's, from its pre hook);
    compat="spikingjelly" counts SpikingJelly's neurons only, as the reference does."""
    return with_totals(trace, ignore_modules, where, group_by, compat=compat)[0]


def with_totals(trace, ignore_modules=(), where: str = "true", group_by=(), totals_by=(), compat: str | None = None):
    """(neuromorphic_memory_access's frame, the Global counts per `totals_by` columns of
    GROUPS: <totals_by>, metric, value, or None). The per-call values are computed once, in a
    temporary table, for both."""
    groups, totals_groups = _columns(group_by), _columns(totals_by)
    trace.con.execute(CONV_TAPS_SQL.replace("{where}", where))
    calls = CALLS_SQL.replace("{where}", where).replace("{neurons}", neurons.table_sql(MODEL, compat))
    if ignore_modules:
        listed = _list(ignore_modules)
        # Skipped when the module or an ancestor (by path) is an instance of an ignored class.
        calls = f"""SELECT v.* FROM ({calls}) v WHERE NOT EXISTS (
            SELECT 1 FROM modules a WHERE a.rank = v.rank AND a.in_model
              AND (v.path = a.path OR starts_with(v.path, a.path || '.'))
              AND (list_has_any(a.mro, {listed}) OR list_contains({listed}, a.class_name)))"""
    totals = None
    if totals_groups:
        trace.con.execute(f"CREATE OR REPLACE TEMP TABLE nmac_calls AS {calls}")
        calls = "SELECT * FROM nmac_calls"
        totals = trace.sql(f"SELECT {', '.join(totals_groups)}, {SUMS} FROM nmac_calls GROUP BY ALL")
        totals = totals.melt(id_vars=totals_groups, value_vars=list(METRICS), var_name="metric", value_name="value")
    frame = trace.sql(f"""
        WITH scoped AS ({SCOPES_SQL.format(calls=calls)})
        SELECT {"".join(f"{g}, " for g in ["scope", *groups])} {SUMS}
        FROM scoped GROUP BY {", ".join(["scope", *groups])}
    """)
    return frame.melt(id_vars=["scope", *groups], value_vars=list(METRICS), var_name="metric", value_name="value"), totals


def as_spikingjelly(frame: pd.DataFrame) -> dict[str, dict[str, int]]:
    result: dict[str, dict[str, int]] = {}
    for scope, metric, value in zip(frame["scope"], frame["metric"], frame["value"]):
        result.setdefault(scope, {})[metric] = int(value)
    return result
