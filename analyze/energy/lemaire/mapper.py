"""Lemaire activity from a trace: what every forward call of a Linear/Conv or an IF/LIF neuron did.

One SQL pass pairs each forward_pre with its forward_post and reads, for the module's first
input x and first output o, the numel/nnz/0-1-ness and shapes the trace holds, plus the
module's attributes (features, channels, groups, kernel, stride, step mode) and direct
parameters. From those facts it derives, vectorised, the counts of both conventions:

* "spikingjelly" (SpikingJelly 2.0.0 _LemaireCounter, analytical_energy.py): per call, the
  op counts (synop, mac, ac, acc_addr, mac_addr) and the memory accesses (bytes, and the
  capacity of the buffer they hit, or "the FIFO" whose size the preset decides);
* "qualia" (Qualia 2.6.0 EnergyEstimationMetric): per synaptic layer, per inference, its
  spike rates (all calls pooled, as Qualia's hooks pool them) and the counts of each term,
  with the size in elements of the memory each access hits.

Nothing here depends on a preset, so any number of presets re-cost one activity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from analyze.counters import _ignore_names, _where
from analyze.counters.neuromorphic_memory_access import (
    LINEAR_CLASS,
    NEURON_CLASS,
    SYNAPTIC_CLASSES,
)
from analyze.counters.sql import MACROS

IF_CLASS = "spikingjelly.activation_based.neuron.integrate_and_fire.IFNode"
LIF_CLASS = "spikingjelly.activation_based.neuron.lif.LIFNode"
PLIF_CLASS = "spikingjelly.activation_based.neuron.lif.ParametricLIFNode"
STEP_MODULE_CLASS = "spikingjelly.activation_based.base.StepModule"
CONV_TRANSPOSE_CLASSES = tuple(f"torch.nn.modules.conv.ConvTranspose{d}d" for d in (1, 2, 3))
CONV3D_CLASS = SYNAPTIC_CLASSES[3]
WORD_BYTES = 4  # SpikingJelly's _LEMAIRE_ACCESS_WIDTH_BYTES: every access is one 32-bit word
ACCESSES = ("read_in_bytes", "write_out_bytes", "read_params_bytes", "read_potential_bytes", "write_potential_bytes")
CONVENTIONS = ("spikingjelly", "qualia")


def _list(names) -> str:
    return "[" + ", ".join("'" + n.replace("'", "''") + "'" for n in names) + "]"


# One row per forward call of a synaptic module or an IF/LIF neuron of the bound model.
CALL_FACTS_SQL = f"""
WITH model_modules AS (
    SELECT m.rank, m.module_id, m.path, m.class_name, m.mro, m.attributes, m.parameters,
           list_has_any(m.mro, {_list(SYNAPTIC_CLASSES)}) AS synaptic,
           list_contains(m.mro, '{LINEAR_CLASS}') AS linear,
           list_has_any(m.mro, {_list((IF_CLASS, LIF_CLASS))}) AS lemaire_neuron
    FROM modules m WHERE m.in_model
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
calls AS (
    SELECT pre.rank, pre.module_id, pre.call_index, pre.seq AS pre_seq, post.seq AS post_seq,
           pre.stage, pre.step,
           CASE WHEN len(pre.inputs) > 0 THEN pre.inputs[1] ELSE post.kwarg_inputs[1] END AS x_id,
           post.outputs[1] AS out_id
    FROM (SELECT * FROM module_events WHERE kind = 'forward_pre' AND {{where}}) pre
    JOIN module_events post ON post.rank = pre.rank AND post.module_id = pre.module_id
     AND post.call_index = pre.call_index AND post.kind = 'forward_post'
)
SELECT c.rank, c.module_id, m.path AS module, m.class_name, c.call_index, c.stage, c.step,
       c.pre_seq, c.post_seq, c.x_id, c.out_id,
       CASE WHEN m.synaptic THEN 'synaptic' ELSE 'neuron' END AS role,
       m.linear, list_contains(m.mro, '{LIF_CLASS}') AS lif,
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
LEFT JOIN tensor_states x ON x.rank = c.rank AND x.tensor_id = c.x_id
LEFT JOIN tensor_states o ON o.rank = c.rank AND o.tensor_id = c.out_id
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
    CASE WHEN role = 'neuron' THEN CASE WHEN lif THEN o_numel ELSE 0 END
         WHEN spike THEN 0 ELSE dense END AS mac,
    CASE WHEN role = 'neuron' THEN o_nnz
         ELSE CASE WHEN spike THEN ev_syn ELSE 0 END + CASE WHEN has_bias THEN o_numel ELSE 0 END END AS ac,
    CASE WHEN role = 'neuron' THEN 0
         WHEN spike THEN ev_fan
         WHEN linear THEN x_numel + o_numel
         ELSE x_numel + o_numel + out_channels * prod(kernel_size) END AS acc_addr,
    CASE WHEN role = 'synaptic' AND spike AND NOT linear THEN 2 * a ELSE 0 END AS mac_addr,
    -- (access, bytes, capacity bytes, or NULL for the SNN FIFO, whose size the preset sets)
    CASE WHEN role = 'neuron' THEN [
            lemaire_access('read_potential_bytes', o_numel // t * {WORD_BYTES} * t, o_numel // t * {WORD_BYTES}),
            lemaire_access('write_potential_bytes', o_numel // t * {WORD_BYTES} * t, o_numel // t * {WORD_BYTES}),
            lemaire_access('write_out_bytes', o_nnz * {WORD_BYTES}, NULL)]
         WHEN spike THEN [
            lemaire_access('read_in_bytes', a * {WORD_BYTES}, NULL),
            lemaire_access('read_params_bytes', ev_fan * {WORD_BYTES} + bias_bytes, params_numel * {WORD_BYTES}),
            lemaire_access('read_potential_bytes', ev_fan * {WORD_BYTES}, o_numel * {WORD_BYTES} // t),
            lemaire_access('write_potential_bytes', ev_fan * {WORD_BYTES}, o_numel * {WORD_BYTES} // t)]
         ELSE list_concat([
            lemaire_access('read_in_bytes', CASE WHEN linear THEN x_numel ELSE dense END * {WORD_BYTES}, x_numel * {WORD_BYTES}),
            lemaire_access('read_params_bytes', dense * {WORD_BYTES} + bias_bytes, params_numel * {WORD_BYTES})],
            CASE WHEN NOT $model_has_neurons THEN [lemaire_access('write_out_bytes', o_numel * {WORD_BYTES}, o_numel * {WORD_BYTES})]
                 ELSE [] END)
    END AS accesses
FROM g WHERE NOT (role = 'neuron' AND o_numel IS NULL)  -- a neuron whose output is no tensor: 0
"""

# The modules SpikingJelly's validate_model rejects (once per type, in module order), skipping
# everything strictly inside a neuron. `ignored` subtrees are skipped too.
UNSUPPORTED_SQL = f"""
SELECT m.class_name, min(m.module_id) AS first_id
FROM modules m
WHERE m.in_model AND NOT EXISTS (
        SELECT 1 FROM modules n WHERE n.rank = m.rank AND n.in_model AND list_contains(n.mro, '{NEURON_CLASS}')
          AND starts_with(m.path, n.path || '.'))
  AND (list_has_any(m.mro, {_list(CONV_TRANSPOSE_CLASSES)})
       OR (list_contains(m.mro, '{NEURON_CLASS}') AND NOT list_has_any(m.mro, {_list((IF_CLASS, LIF_CLASS))}))
       OR (NOT list_contains(m.mro, '{NEURON_CLASS}') AND m.is_leaf
           AND NOT list_has_any(m.mro, {_list(SYNAPTIC_CLASSES)})))
  AND {{not_ignored}}
GROUP BY m.class_name ORDER BY first_id
"""


# Qualia: every synaptic layer with its calls pooled (Qualia's hooks add up nnz and numel over
# the whole dataset), the first leaf module fed by its output (the next node of Qualia's graph)
# and, when that is an IF/LIF/PLIF neuron, the neuron's pooled output nnz and numel.
QUALIA_LAYERS_SQL = f"""
WITH syn AS (SELECT * FROM lemaire_facts WHERE role = 'synaptic'),
root AS (SELECT rank, attributes->>'step_mode' AS step_mode FROM modules WHERE in_model AND parent_id IS NULL),
consumer AS (
    SELECT s.module, s.rank, s.call_index, arg_min(cm.path, c.seq) AS consumer
    FROM syn s
    JOIN module_events c ON c.rank = s.rank AND c.kind = 'forward_pre' AND c.seq > s.post_seq AND c.inputs[1] = s.out_id
    JOIN modules cm ON cm.rank = c.rank AND cm.module_id = c.module_id AND cm.in_model
     AND (cm.is_leaf OR list_contains(cm.mro, '{NEURON_CLASS}'))
    GROUP BY ALL
),
layers AS (
    SELECT s.module, any_value(s.class_name) AS class_name, bool_or(s.linear) AS linear,
           bool_or(s.step_module) AS step_module, any_value(coalesce(s.step_mode, r.step_mode, 's')) AS step_mode,
           bool_or(list_contains(m.mro, '{CONV3D_CLASS}')) AS conv3d,
           sum(s.x_nnz)::DOUBLE AS in_nnz, sum(s.x_numel)::DOUBLE AS in_numel, bool_and(s.x_is01) AS in_binary,
           arg_min(s.x_shape, s.pre_seq) AS x_shape, arg_min(s.o_shape, s.pre_seq) AS o_shape,
           any_value(s.kernel_size) AS kernel_size, any_value(s.stride) AS stride, bool_or(s.has_bias) AS has_bias,
           any_value(s.bias_numel) AS bias_numel, any_value(s.weight_numel) AS weight_numel,
           arg_min(k.consumer, s.pre_seq) AS consumer, min(s.pre_seq) AS first_seq
    FROM syn s JOIN modules m ON m.rank = s.rank AND m.module_id = s.module_id
    LEFT JOIN root r ON r.rank = s.rank
    LEFT JOIN consumer k ON k.module = s.module AND k.rank = s.rank AND k.call_index = s.call_index
    GROUP BY s.module
),
neurons AS (
    SELECT m.path, any_value(list_has_any(m.mro, {_list((IF_CLASS, LIF_CLASS, PLIF_CLASS))})) AS neuron,
           any_value(list_has_any(m.mro, {_list((LIF_CLASS, PLIF_CLASS))})) AS leak,
           sum(o.nnz)::DOUBLE AS out_nnz, sum(o.numel)::DOUBLE AS out_numel
    FROM (SELECT * FROM module_events WHERE kind = 'forward_pre' AND {{where}}) pre
    JOIN module_events post ON post.rank = pre.rank AND post.module_id = pre.module_id
     AND post.call_index = pre.call_index AND post.kind = 'forward_post'
    JOIN modules m ON m.rank = pre.rank AND m.module_id = pre.module_id AND m.in_model
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
QUALIA_TIMESTEPS_SQL = """
WITH first AS (SELECT rank, module_id FROM lemaire_facts WHERE role = 'neuron' ORDER BY pre_seq LIMIT 1)
SELECT sum(CASE WHEN f.step_mode = 'm' THEN f.x_shape[1] ELSE 1 END)::DOUBLE AS steps,
       count(*) FILTER (WHERE EXISTS (SELECT 1 FROM neuron_memories nm WHERE nm.rank = f.rank
           AND nm.module_id = f.module_id AND nm.seq > f.pre_seq AND nm.seq < f.post_seq AND nm.kind <> 'tensor'))
           AS inferences
FROM lemaire_facts f JOIN first USING (rank, module_id)
"""


@dataclass
class LemaireActivity:
    """Preset-independent Lemaire activity of one selection of a trace.

    calls: one row per module call (spikingjelly convention): stage, step, rank, module,
      class_name, call_index, role, synop, mac, ac, acc_addr, mac_addr.
    accesses: one row per (stage, module, access, capacity): bytes summed; capacity_bytes is
      null where the access hits the SNN FIFO (its size is the preset's).
    qualia_layers: one row per Linear/Conv layer, its pooled spike statistics and shapes;
    qualia_terms: Qualia's per-inference terms of each layer (module, component, kind, count,
      memory elements, null for the FIFO); both None when the qualia convention was not mapped.
    """

    calls: pd.DataFrame
    accesses: pd.DataFrame
    warnings: list[str] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    model_has_neurons: bool = False
    qualia_layers: pd.DataFrame | None = None
    qualia_terms: pd.DataFrame | None = None
    qualia_warnings: list[str] = field(default_factory=list)
    timesteps: float | None = None
    conventions: tuple[str, ...] = CONVENTIONS


def _not_ignored(ignored: list[str], alias: str = "m", path: str = "path") -> str:
    """The row's module is neither of an ignored class nor inside one (by path), as NMAC skips them."""
    if not ignored:
        return "true"
    listed = _list(ignored)
    return f"""NOT EXISTS (SELECT 1 FROM modules a WHERE a.rank = {alias}.rank AND a.in_model
        AND ({alias}.{path} = a.path OR starts_with({alias}.{path}, a.path || '.'))
        AND (list_has_any(a.mro, {listed}) OR list_contains({listed}, a.class_name)))"""


def call_facts(trace, where: str, ignored: list[str]) -> None:
    """Materialise the per-call facts of the selection as the temporary table `lemaire_facts`."""
    for macro in (*MACROS, ACCESS_MACRO):
        trace.con.execute(macro)
    query = CALL_FACTS_SQL.replace("{where}", where)
    trace.con.execute(f"CREATE OR REPLACE TEMP TABLE lemaire_facts AS SELECT * FROM ({query}) v "
                      f"WHERE {_not_ignored(ignored, 'v', 'module')}")


def _check_facts(trace) -> None:
    """A call whose needed statistics the trace lacks gets a clear error, not a silent zero."""
    missing = trace.sql("""
        SELECT module, call_index, CASE WHEN x_numel IS NULL THEN 'input tensor'
                                        WHEN role = 'synaptic' AND x_is01 IS NULL THEN 'tensors.is01 of the input'
                                        WHEN role = 'synaptic' AND x_is01 AND x_nnz IS NULL THEN 'tensors.nnz of the input'
                                        WHEN role = 'neuron' AND o_numel IS NOT NULL AND o_nnz IS NULL
                                             THEN 'tensors.nnz of the output'
                                        WHEN role = 'synaptic' AND o_numel IS NULL THEN 'output tensor' END AS what
        FROM lemaire_facts WHERE what IS NOT NULL ORDER BY module, call_index LIMIT 1""")
    if len(missing):
        row = missing.iloc[0]
        raise ValueError(f"lemaire: module {row['module']} call {row['call_index']}: the trace has no {row['what']} "
                         "(was it captured with value statistics off?)")


def _unsupported(trace, ignored: list[str]) -> list[str]:
    frame = trace.sql(UNSUPPORTED_SQL.replace("{not_ignored}", _not_ignored(ignored)))
    return [name.rsplit(".", 1)[-1] for name in frame["class_name"]]


def spikingjelly_activity(trace, model_has_neurons: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    query = SPIKINGJELLY_SQL.replace("$model_has_neurons", "true" if model_has_neurons else "false")
    trace.con.execute(f"CREATE OR REPLACE TEMP TABLE lemaire_calls AS {query}")
    calls = trace.sql("""SELECT rank, stage, step, module, class_name, call_index, role,
                                synop, mac, ac, acc_addr, mac_addr
                         FROM lemaire_calls ORDER BY rank, module, call_index""")
    accesses = trace.sql("""
        SELECT stage, module, u.a.access AS access, u.a.capacity_bytes AS capacity_bytes,
               sum(u.a.bytes)::BIGINT AS bytes,
               count(*)::BIGINT AS calls
        FROM lemaire_calls, UNNEST(accesses) AS u(a)
        GROUP BY ALL ORDER BY stage, module, access""")
    for column in ("synop", "mac", "ac", "acc_addr", "mac_addr"):
        calls[column] = calls[column].astype("int64")
    return calls, accesses


def _timesteps(trace, option) -> tuple[float, list[str]]:
    """Qualia's T: the option, else the root module's `timesteps` attribute, else inferred."""
    if option is not None:
        return float(option), []
    root = trace.sql("SELECT attributes->>'timesteps' AS t FROM modules WHERE in_model AND parent_id IS NULL "
                     "AND attributes->>'timesteps' IS NOT NULL LIMIT 1")
    if len(root):
        return float(root["t"][0]), []
    row = trace.sql(QUALIA_TIMESTEPS_SQL).iloc[0]
    if pd.isna(row["steps"]):
        return 1.0, []
    if not row["inferences"]:
        return 1.0, ["qualia: no neuron reset found to infer the timesteps per inference; T = 1 (pass timesteps=...)"]
    steps = float(row["steps"]) / float(row["inferences"])
    notes = [] if steps == int(steps) else [f"qualia: inferred {steps} timesteps per inference (not an integer)"]
    return steps, notes


def _per_sample(shape, step_mode: str) -> list[int]:
    """A module tensor's shape without its batch (and, in multi-step mode, time) dimension."""
    return [int(d) for d in shape[(2 if step_mode == "m" else 1):]]


def qualia_layer_terms(layer, T: float) -> list[tuple[str, str, float, float | None]]:
    """Qualia 2.6.0's per-inference terms of one Linear/Conv layer, as (component, kind,
    count, memory elements or None for the FIFO). kind: add, mac (mul + add), mul, read, write.
    Shapes are Qualia's per-sample ones (its graph is channels last: C is our first dim)."""
    xs, os = _per_sample(layer.x_shape, layer.step_mode), _per_sample(layer.o_shape, layer.step_mode)
    n_in, p = math.prod(xs), math.prod(os)
    conv = not layer.linear
    c_in, c_out = (xs[0], os[0]) if conv else (xs[-1], os[-1])
    k = math.prod(layer.kernel_size) if conv else 1
    k_ceil = math.prod(-(-a // b) for a, b in zip(layer.kernel_size, layer.stride)) if conv else 1
    q = p if conv else c_out  # outputs per timestep as Qualia counts them (an FC reads only the last dim)
    dense = p * c_in * k if conv else c_in * c_out
    weights, bias = float(layer.weight_numel), (float(layer.bias_numel) if layer.has_bias else None)
    if not layer.step_module:  # a formal (ANN) layer: Qualia's _*_fnn formulas, once per inference
        terms = [("ops", "mac", dense, None), ("ops", "add", q, None),
                 ("addr", "add", (n_in + p + c_out * k) if conv else c_in * c_out, None),
                 ("mem_weights", "read", dense, weights),
                 ("mem_io", "read", dense if conv else c_in, n_in), ("mem_io", "write", q, p)]
        if bias is not None:
            terms.append(("mem_bias", "read", q, bias))
        return terms
    rate_in = layer.in_nnz / layer.in_numel if layer.in_numel else 0.0
    rate_out = layer.out_nnz / layer.out_numel if layer.neuron and layer.out_numel else 0.0
    theta = rate_in * T * n_in  # input spikes per inference
    theta_out = rate_out * T * p  # output spikes per inference (0 unless an IF/LIF follows)
    fan = c_out * k if conv else c_out  # weights (and potentials) one input spike touches
    potentials = theta * fan + q * T
    terms = [("mem_pot", "write", potentials, p), ("mem_pot", "read", potentials, p),
             ("mem_io", "write", theta_out, None)]
    if bias is not None:
        terms.append(("mem_bias", "read", q * T, bias))
    if layer.in_binary:
        terms += [("ops", "add", theta * (k_ceil * c_out if conv else c_out) + T * q + theta_out, None),
                  ("ops", "mac", T * q if layer.leak else 0.0, None),
                  ("addr", "mac", 2 * theta if conv else 0.0, None),
                  # Qualia's addressing: theta * k (conv, C_out missing) and rate * T * N_out (FC, N_in missing)
                  ("addr", "add", theta * k if conv else rate_in * T * c_out, None),
                  ("mem_weights", "read", theta * fan, weights), ("mem_io", "read", theta, None)]
    else:  # 'Hybrid': a non-binary input costed as one sparse timestep with dense MACs
        theta_1 = rate_in * n_in
        terms += [("ops", "mac", dense * rate_in, None), ("ops", "add", q + theta_out, None),
                  ("ops", "mul", p if layer.leak else 0.0, None),
                  ("addr", "mac", 2 * theta_1 if conv else 0.0, None),
                  ("addr", "add", theta_1 * k if conv else rate_in * c_out, None),
                  ("mem_weights", "read", theta_1 * fan, weights), ("mem_io", "read", theta_1, None)]
    return terms


def qualia_activity(trace, result: LemaireActivity, *, timesteps, where: str) -> None:
    T, notes = _timesteps(trace, timesteps)
    layers = trace.sql(QUALIA_LAYERS_SQL.replace("{where}", where))
    rows, warnings = [], list(notes)
    for layer in layers.itertuples(index=False):  # one row per model layer, not per event
        if layer.conv3d:
            warnings.append(f"qualia: {layer.module} is a Conv3d, which Qualia does not cost; its energy is omitted")
            continue
        rows += [(layer.module, *term) for term in qualia_layer_terms(layer, T)]
    result.qualia_layers = layers.assign(timesteps=T)
    result.qualia_terms = pd.DataFrame(rows, columns=["module", "component", "kind", "count", "memory"])
    result.qualia_warnings = warnings
    result.timesteps = T


def activity(trace, *, stage=None, ignore_modules=(), compat=None, strict=False, timesteps=None,
             conventions=CONVENTIONS, **options) -> LemaireActivity:
    """Map the trace's forward calls (all stages, or `stage`) to Lemaire activity.

    `conventions` limits what is mapped ("spikingjelly", "qualia"; both by default, so either
    preset costs the same activity). `timesteps` is Qualia's model.timesteps; by default the
    root module's `timesteps` attribute, else inferred from the neuron resets (_timesteps).
    strict: SpikingJelly's validate_model refusal (or a layer Qualia cannot cost) raises at
    costing, in the convention it concerns."""
    if options:
        raise TypeError(f"the lemaire model takes no options {sorted(options)} "
                        "(it takes stage, ignore_modules, compat, strict, timesteps, conventions)")
    if compat not in (None, "spikingjelly", "qualia"):
        raise ValueError(f"lemaire: unknown compat {compat!r}; choose None, 'spikingjelly' or 'qualia'")
    conventions = (conventions,) if isinstance(conventions, str) else tuple(conventions)
    bad = [c for c in conventions if c not in CONVENTIONS]
    if bad:
        raise ValueError(f"lemaire: unknown convention(s) {bad}; choose from {CONVENTIONS}")
    ignored = _ignore_names(ignore_modules)
    call_facts(trace, _where(stage=stage), ignored)
    _check_facts(trace)
    unsupported = _unsupported(trace, ignored)
    warnings = [f"Lemaire formulas do not support {name}; its energy is omitted." for name in unsupported]
    if strict and warnings and conventions == ("spikingjelly",):
        raise ValueError(warnings[0])  # else the costing raises it, for the spikingjelly convention only
    model_has_neurons = bool(trace.sql(
        f"SELECT count(*) AS n FROM modules WHERE in_model AND list_contains(mro, '{NEURON_CLASS}')")["n"][0])
    if "spikingjelly" in conventions:
        calls, accesses = spikingjelly_activity(trace, model_has_neurons)
    else:
        calls = pd.DataFrame(columns=["rank", "stage", "step", "module", "class_name", "call_index", "role",
                                      "synop", "mac", "ac", "acc_addr", "mac_addr"])
        accesses = pd.DataFrame(columns=["stage", "module", "access", "capacity_bytes", "bytes", "calls"])
    result = LemaireActivity(calls, accesses, warnings, unsupported, model_has_neurons, conventions=conventions)
    if not len(trace.sql("SELECT 1 FROM lemaire_facts LIMIT 1")):
        result.warnings.append("no Linear/Conv or IF/LIF forward call was selected: the Lemaire energy is 0")
    if "qualia" in conventions:
        qualia_activity(trace, result, timesteps=timesteps, where=_where(stage=stage))
    return result
