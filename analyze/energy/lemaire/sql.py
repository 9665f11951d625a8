"""The Lemaire mapper's SQL and the module classes it recognises: the per-call facts query,
SpikingJelly's per-call counts and memory accesses, the unsupported modules, and Qualia's
per-layer terms (mapper.py runs them and documents both conventions)."""

from __future__ import annotations

from spiketrace.analyze import neurons
from spiketrace.analyze.counters.neuromorphic_memory_access import LINEAR_CLASS, SYNAPTIC_CLASSES

MODEL = "lemaire"  # its name for analyze/neurons.py

IF_CLASS = "spikingjelly.activation_based.neuron.integrate_and_fire.IFNode"
LIF_CLASS = "spikingjelly.activation_based.neuron.lif.LIFNode"
STEP_MODULE_CLASS = "spikingjelly.activation_based.base.StepModule"
CONV_TRANSPOSE_CLASSES = tuple(f"torch.nn.modules.conv.ConvTranspose{d}d" for d in (1, 2, 3))
CONV3D_CLASS = SYNAPTIC_CLASSES[3]
WORD_BYTES = 4  # SpikingJelly's _LEMAIRE_ACCESS_WIDTH_BYTES: every access is one 32-bit word
ACCESSES = ("read_in_bytes", "write_out_bytes", "read_params_bytes", "read_potential_bytes", "write_potential_bytes")
CONVENTIONS = ("spikingjelly", "qualia")


def quoted_list(names) -> str:
    return "[" + ", ".join("'" + n.replace("'", "''") + "'" for n in names) + "]"


# One row per forward call of a synaptic module or an IF/LIF neuron of the bound model: a
# SpikingJelly IFNode/LIFNode or (default mode) an snnTorch/Norse neuron ({neurons} is
# analyze/neurons.py's table), with its potentials, leak multiplies and reset.
CALL_FACTS_SQL = f"""
WITH model_modules AS (
    SELECT m.rank, m.module_id, m.path, m.class_name, m.mro, m.parameters,
           list_has_any(m.mro, {quoted_list(SYNAPTIC_CLASSES)}) AS synaptic,
           list_contains(m.mro, '{LINEAR_CLASS}') AS linear,
           coalesce(n.framework <> 'spikingjelly', false) AS foreign_neuron,
           list_has_any(m.mro, {quoted_list((IF_CLASS, LIF_CLASS))}) OR coalesce(n.framework <> 'spikingjelly', false)
             AS lemaire_neuron,
           coalesce(n.potentials, 1) AS potentials, coalesce(n.leak_multiplies, 0) AS leak_multiplies, n.reset,
           CASE WHEN n.framework <> 'spikingjelly' AND n.multi_step  -- Norse's LIF: T steps a call
                THEN json_merge_patch(m.attributes, '{{"step_mode": "m"}}')
                ELSE m.attributes END AS attributes
    FROM modules m LEFT JOIN ({{neurons}}) n ON n.rank = m.rank AND n.module_id = m.module_id
    WHERE m.in_model
),
weights AS (
    SELECT m.rank, m.module_id,
           max(CASE WHEN p->>'name' = 'weight' THEN (p->'shape')::BIGINT[] END) AS w_shape,
           bool_or(p->>'name' = 'bias') AS has_bias,
           coalesce(max(CASE WHEN p->>'name' = 'bias' THEN (p->>'numel')::BIGINT END), 0) AS bias_numel,
           coalesce(max(CASE WHEN p->>'name' = 'weight' THEN (p->>'numel')::BIGINT END), 0) AS weight_numel,
           sum((p->>'numel')::BIGINT) AS params_numel
    FROM model_modules m, UNNEST(CAST(m.parameters AS JSON[])) AS u(p)
    GROUP BY ALL
),
calls AS MATERIALIZED (
    SELECT pre.rank, pre.module_id, pre.call_index, pre.seq AS pre_seq, post.seq AS post_seq,
           pre.stage, pre.step,
           CASE WHEN len(pre.inputs) > 0 THEN pre.inputs[1] ELSE post.kwarg_inputs[1] END AS x_id,
           post.outputs[1] AS out_id
    FROM (SELECT * FROM module_events WHERE kind = 'forward_pre' AND {{where}}) pre
    JOIN module_events post ON post.rank = pre.rank AND post.module_id = pre.module_id
     AND post.call_index = pre.call_index AND post.kind = 'forward_post'
),
-- the states the calls name, found by a semi join: one pass over tensor_states, not one per join
used AS (SELECT t.rank, t.tensor_id, t.numel, t.nnz, t.is01, t.shape FROM tensor_states t
         SEMI JOIN (SELECT rank, x_id AS tensor_id FROM calls UNION ALL SELECT rank, out_id FROM calls) w
           ON w.rank = t.rank AND w.tensor_id = t.tensor_id)
SELECT c.rank, c.module_id, m.path AS module, m.class_name, c.call_index, c.stage, c.step,
       c.pre_seq, c.post_seq, c.x_id, c.out_id,
       CASE WHEN m.synaptic THEN 'synaptic' ELSE 'neuron' END AS role,
       m.linear, list_contains(m.mro, '{LIF_CLASS}') AS lif,
       m.foreign_neuron, m.potentials, m.leak_multiplies, m.reset,
       list_contains(m.mro, '{STEP_MODULE_CLASS}') AS step_module,
       m.attributes->>'step_mode' AS step_mode,
       x.numel AS x_numel, x.nnz AS x_nnz, x.is01 AS x_is01, x.shape AS x_shape,
       o.numel AS o_numel, o.nnz AS o_nnz, o.shape AS o_shape,
       (m.attributes->>'in_features')::BIGINT AS in_features,
       (m.attributes->>'out_features')::BIGINT AS out_features,
       (m.attributes->>'out_channels')::BIGINT AS out_channels,
       (m.attributes->>'groups')::BIGINT AS groups,
       (m.attributes->'kernel_size')::BIGINT[] AS kernel_size,
       (m.attributes->'stride')::BIGINT[] AS stride,
       w.w_shape, coalesce(w.has_bias, false) AS has_bias, coalesce(w.params_numel, 0) AS params_numel,
       coalesce(w.bias_numel, 0) AS bias_numel, coalesce(w.weight_numel, 0) AS weight_numel
FROM calls c
JOIN model_modules m ON m.rank = c.rank AND m.module_id = c.module_id AND (m.synaptic OR m.lemaire_neuron)
LEFT JOIN weights w ON w.rank = c.rank AND w.module_id = c.module_id
LEFT JOIN used x ON x.rank = c.rank AND x.tensor_id = c.x_id
LEFT JOIN used o ON o.rank = c.rank AND o.tensor_id = c.out_id
"""

# An access: its name, the bytes moved, the capacity in bytes of the buffer hit (NULL: the FIFO).
ACCESS_MACRO = ("CREATE OR REPLACE MACRO lemaire_access(n, b, c) AS "
                "struct_pack(access := n, bytes := b::BIGINT, capacity_bytes := c::BIGINT)")

# SpikingJelly's synaptic_rule and neuron_rule, one row per call (analytical_energy.py, 2.0.0).
# T is x.shape[0] for a module whose step_mode is 'm', else 1; every access is 4-byte words.
SPIKINGJELLY_SQL = f"""
WITH f AS (
    SELECT *, CASE WHEN step_mode = 'm' THEN greatest(x_shape[1], 1) ELSE 1 END AS t,
           role = 'synaptic' AND x_is01 AS spike,
           CASE WHEN role = 'synaptic' AND x_is01 THEN x_nnz ELSE 0 END AS a,
           out_channels // groups AS cpg
    FROM lemaire_facts
),
g AS (
    SELECT *,
        CASE WHEN linear THEN o_numel * in_features ELSE o_numel * prod(w_shape[2:]) END AS dense,
        CASE WHEN linear THEN a * out_features
             ELSE a * cpg * prod(list_transform(list_zip(kernel_size, stride),
                                                lambda p: (p[1] + p[2] - 1) // p[2])) END AS ev_syn,
        CASE WHEN linear THEN a * out_features ELSE a * cpg * prod(kernel_size) END AS ev_fan,
        CASE WHEN has_bias THEN o_numel * {WORD_BYTES} ELSE 0 END AS bias_bytes
    FROM f
)
SELECT rank, module_id, module, class_name, call_index, stage, step, role,
    CASE WHEN role = 'neuron' THEN 0 WHEN spike THEN ev_syn ELSE 0 END AS synop,
    -- a foreign neuron: one leak MAC per potential that decays (analyze/neurons.py), per output and step
    CASE WHEN role = 'neuron' THEN CASE WHEN foreign_neuron THEN o_numel * leak_multiplies WHEN lif THEN o_numel ELSE 0 END
         WHEN spike THEN 0 ELSE dense END AS mac,
    CASE WHEN role = 'neuron' THEN CASE WHEN foreign_neuron AND reset = 'none' THEN 0 ELSE o_nnz END
         ELSE CASE WHEN spike THEN ev_syn ELSE 0 END + CASE WHEN has_bias THEN o_numel ELSE 0 END END AS ac,
    CASE WHEN role = 'neuron' THEN 0
         WHEN spike THEN ev_fan
         WHEN linear THEN x_numel + o_numel
         ELSE x_numel + o_numel + out_channels * prod(kernel_size) END AS acc_addr,
    CASE WHEN role = 'synaptic' AND spike AND NOT linear THEN 2 * a ELSE 0 END AS mac_addr,
    -- (access, bytes, capacity bytes, or NULL for the SNN FIFO, whose size the preset sets)
    CASE WHEN role = 'neuron' THEN [  -- each of its potentials (1 for SpikingJelly's IF/LIF)
            lemaire_access('read_potential_bytes', o_numel // t * {WORD_BYTES} * t * potentials,
                           o_numel // t * {WORD_BYTES} * potentials),
            lemaire_access('write_potential_bytes', o_numel // t * {WORD_BYTES} * t * potentials,
                           o_numel // t * {WORD_BYTES} * potentials),
            lemaire_access('write_out_bytes', o_nnz * {WORD_BYTES}, NULL)]
         WHEN spike THEN [
            lemaire_access('read_in_bytes', a * {WORD_BYTES}, NULL),
            lemaire_access('read_params_bytes', ev_fan * {WORD_BYTES} + bias_bytes, params_numel * {WORD_BYTES}),
            lemaire_access('read_potential_bytes', ev_fan * {WORD_BYTES}, o_numel * {WORD_BYTES} // t),
            lemaire_access('write_potential_bytes', ev_fan * {WORD_BYTES}, o_numel * {WORD_BYTES} // t)]
         ELSE list_concat([
            lemaire_access('read_in_bytes', CASE WHEN linear THEN x_numel ELSE dense END * {WORD_BYTES}, x_numel * {WORD_BYTES}),
            lemaire_access('read_params_bytes', dense * {WORD_BYTES} + bias_bytes, params_numel * {WORD_BYTES})],
            CASE WHEN NOT $model_has_neurons
                 THEN [lemaire_access('write_out_bytes', o_numel * {WORD_BYTES}, o_numel * {WORD_BYTES})]
                 ELSE [] END)
    END AS accesses
FROM g WHERE NOT (role = 'neuron' AND o_numel IS NULL)  -- a neuron whose output is no tensor: 0
"""

# The modules SpikingJelly's validate_model rejects (once per type, in module order), skipping
# everything strictly inside a neuron. `ignored` subtrees are skipped too. A neuron is one of
# analyze/neurons.py (`{neuron}` over an MRO, `{lemaire_neuron}` those costed): a SpikingJelly
# neuron other than IF/LIF is rejected; an snnTorch/Norse one is costed (default mode) or,
# under compat, a leaf SpikingJelly does not know.
UNSUPPORTED_SQL = f"""
SELECT m.class_name, min(m.module_id) AS first_id
FROM modules m
WHERE m.in_model AND NOT EXISTS (
        SELECT 1 FROM modules n WHERE n.rank = m.rank AND n.in_model AND {{neuron_n}}
          AND starts_with(m.path, n.path || '.'))
  AND (list_has_any(m.mro, {quoted_list(CONV_TRANSPOSE_CLASSES)})
       OR ({{neuron_m}} AND NOT list_has_any(m.mro, {quoted_list((IF_CLASS, LIF_CLASS))}) AND NOT {{foreign_m}})
       OR (NOT {{neuron_m}} AND m.is_leaf
           AND NOT list_has_any(m.mro, {quoted_list(SYNAPTIC_CLASSES)})))
  AND {{not_ignored}}
GROUP BY m.class_name ORDER BY first_id
"""


def unsupported_sql(not_ignored: str, compat: str | None) -> str:
    return (UNSUPPORTED_SQL.replace("{not_ignored}", not_ignored)
            .replace("{neuron_n}", neurons.is_neuron("n.mro", MODEL, compat))
            .replace("{neuron_m}", neurons.is_neuron("m.mro", MODEL, compat))
            .replace("{foreign_m}", neurons.is_foreign("m.mro", MODEL, compat)))


def call_facts_sql(where: str, compat: str | None) -> str:
    return CALL_FACTS_SQL.replace("{where}", where).replace("{neurons}", neurons.table_sql(MODEL, compat))


def qualia_layers_sql(where: str, compat: str | None) -> str:
    return (QUALIA_LAYERS_SQL.replace("{where}", where).replace("{neurons}", neurons.table_sql(MODEL, compat))
            .replace("{foreign_cm}", neurons.is_foreign("cm.mro", MODEL, compat)))


def qualia_neuron(mro: str, attributes: str) -> str:
    """SQL: the module is a neuron Qualia costs (its IF, LIF and ParametricLIF layers), told by
    what the trace says of it, not by one class path (ParametricLIFNode moved from neuron.lif
    to neuron.plif in SpikingJelly 2.0.0): a SpikingJelly BaseNode subclass, wherever the
    class lives, with a firing threshold."""
    return (f"(list_bool_or(list_transform({mro}, lambda c: ends_with(c, '.BaseNode'))) "
            f"AND ({attributes}->'v_threshold') IS NOT NULL)")


def qualia_leaky(attributes: str) -> str:
    """SQL: the neuron decays (Qualia's LIF layer: LIFNode's `tau`, ParametricLIFNode's learnt
    decay, both flagged by `decay_input`), else it integrates and fires."""
    return f"(({attributes}->'tau') IS NOT NULL OR ({attributes}->'decay_input') IS NOT NULL)"


# Qualia: every synaptic layer with its calls pooled (Qualia's hooks add up nnz and numel over
# the whole dataset), the first leaf module fed by its output (the next node of Qualia's graph)
# and, when that is an IF/LIF/PLIF neuron, the neuron's pooled output nnz and numel. An input
# that is the output of an Add Qualia treats as binary (lemaire_binary_adds, residual.py) is
# binary, its spikes counted by the Add's output sum.
QUALIA_LAYERS_SQL = f"""
WITH syn AS (SELECT * FROM lemaire_facts WHERE role = 'synaptic'),
root AS (SELECT rank, attributes->>'step_mode' AS step_mode FROM modules WHERE in_model AND parent_id IS NULL),
consumer AS (
    SELECT s.module, s.rank, s.call_index, arg_min(cm.path, c.seq) AS consumer
    FROM syn s
    JOIN module_events c ON c.rank = s.rank AND c.kind = 'forward_pre' AND c.seq > s.post_seq AND c.inputs[1] = s.out_id
    JOIN modules cm ON cm.rank = c.rank AND cm.module_id = c.module_id AND cm.in_model
     AND (cm.is_leaf OR {qualia_neuron('cm.mro', 'cm.attributes')} OR {{foreign_cm}})
    GROUP BY ALL
),
layers AS (
    SELECT s.module, any_value(s.class_name) AS class_name, bool_or(s.linear) AS linear,
           bool_or(s.step_module) AS step_module, any_value(coalesce(s.step_mode, r.step_mode, 's')) AS step_mode,
           bool_or(list_contains(m.mro, '{CONV3D_CLASS}')) AS conv3d,
           sum(coalesce(a.out_sum, s.x_nnz))::DOUBLE AS in_nnz, sum(s.x_numel)::DOUBLE AS in_numel,
           bool_and(s.x_is01 OR a.out_id IS NOT NULL) AS in_binary,
           arg_min(s.x_shape, s.pre_seq) AS x_shape, arg_min(s.o_shape, s.pre_seq) AS o_shape,
           any_value(s.kernel_size) AS kernel_size, any_value(s.stride) AS stride, bool_or(s.has_bias) AS has_bias,
           any_value(s.bias_numel) AS bias_numel, any_value(s.weight_numel) AS weight_numel,
           arg_min(k.consumer, s.pre_seq) AS consumer, min(s.pre_seq) AS first_seq
    FROM syn s JOIN modules m ON m.rank = s.rank AND m.module_id = s.module_id
    LEFT JOIN root r ON r.rank = s.rank
    LEFT JOIN consumer k ON k.module = s.module AND k.rank = s.rank AND k.call_index = s.call_index
    LEFT JOIN lemaire_binary_adds a ON a.rank = s.rank AND a.out_id = s.x_id
    GROUP BY s.module
),
neurons AS (  -- an snnTorch/Norse neuron (default mode) is Qualia's LIF layer when it leaks, else its IF
    SELECT m.path, any_value({qualia_neuron('m.mro', 'm.attributes')} OR nt.module_id IS NOT NULL) AS neuron,
           any_value(CASE WHEN nt.module_id IS NOT NULL THEN nt.leak_multiplies > 0
                          ELSE {qualia_neuron('m.mro', 'm.attributes')} AND {qualia_leaky('m.attributes')} END) AS leak,
           sum(o.nnz)::DOUBLE AS out_nnz, sum(o.numel)::DOUBLE AS out_numel
    FROM (SELECT * FROM module_events WHERE kind = 'forward_pre' AND {{where}}) pre
    JOIN module_events post ON post.rank = pre.rank AND post.module_id = pre.module_id
     AND post.call_index = pre.call_index AND post.kind = 'forward_post'
    JOIN modules m ON m.rank = pre.rank AND m.module_id = pre.module_id AND m.in_model
    LEFT JOIN (SELECT * FROM ({{neurons}}) WHERE framework <> 'spikingjelly') nt
      ON nt.rank = m.rank AND nt.module_id = m.module_id
    JOIN tensor_states o ON o.rank = post.rank AND o.tensor_id = post.outputs[1]
    WHERE m.path IN (SELECT consumer FROM layers)
    GROUP BY m.path
)
SELECT l.*, coalesce(n.neuron, false) AS neuron, coalesce(n.leak, false) AS leak, n.out_nnz, n.out_numel
FROM layers l LEFT JOIN neurons n ON n.path = l.consumer
ORDER BY l.first_seq
"""

# Qualia's model.timesteps when the root module carries none: calls per inference of the first
# neuron, an inference starting where the neuron's memory is still a number (just reset).
# A call holds such a snapshot when the module's first one after the call's start (an ASOF
# join, sort-based) comes before its end.
QUALIA_TIMESTEPS_SQL = """
WITH first AS (SELECT rank, module_id FROM lemaire_facts WHERE role = 'neuron' ORDER BY pre_seq LIMIT 1)
SELECT sum(CASE WHEN f.step_mode = 'm' THEN f.x_shape[1] ELSE 1 END)::DOUBLE AS steps,
       count(*) FILTER (WHERE nm.seq < f.post_seq) AS inferences
FROM (SELECT f.* FROM lemaire_facts f JOIN first USING (rank, module_id)) f
ASOF LEFT JOIN (SELECT rank, module_id, seq FROM neuron_memories WHERE kind <> 'tensor') nm
  ON nm.rank = f.rank AND nm.module_id = f.module_id AND nm.seq > f.pre_seq
"""
