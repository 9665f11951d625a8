"""Compute-only energy, SpikingJelly 2.0.0's estimate_simple_energy (SimpleEnergyProfiler).

energy = MAC * e_mac + AC * e_ac + (weight + bias reads + neuron state reads + writes) bytes
* e_memory_per_byte, from the mac / ac / synop counters and the module-level
neuromorphic_memory_access counter. Activity is those counts per stage and scope; costing
is three multiplications, so any number of presets re-cost one activity.

compat="spikingjelly" adds what SimpleEnergyProfiler's own machinery leaks into its AC
count (docs/deviations.md 6): its memory counter's conv fan-out probe, run in a module hook,
ends in an `aten.sum` that its ACCounter counts as numel - 1 additions, once per
binary-input conv call.

strict is SimpleEnergyConfig.strict: SpikingJelly's profiler counts with a non-strict
dispatch mode (an op without a rule, such as `aten.t`, is simply not counted) and refuses
only a run in which nothing matched: no mac/ac/synop rule recorded an op (a matched op
counts even when its value is 0, so an empty batch matched) and no Conv/Linear/neuron module
call reached the memory counter. Then it warns, or with strict raises RuntimeError.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from spiketrace.analyze.counters import COUNTERS, _ignore_names, _where
from spiketrace.analyze.counters.engine import count_events
from spiketrace.analyze.counters.neuromorphic_memory_access import SYNAPTIC_CLASSES, with_totals
from spiketrace.analyze.counters.sql import MACROS
from spiketrace.analyze.energy import stateful
from spiketrace.analyze.energy.breakdown import breakdown_frame, section
from spiketrace.analyze.presets.costs import FlatCosts

MODEL = "compute"
PRESET_UNITS = {"e_mac_pj": "pJ", "e_ac_pj": "pJ", "e_memory_pj_per_byte": "pJ/byte"}
QUANTITIES = ("mac", "ac", "synop", "weight_read_bytes", "bias_read_bytes",
              "neuron_state_read_bytes", "neuron_state_write_bytes")
# SimpleEnergyProfiler's _SIMPLE_MODEL_INFO and its "nothing matched" message, as it words them.
MODEL_INFO = {
    "model_id": "simple_horowitz_step_composite_v1",
    "fidelity": "spikingjelly-defined",
    "source_urls": ("https://doi.org/10.1109/ISSCC.2014.6757323", "https://openreview.net/pdf?id=SzwU2XrXIS"),
    "technology_nm": 45,
    "precision": "configurable comparison regime; runtime bytes use observed dtype",
    "scope": "runtime MAC/AC plus SpikingJelly logical parameter and neuron-state traffic",
}
NOTHING_MATCHED = ("SimpleEnergyProfiler did not match any supported operators. "
                   "The model may not contain supported operators for this estimator.")
# The Global counts are also kept per (rank, recorder step, stage): every count is a sum over
# ops or module calls, each of one rank, step and stage, so the energy splits exactly along them.
GROUPS = ["rank", "step", "stage"]


@dataclass(frozen=True)
class Costs(FlatCosts):
    """SpikingJelly's SimpleEnergyCostConfig (defaults: Horowitz 2014, 45 nm, fp32)."""

    MODEL: ClassVar[str] = MODEL
    UNITS: ClassVar[Mapping[str, str]] = PRESET_UNITS
    e_mac_pj: float = 4.6
    e_ac_pj: float = 0.9
    e_memory_pj_per_byte: float = 24.96


@dataclass
class Activity:
    """Preset-independent counts: one row per (stage, scope, quantity), and the Global ones
    per (rank, step, stage, quantity)."""

    counts: pd.DataFrame  # stage, scope, quantity, value
    warnings: list[str] = field(default_factory=list)
    steps: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=[*GROUPS, "quantity", "value"]))
    matched: bool = True  # some rule or module call matched (SpikingJelly's test, whatever the values)

    def totals(self) -> dict[str, int]:
        rows = self.counts[self.counts["scope"] == "Global"]
        summed = rows.groupby("quantity")["value"].sum()
        return {q: int(summed.get(q, 0)) for q in QUANTITIES}


@dataclass
class Report:
    """SpikingJelly's SimpleEnergyReport fields, plus per-stage and per-module energies."""

    energy_total_pj: float
    energy_compute_pj: float
    energy_mac_pj: float
    energy_ac_pj: float
    energy_memory_pj: float
    breakdown_pj: dict[str, float]
    counts: dict[str, int]
    warnings: list[str]
    energy_by_stage: dict[str, float]
    energy_by_module: dict[str, float]
    costs: Costs
    # module scope -> {component: pJ} (mac_pj, ac_pj, parameter_memory_pj, neuron_state_memory_pj)
    energy_by_module_component: dict[str, dict[str, float]] = field(default_factory=dict)
    energy_by_step: dict[str, float] = field(default_factory=dict)  # recorder step -> pJ; sums to the total
    energy_by_rank: dict[str, float] = field(default_factory=dict)  # rank -> pJ; sums to the total
    model_info: dict[str, Any] = field(default_factory=lambda: dict(MODEL_INFO))

    def to_frame(self) -> pd.DataFrame:
        """Tidy rows (analyze/energy/breakdown.py): total, component, stage, step, rank, module, count."""
        return breakdown_frame(
            section("total", {"energy_total_pj": self.energy_total_pj}),
            *(section(name, values) for name, values in (
                ("component", self.breakdown_pj), ("stage", self.energy_by_stage), ("step", self.energy_by_step),
                ("rank", self.energy_by_rank), ("module", self.energy_by_module))),
            section("count", self.counts, "count"))

    def to_json(self) -> dict:
        document = asdict(self)
        document["costs"] = asdict(self.costs)
        document["model_info"] = {k: list(v) if isinstance(v, tuple) else v for k, v in self.model_info.items()}
        return document


def _conv_probe_leak(trace, where: str, ignore_modules) -> pd.DataFrame:
    """AC SimpleEnergyProfiler adds per binary-input conv call: N_eff * groups * prod(out spatial) - 1.
    `where` selects calls by their pre hook's module_events columns."""
    listed = "[" + ", ".join(f"'{c}'" for c in SYNAPTIC_CLASSES[1:]) + "]"
    ignored = "[" + ", ".join(f"'{n}'" for n in ignore_modules) + "]"
    return trace.sql(f"""
        SELECT post.rank, post.step, post.stage, 'Global' AS scope, 'ac' AS quantity,
               CAST(sum(o.numel // o.shape[CASE WHEN m.attributes->>'step_mode' = 'm' THEN 3 ELSE 2 END]
                        * (m.attributes->>'groups')::BIGINT - 1) AS BIGINT) AS value
        FROM (SELECT * FROM module_events WHERE {where}) pre
        JOIN module_events post ON post.rank = pre.rank AND post.module_id = pre.module_id
             AND post.call_index = pre.call_index AND post.kind = 'forward_post'
        JOIN modules m ON m.rank = pre.rank AND m.module_id = pre.module_id AND m.in_model
        JOIN tensor_states x ON x.rank = pre.rank AND x.tensor_id = pre.inputs[1]
        JOIN tensor_states o ON o.rank = post.rank AND o.tensor_id = post.outputs[1]
        WHERE pre.kind = 'forward_pre' AND list_has_any(m.mro, {listed}) AND x.is01
          AND NOT EXISTS (SELECT 1 FROM modules a WHERE a.rank = m.rank AND a.in_model
              AND (m.path = a.path OR starts_with(m.path, a.path || '.'))
              AND (list_has_any(a.mro, {ignored}) OR list_contains({ignored}, a.class_name)))
        GROUP BY post.rank, post.step, post.stage
    """)


def _tidy(frames: list[pd.DataFrame], keys: list[str]) -> pd.DataFrame:
    columns = [*keys, "quantity", "value"]
    frames = [f[columns] for f in frames if len(f)]
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame({c: [] for c in columns})
    return frame.groupby(keys + ["quantity"], as_index=False)["value"].sum()


def activity(trace, *, stage=None, step=None, rank=None, ignore_modules=(), compat=None, strict=False,
             recompute=None, **options) -> Activity:
    """The counts of the selection (stage, step, rank: a value or a list each; all when None).
    `recompute`: the ops and module calls activation checkpointing recomputed in backward are
    executed work, included by default; "exclude" leaves them out, "only" keeps just them.
    `strict` refuses at costing, and only a selection in which nothing matched (module docstring)."""
    if options:
        raise TypeError(f"the compute model takes no options {sorted(options)} (it takes stage, step, rank, recompute)")
    where, ignored = _where(stage=stage, step=step, rank=rank, recompute=recompute), _ignore_names(ignore_modules)
    # non-strict, as SimpleEnergyProfiler's own dispatch mode: an op without a rule is not counted
    result = count_events(trace.con, {name: COUNTERS[name] for name in ("mac", "ac", "synop")}, where=where,
                          group_by=("stage",), totals_by=tuple(GROUPS), ignore_modules=ignored, compat=compat)
    for macro in MACROS:
        trace.con.execute(macro)
    memory, memory_totals = with_totals(trace, ignored, where=where, group_by=("stage",), totals_by=GROUPS,
                                        compat=compat)
    counts = [result.frame.rename(columns={"counter": "quantity"}), memory.rename(columns={"metric": "quantity"})]
    assert result.group_totals is not None  # asked for (totals_by)
    steps = [result.group_totals.rename(columns={"counter": "quantity"}),
             memory_totals.rename(columns={"metric": "quantity"})]
    if compat == "spikingjelly":
        leak = _conv_probe_leak(trace, where, ignored)
        counts.append(leak.groupby(["stage", "scope", "quantity"], as_index=False)["value"].sum())
        steps.append(leak)
    counts = _tidy(counts, ["stage", "scope"])
    # a rule that matched records its op even with a value of 0, a memory-counter call its scopes
    matched = bool((result.frame["scope"] == "Global").any()) or bool(len(memory))
    warnings = [] if matched else [NOTHING_MATCHED]
    warnings += stateful.warnings(trace, MODEL, compat, ignore_modules, where=where)
    return Activity(counts, warnings, _tidy(steps, GROUPS), matched)


COMPONENT_OF = {"mac": "mac_pj", "ac": "ac_pj", "weight_read_bytes": "parameter_memory_pj",
                "bias_read_bytes": "parameter_memory_pj", "neuron_state_read_bytes": "neuron_state_memory_pj",
                "neuron_state_write_bytes": "neuron_state_memory_pj"}


def _energy_of(counts: pd.DataFrame, costs: Costs) -> pd.Series:
    per_quantity = {
        "mac": costs.e_mac_pj, "ac": costs.e_ac_pj,
        **{q: costs.e_memory_pj_per_byte for q in QUANTITIES if q.endswith("_bytes")},
    }
    return counts["value"] * counts["quantity"].map(per_quantity).fillna(0.0)


def cost(activity: Activity, costs: Costs, *, compat=None, strict=False) -> Report:
    if strict and not activity.matched:
        raise RuntimeError(NOTHING_MATCHED)
    n = activity.totals()
    mac_pj = n["mac"] * costs.e_mac_pj
    ac_pj = n["ac"] * costs.e_ac_pj
    parameter_bytes = n["weight_read_bytes"] + n["bias_read_bytes"]
    state_bytes = n["neuron_state_read_bytes"] + n["neuron_state_write_bytes"]
    parameter_pj = parameter_bytes * costs.e_memory_pj_per_byte
    state_pj = state_bytes * costs.e_memory_pj_per_byte
    memory_pj = parameter_pj + state_pj
    compute_pj = mac_pj + ac_pj
    frame = activity.counts.assign(pj=_energy_of(activity.counts, costs))
    steps = activity.steps.assign(pj=_energy_of(activity.steps, costs))
    frame["component"] = frame["quantity"].map(COMPONENT_OF)
    by_stage = frame[frame["scope"] == "Global"].groupby("stage")["pj"].sum()
    by_module = frame[frame["scope"] != "Global"].groupby("scope")["pj"].sum()
    return Report(
        energy_total_pj=compute_pj + memory_pj,
        energy_compute_pj=compute_pj,
        energy_mac_pj=mac_pj,
        energy_ac_pj=ac_pj,
        energy_memory_pj=memory_pj,
        breakdown_pj={"mac_pj": mac_pj, "ac_pj": ac_pj, "parameter_memory_pj": parameter_pj,
                      "neuron_state_memory_pj": state_pj, "memory_pj": memory_pj},
        counts={**n, "memory_access_bytes": parameter_bytes + state_bytes},
        warnings=list(activity.warnings),
        energy_by_stage={str(k): float(v) for k, v in by_stage.items()},
        energy_by_module={str(k): float(v) for k, v in by_module.items()},
        costs=costs,
        energy_by_module_component={
            str(scope): {str(c): float(v) for c, v in group.groupby("component")["pj"].sum().items()}
            for scope, group in frame[(frame["scope"] != "Global") & frame["component"].notna()].groupby("scope")
        },
        energy_by_step=_by(steps, "step"),
        energy_by_rank=_by(steps, "rank"),
    )


def _by(frame: pd.DataFrame, column: str) -> dict[str, float]:
    """pJ per value of an integer column (step, rank), in its order, keys as text."""
    return {str(int(k)): float(v) for k, v in frame.groupby(column)["pj"].sum().items()}


def sweep_totals(activity: Activity, base: Costs, values, *, compat=None) -> pd.DataFrame:
    """energy_total_pj, energy_compute_pj and energy_memory_pj for each index of `values`
    (preset key -> equal-length arrays), every other cost from `base`: cost()'s arithmetic
    on the activity's totals, as arrays (recost's bulk path)."""
    unknown = sorted(set(values) - set(PRESET_UNITS))
    if unknown:
        raise ValueError(f"cannot sweep {unknown[0]!r}: the compute model's keys are {', '.join(PRESET_UNITS)}")
    n = len(next(iter(values.values()))) if values else 1
    cost = {key: np.broadcast_to(np.asarray(values.get(key, getattr(base, key)), dtype=float), (n,))
            for key in PRESET_UNITS}
    n_ = activity.totals()
    compute = n_["mac"] * cost["e_mac_pj"] + n_["ac"] * cost["e_ac_pj"]
    memory = ((n_["weight_read_bytes"] + n_["bias_read_bytes"]) * cost["e_memory_pj_per_byte"]
              + (n_["neuron_state_read_bytes"] + n_["neuron_state_write_bytes"]) * cost["e_memory_pj_per_byte"])
    return pd.DataFrame({"energy_total_pj": compute + memory, "energy_compute_pj": compute, "energy_memory_pj": memory})
