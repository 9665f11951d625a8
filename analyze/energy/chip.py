"""The chip model: what a neuromorphic chip costs per event (synaptic operations, neuron
updates active and inactive, spikes emitted), static power times time only with a time per
step, and the work a chip cannot do as events listed and costed under a host preset or
reported as uncosted. The events are read once by event_activity.py; presets are
analyze/presets/{loihi-2018,truenorth-2014,odin-2019,spinnaker1-2012,seneca-2023}.toml, from
../shared/reference/hardware_catalogue.md, grades A and B only, each with its scope.

A preset's figures (Costs):

    e_synaptic_op_pj              a spike delivered to one synapse (a synaptic operation, SOP)
    e_neuron_update_active_pj     one neuron's update in a step where it is active
    e_neuron_update_inactive_pj   one neuron's update in a step where it is not
    e_spike_pj                    one spike a neuron emits
    neuron_time_nj_per_ms         one neuron, per millisecond of chip time (SpiNNaker's figure)
    static_power_mw               the chip's static power while it runs

Only e_synaptic_op_pj is required. A key the preset does not give is a term the chip's
figures do not state apart: with scope "all-in" (TrueNorth) it is inside the synaptic
figure; with "per-term" or "minimum" it is not costed, and every output lists it so.
The two time-based keys are charged only when the user gives a time per step.

Costing (cost):
    synaptic       synaptic events x e_synaptic_op_pj
    neuron_active  active neuron updates x e_neuron_update_active_pj
    neuron_inactive inactive neuron updates x e_neuron_update_inactive_pj
    spike          spikes emitted x e_spike_pj
    neuron_time    neuron updates x step time (ms) x neuron_time_nj_per_ms   (with a step time)
    static         static_power_mw x chip time                              (with a step time)
    host           host MACs x the host preset's e_mac_pj                   (with --host)

A term is `costed`, or says why not: `not in preset` (the preset gives no such figure; with
scope all-in it is inside the synaptic figure), `needs step time` (a time-based figure and
no time per step given), `uncosted` (host work without a host preset). Only costed terms are
in the total; the rest are listed with their counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import pandas as pd

from spiketrace.analyze.energy.breakdown import breakdown_frame, section
from spiketrace.analyze.energy.event_activity import Activity, activity, parse_step_time
from spiketrace.analyze.presets.costs import FlatCosts

MODEL = "chip"
PRESET_UNITS = {"e_synaptic_op_pj": "pJ", "e_neuron_update_active_pj": "pJ", "e_neuron_update_inactive_pj": "pJ",
                "e_spike_pj": "pJ", "neuron_time_nj_per_ms": "nJ/ms", "static_power_mw": "mW"}
PRESET_ZERO_ALLOWED = ()


@dataclass(frozen=True)
class Costs(FlatCosts):
    """The figures of PRESET_UNITS, in those units; None: not a term of the preset."""

    MODEL: ClassVar[str] = MODEL
    UNITS: ClassVar[Mapping[str, str]] = PRESET_UNITS
    REQUIRED: ClassVar[tuple[str, ...]] = ("e_synaptic_op_pj",)
    e_synaptic_op_pj: float
    e_neuron_update_active_pj: float | None = None
    e_neuron_update_inactive_pj: float | None = None
    e_spike_pj: float | None = None
    neuron_time_nj_per_ms: float | None = None
    static_power_mw: float | None = None


TERMS = ("synaptic", "neuron_active", "neuron_inactive", "spike", "neuron_time", "static", "host")
_KEY = {"synaptic": "e_synaptic_op_pj", "neuron_active": "e_neuron_update_active_pj",
        "neuron_inactive": "e_neuron_update_inactive_pj", "spike": "e_spike_pj",
        "neuron_time": "neuron_time_nj_per_ms", "static": "static_power_mw"}
_WHAT = {"synaptic": "synaptic events", "neuron_active": "active neuron updates",
         "neuron_inactive": "inactive neuron updates", "spike": "spikes emitted", "neuron_time": "neuron-ms",
         "static": "chip seconds", "host": "host MACs"}


def _terms(activity: Activity, costs: Costs) -> pd.DataFrame:
    """One row per TERMS: what it counts, the count, pJ per unit of it, pJ (None when not costed), status."""
    neurons = activity.neurons
    step_s = activity.time["step_time_s"]
    updates = float(neurons["updates"].sum()) if len(neurons) else 0.0
    counts = {"synaptic": float(activity.synaptic["sop"].sum()),
              "neuron_active": float(neurons["active"].sum()) if len(neurons) else 0.0,
              "neuron_inactive": float(neurons["inactive"].sum()) if len(neurons) else 0.0,
              "spike": float(neurons["spikes"].sum()) if len(neurons) else 0.0,
              "neuron_time": updates * step_s * 1e3 if step_s is not None else None,
              "static": activity.time["chip_time_s"], "host": float(activity.synaptic["mac"].sum())}
    rows = []
    for term in TERMS:
        if term == "host":
            per = activity.host["e_mac_pj"] if activity.host else None
            status = "costed" if per is not None else "uncosted"
        else:
            per = getattr(costs, _KEY[term])
            if term == "neuron_time" and per is not None:
                per = per * 1e3  # nJ per neuron-ms -> pJ
            elif term == "static" and per is not None:
                per = per * 1e9  # mW x s = mJ -> pJ per second
            status = "not in preset" if per is None else ("needs step time" if counts[term] is None else "costed")
        pj = counts[term] * per if status == "costed" and per is not None and counts[term] is not None else None
        rows.append({"term": term, "what": _WHAT[term], "count": counts[term],
                     "pj_per_unit": per, "energy_pj": pj, "status": status})
    return pd.DataFrame(rows)


@dataclass
class Report:
    """A chip's energy: terms, per synaptic layer, per neuron module, host work, totals, per sample."""

    terms: pd.DataFrame  # term, what, count, pj_per_unit, energy_pj, status
    synaptic: pd.DataFrame  # mapper.SYNAPTIC_COLUMNS, chip_pj, host_pj
    neurons: pd.DataFrame  # mapper.NEURON_COLUMNS
    host_ops: pd.DataFrame  # op, calls, elements (listed, uncosted)
    totals: dict[str, Any]
    per_sample: dict[str, Any]
    samples: int | None
    time: dict[str, Any]
    host: dict[str, Any] | None
    costs: Costs
    warnings: list[str] = field(default_factory=list)
    stages: list[str] = field(default_factory=list)

    @property
    def energy_total_pj(self) -> float:
        return self.totals["energy_pj"]

    def labels(self) -> list[str]:
        return [scope if index == 1 and kind != "matmul" else f"{scope}#{index}"
                for scope, index, kind in zip(self.synaptic["scope"], self.synaptic["index"], self.synaptic["kind"])]

    @property
    def energy_by_stage(self) -> dict[str, float]:
        """Stage -> pJ: the total under the one stage the selection's work ran in (the events of
        several stages are not split by stage: then under "all stages")."""
        label = self.stages[0] if len(self.stages) == 1 else "all stages"
        return {label: float(self.totals["energy_pj"])}

    @property
    def energy_by_module(self) -> dict[str, float]:
        """Synaptic layer -> pJ (its events on the chip, its MACs on the host when costed)."""
        return dict(zip(self.labels(), (self.synaptic["chip_pj"] + self.synaptic["host_pj"].fillna(0.0)).astype(float)))

    def to_frame(self) -> pd.DataFrame:
        """Tidy rows (analyze/energy/breakdown.py): total, component (costed terms), layer, count."""
        costed = self.terms[self.terms["status"] == "costed"]
        counts = {f"{t}_count": c for t, c in zip(self.terms["term"], self.terms["count"]) if c is not None}
        return breakdown_frame(
            section("total", {"energy_total_pj": self.totals["energy_pj"]}),
            section("component", {f"{t}_pj": float(e) for t, e in zip(costed["term"], costed["energy_pj"])}),
            section("layer", list(self.energy_by_module.items())),
            section("count", {**counts, "samples": self.samples}, "count"))

    def to_json(self) -> dict:
        """The documented document (docs/chip_energy_json.md), less the preset (the caller's)."""
        def records(frame: pd.DataFrame) -> list[dict]:
            clean = frame.astype(object).where(frame.notna(), None)
            return [{k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}
                    for row in clean.to_dict("records")]

        layers = self.synaptic.copy()
        layers.insert(0, "name", self.labels())
        return {"samples": self.samples, "costs": asdict(self.costs), "time": dict(self.time),
                "static_included": bool(self.totals["static_included"]), "host": self.host,
                "totals": dict(self.totals), "per_sample": dict(self.per_sample), "terms": records(self.terms),
                "layers": records(layers), "neurons": records(self.neurons), "host_ops": records(self.host_ops),
                "notes": list(self.warnings)}


def cost(activity: Activity, costs: Costs, *, compat=None, strict=False) -> Report:
    terms = _terms(activity, costs)
    costed = terms[terms["status"] == "costed"].set_index("term")["energy_pj"]
    host_pj = float(costed.get("host", 0.0))
    total = float(costed.sum())
    synaptic = activity.synaptic.assign(chip_pj=activity.synaptic["sop"] * costs.e_synaptic_op_pj)
    synaptic["host_pj"] = synaptic["mac"] * activity.host["e_mac_pj"] if activity.host else None
    totals: dict[str, Any] = {
        "energy_pj": total, "chip_pj": total - host_pj, "host_pj": host_pj if activity.host else None,
        "synaptic_events": float(activity.synaptic["sop"].sum()), "host_mac": float(activity.synaptic["mac"].sum()),
        **{key: float(activity.neurons[key].sum()) if len(activity.neurons) else 0.0
           for key in ("updates", "active", "inactive", "spikes")},
        "static_included": bool(terms.loc[terms["term"] == "static", "status"].iloc[0] == "costed"),
        "uncosted_terms": [t for t, s in zip(terms["term"], terms["status"]) if s != "costed"]}
    n = activity.samples
    keys = ("energy_pj", "chip_pj", "host_pj", "synaptic_events", "host_mac", "updates", "spikes")
    per_sample: dict[str, float | None] = {
        key: (float(totals[key]) / n if n and isinstance(totals[key], (int, float)) else None) for key in keys}
    energy = per_sample["energy_pj"]
    per_sample["energy_uj"] = None if energy is None else energy * 1e-6
    notes = list(activity.notes)
    if not totals["static_included"]:
        notes.append("static energy not included: " + ("the preset gives no static power"
                                                       if activity.time["step_time_s"] is not None
                                                       else "no time per step given (--step-time 1ms charges it)"))
    return Report(terms, synaptic, activity.neurons, activity.host_ops, totals, per_sample, n, dict(activity.time),
                  activity.host, costs, notes, list(activity.stages))


__all__ = ["MODEL", "PRESET_UNITS", "PRESET_ZERO_ALLOWED", "TERMS", "Activity", "Costs", "Report", "activity", "cost",
           "parse_step_time"]
