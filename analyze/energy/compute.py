"""Compute-only energy, SpikingJelly 2.0.0's estimate_simple_energy (SimpleEnergyProfiler).

energy = MAC * e_mac + AC * e_ac + (weight + bias reads + neuron state reads + writes) bytes
* e_memory_per_byte, from the mac / ac / synop counters and the module-level
neuromorphic_memory_access counter. Activity is those counts per stage and scope; costing
is three multiplications, so any number of presets re-cost one activity.

compat="spikingjelly" adds what SimpleEnergyProfiler's own machinery leaks into its AC
count (docs/deviations.md 6): its memory counter's conv fan-out probe, run in a module hook,
ends in an `aten.sum` that its ACCounter counts as numel - 1 additions, once per
binary-input conv call.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

import pandas as pd

from analyze.counters import count
from analyze.counters.neuromorphic_memory_access import SYNAPTIC_CLASSES

MODEL = "compute"
PRESET_UNITS = {"e_mac_pj": "pJ", "e_ac_pj": "pJ", "e_memory_pj_per_byte": "pJ/byte"}
QUANTITIES = ("mac", "ac", "synop", "weight_read_bytes", "bias_read_bytes",
              "neuron_state_read_bytes", "neuron_state_write_bytes")


@dataclass(frozen=True)
class Costs:
    """SpikingJelly's SimpleEnergyCostConfig (defaults: Horowitz 2014, 45 nm, fp32)."""

    e_mac_pj: float = 4.6
    e_ac_pj: float = 0.9
    e_memory_pj_per_byte: float = 24.96

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be finite and nonnegative, got {value}")

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> "Costs":
        unknown = sorted(set(values) - set(PRESET_UNITS))
        if unknown:
            raise ValueError(f"unknown key {unknown[0]!r} for the compute model (known: {', '.join(PRESET_UNITS)})")
        return cls(**{k: float(v) for k, v in values.items()})


@dataclass
class Activity:
    """Preset-independent counts: one row per (stage, scope, quantity)."""

    counts: pd.DataFrame  # stage, scope, quantity, value
    warnings: list[str] = field(default_factory=list)

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

    def to_frame(self) -> pd.DataFrame:
        rows = [("total", "energy_total_pj", self.energy_total_pj, None)]
        rows += [("component", k, v, None) for k, v in self.breakdown_pj.items()]
        rows += [("stage", k, v, None) for k, v in self.energy_by_stage.items()]
        rows += [("module", k, v, None) for k, v in self.energy_by_module.items()]
        rows += [("count", k, None, v) for k, v in self.counts.items()]
        return pd.DataFrame(rows, columns=["breakdown", "key", "pj", "count"])

    def to_json(self) -> dict:
        document = asdict(self)
        document["costs"] = asdict(self.costs)
        return document


def _conv_probe_leak(trace, stage, ignore_modules) -> pd.DataFrame:
    """AC SimpleEnergyProfiler adds per binary-input conv call: N_eff * groups * prod(out spatial) - 1."""
    listed = "[" + ", ".join(f"'{c}'" for c in SYNAPTIC_CLASSES[1:]) + "]"
    stage_filter = "" if stage is None else f"AND pre.stage = '{stage}'"
    ignored = "[" + ", ".join(f"'{n}'" for n in ignore_modules) + "]"
    return trace.sql(f"""
        SELECT post.stage, 'Global' AS scope, 'ac' AS quantity,
               CAST(sum(o.numel // o.shape[CASE WHEN m.attributes->>'step_mode' = 'm' THEN 3 ELSE 2 END]
                        * (m.attributes->>'groups')::BIGINT - 1) AS BIGINT) AS value
        FROM module_events pre
        JOIN module_events post ON post.rank = pre.rank AND post.module_id = pre.module_id
             AND post.call_index = pre.call_index AND post.kind = 'forward_post'
        JOIN modules m ON m.rank = pre.rank AND m.module_id = pre.module_id AND m.in_model
        JOIN tensor_states x ON x.rank = pre.rank AND x.tensor_id = pre.inputs[1]
        JOIN tensor_states o ON o.rank = post.rank AND o.tensor_id = post.outputs[1]
        WHERE pre.kind = 'forward_pre' AND list_has_any(m.mro, {listed}) AND x.is01 {stage_filter}
          AND NOT EXISTS (SELECT 1 FROM modules a WHERE a.rank = m.rank AND a.in_model
              AND (m.path = a.path OR starts_with(m.path, a.path || '.'))
              AND (list_has_any(a.mro, {ignored}) OR list_contains({ignored}, a.class_name)))
        GROUP BY post.stage
    """)


def activity(trace, *, stage=None, ignore_modules=(), compat=None, strict=False, **options) -> Activity:
    if options:
        raise TypeError(f"the compute model takes no options {sorted(options)}")
    result = count(trace, ["mac", "ac", "synop"], stage=stage, ignore_modules=ignore_modules or None,
                   compat=compat, strict=strict, by=["stage"])
    frames = [result.frame.rename(columns={"counter": "quantity"})
              .groupby(["stage", "scope", "quantity"], as_index=False)["value"].sum()]
    for stage_name in ([stage] if stage is not None else list(trace.sql(
            "SELECT DISTINCT stage FROM module_events ORDER BY stage")["stage"])):
        memory = count(trace, ["neuromorphic_memory_access"], stage=stage_name,
                       ignore_modules=ignore_modules or None, compat=compat).frame
        frames.append(memory.rename(columns={"op": "quantity"}).assign(stage=stage_name)[["stage", "scope", "quantity", "value"]])
    if compat == "spikingjelly":
        from analyze.counters import _ignore_names

        frames.append(_conv_probe_leak(trace, stage, _ignore_names(ignore_modules)))
    counts = pd.concat([f for f in frames if len(f)], ignore_index=True) if any(len(f) for f in frames) else \
        pd.DataFrame({"stage": [], "scope": [], "quantity": [], "value": []})
    warnings = []
    if not len(counts) or counts["value"].sum() == 0:
        warnings.append("no supported operators were matched: the selection may hold no synaptic or neuron work")
    return Activity(counts.groupby(["stage", "scope", "quantity"], as_index=False)["value"].sum(), warnings)


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
    if strict and activity.warnings:
        raise RuntimeError(activity.warnings[0])
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
    )
