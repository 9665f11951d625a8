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

from spiketrace.analyze import neurons
from spiketrace.analyze.counters import _ignore_names, _where
from spiketrace.analyze.counters.fused_attention import ENCODER_LAYER
from spiketrace.analyze.counters.sql import MACROS
from spiketrace.analyze.energy import stateful
from spiketrace.analyze.energy.lemaire import residual
from spiketrace.analyze.energy.lemaire.sql import (
    ACCESS_MACRO,
    CONVENTIONS,
    MODEL,
    QUALIA_TIMESTEPS_SQL,
    SPIKINGJELLY_SQL,
    call_facts_sql,
    qualia_layers_sql,
    quoted_list,
    unsupported_sql,
)
from spiketrace.analyze.energy.synaptic_layers import uncosted_notes


@dataclass
class LemaireActivity:
    """Preset-independent Lemaire activity of one selection of a trace.

    calls: one row per module call (spikingjelly convention): stage, step, rank, module,
      class_name, call_index, role, synop, mac, ac, acc_addr, mac_addr.
    accesses: one row per (rank, step, stage, module, access, capacity): bytes summed;
      capacity_bytes is null where the access hits the SNN FIFO (its size is the preset's).
    qualia_layers: one row per Linear/Conv layer, its pooled spike statistics and shapes;
    qualia_terms: Qualia's per-inference terms of each layer (module, component, kind, count,
      memory elements, null for the FIFO); both None when the qualia convention was not mapped.
    """

    calls: pd.DataFrame
    accesses: pd.DataFrame
    warnings: list[str] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    model_has_neurons: bool = False
    state_warnings: list[str] = field(default_factory=list)  # energy/stateful.py's, in both conventions' reports
    qualia_layers: pd.DataFrame | None = None
    qualia_terms: pd.DataFrame | None = None
    qualia_warnings: list[str] = field(default_factory=list)
    timesteps: float | None = None
    conventions: tuple[str, ...] = CONVENTIONS


def _not_ignored(ignored: list[str], alias: str = "m", path: str = "path") -> str:
    """The row's module is neither of an ignored class nor inside one (by path), as NMAC skips them."""
    if not ignored:
        return "true"
    listed = quoted_list(ignored)
    return f"""NOT EXISTS (SELECT 1 FROM modules a WHERE a.rank = {alias}.rank AND a.in_model
        AND ({alias}.{path} = a.path OR starts_with({alias}.{path}, a.path || '.'))
        AND (list_has_any(a.mro, {listed}) OR list_contains({listed}, a.class_name)))"""


def call_facts(trace, where: str, ignored: list[str], compat: str | None = None) -> None:
    """Materialise the per-call facts of the selection as the temporary table `lemaire_facts`."""
    for macro in (*MACROS, ACCESS_MACRO):
        trace.con.execute(macro)
    query = call_facts_sql(where, compat)
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


def _unsupported(trace, ignored: list[str], compat: str | None = None) -> list[str]:
    frame = trace.sql(unsupported_sql(_not_ignored(ignored), compat))
    return [name.rsplit(".", 1)[-1] for name in frame["class_name"]]


def spikingjelly_activity(trace, model_has_neurons: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    query = SPIKINGJELLY_SQL.replace("$model_has_neurons", "true" if model_has_neurons else "false")
    trace.con.execute(f"CREATE OR REPLACE TEMP TABLE lemaire_calls AS {query}")
    calls = trace.sql("""SELECT rank, stage, step, module, class_name, call_index, role,
                                synop, mac, ac, acc_addr, mac_addr
                         FROM lemaire_calls ORDER BY rank, module, call_index""")
    accesses = trace.sql("""
        SELECT rank, step, stage, module, u.a.access AS access, u.a.capacity_bytes AS capacity_bytes,
               sum(u.a.bytes)::BIGINT AS bytes,
               count(*)::BIGINT AS calls
        FROM lemaire_calls, UNNEST(accesses) AS u(a)
        GROUP BY ALL ORDER BY rank, step, stage, module, access""")
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
        terms: list[tuple[str, str, float, float | None]]
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


def qualia_activity(trace, result: LemaireActivity, *, timesteps, where: str, compat: str | None = None) -> None:
    T, notes = _timesteps(trace, timesteps)
    adds = residual.add_inputs(trace, where)
    trace.con.register("lemaire_binary_add_frame", residual.binary_add_outputs(adds))
    trace.con.execute("CREATE OR REPLACE TEMP TABLE lemaire_binary_adds AS "
                      "SELECT rank::INTEGER AS rank, out_id::BIGINT AS out_id, out_sum::DOUBLE AS out_sum "
                      "FROM lemaire_binary_add_frame")
    trace.con.unregister("lemaire_binary_add_frame")
    layers = trace.sql(qualia_layers_sql(where, compat))
    parts, warnings = [], list(notes)
    for path, name, potentials in neurons.several_potentials(trace, MODEL, compat):
        if path in set(layers["consumer"].dropna()):
            warnings.append(f"qualia: {path} ({name}) integrates {len(potentials)} state variables per step "
                            f"({', '.join(potentials)}); Qualia's LIF layer holds one potential: "
                            f"{', '.join(potentials[:-1])} is not costed")
    for layer in layers.itertuples(index=False):  # one row per model layer, not per event
        if layer.conv3d:
            warnings.append(f"qualia: {layer.module} is a Conv3d, which Qualia does not cost; its energy is omitted")
            continue
        parts.append((layer.first_seq, layer.module, qualia_layer_terms(layer, T)))
    parts += residual.formal_add_terms(adds)  # in graph order, among the layers
    rows = [(module, *term) for _, module, terms in sorted(parts, key=lambda part: part[0]) for term in terms]
    result.qualia_layers = layers.assign(timesteps=T)
    result.qualia_terms = pd.DataFrame(rows, columns=["module", "component", "kind", "count", "memory"])
    result.qualia_warnings = warnings
    result.timesteps = T


def activity(trace, *, stage=None, step=None, rank=None, ignore_modules=(), compat=None, strict=False,
             timesteps=None, conventions=CONVENTIONS, recompute=None, **options) -> LemaireActivity:
    """Map the trace's forward calls (all, or those of `stage`, `step`, `rank`: a value or a
    list each) to Lemaire activity. `recompute="exclude"` leaves out the forward calls activation
    checkpointing recomputed during backward (included by default: they ran); "only" keeps just them.

    `conventions` limits what is mapped ("spikingjelly", "qualia"; both by default, so either
    preset costs the same activity). `timesteps` is Qualia's model.timesteps; by default the
    root module's `timesteps` attribute, else inferred from the neuron resets (_timesteps).
    strict: SpikingJelly's validate_model refusal (or a layer Qualia cannot cost) raises at
    costing, in the convention it concerns."""
    if options:
        raise TypeError(f"the lemaire model takes no options {sorted(options)} "
                        "(it takes stage, step, rank, ignore_modules, compat, strict, timesteps, conventions, recompute)")
    if compat not in (None, "spikingjelly", "qualia"):
        raise ValueError(f"lemaire: unknown compat {compat!r}; choose None, 'spikingjelly' or 'qualia'")
    conventions = (conventions,) if isinstance(conventions, str) else tuple(conventions)
    bad = [c for c in conventions if c not in CONVENTIONS]
    if bad:
        raise ValueError(f"lemaire: unknown convention(s) {bad}; choose from {CONVENTIONS}")
    ignored = _ignore_names(ignore_modules)
    where = _where(stage=stage, step=step, rank=rank, recompute=recompute)
    call_facts(trace, where, ignored, compat)
    _check_facts(trace)
    unsupported = _unsupported(trace, ignored, compat)
    warnings = [f"Lemaire formulas do not support {name}; its energy is omitted." for name in unsupported]
    if strict and warnings and conventions == ("spikingjelly",):
        raise ValueError(warnings[0])  # else the costing raises it, for the spikingjelly convention only
    model_has_neurons = bool(trace.sql(
        f"SELECT count(*) AS n FROM modules WHERE in_model AND {neurons.is_neuron('mro', MODEL, compat)}")["n"][0])
    if "spikingjelly" in conventions:
        calls, accesses = spikingjelly_activity(trace, model_has_neurons)
    else:
        calls = pd.DataFrame(columns=["rank", "stage", "step", "module", "class_name", "call_index", "role",
                                      "synop", "mac", "ac", "acc_addr", "mac_addr"])
        accesses = pd.DataFrame(columns=["rank", "step", "stage", "module", "access", "capacity_bytes", "bytes",
                                         "calls"])
    result = LemaireActivity(calls, accesses, warnings, unsupported, model_has_neurons, conventions=conventions)
    if not len(trace.sql("SELECT 1 FROM lemaire_facts LIMIT 1")):
        result.warnings.append("no Linear/Conv or IF/LIF forward call was selected: the Lemaire energy is 0")
    for path, name, potentials in neurons.several_potentials(trace, MODEL, compat):
        result.warnings.append(f"{path} ({name}) integrates {len(potentials)} state variables per step "
                               f"({', '.join(potentials)}): costed as {len(potentials)} potentials, each read, "
                               "written and, if it decays, leaked (one MAC) per output and step; Lemaire's neuron has one")
    result.state_warnings = stateful.warnings(trace, MODEL, compat, ignored, named=unsupported, where=where)
    result.warnings += result.state_warnings
    # torch's fused TransformerEncoderLayer runs its linear1 and linear2 without calling them
    result.warnings += uncosted_notes(trace, where, (ENCODER_LAYER.removesuffix(".default") + "%",))
    if "qualia" in conventions:
        qualia_activity(trace, result, timesteps=timesteps, where=where, compat=compat)
    return result
