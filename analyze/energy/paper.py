"""The paper convention: the energy table SNN papers report (Spikformer, Zhou et al., ICLR 2023,
App. C.2, Eqs. 21-22; Spike-driven Transformer; syops-counter), per synaptic layer and per sample.

    E = E_MAC * MACs + E_AC * SOPs,  per layer, summed; divided by the samples

A synaptic layer (analyze/energy/synaptic_layers.py: conv, linear, matmul of two activations)
whose input is spikes is charged SOPs; the first layer, whose input is the data, MACs; a later
layer's non-spike input (a residual sum, a BN output, a graded spike) MACs or nothing. The
choices papers differ on are OPTIONS, each with its default, and every report names them:

    mode         rate: SOPs = the layer's input firing rate over the run x its dense MACs over
                 every time step (Eq. 21); event: the exact (nonzero input, nonzero weight)
                 products, NeuroBench 2.3.0's Effective_ACs x samples for its layers
    first_layer  per-step: the first layer's dense MACs over every time step; once: divided
                 by the time steps (time_steps, else its calls per batch), as if computed once
    non_spike    mac: a later layer's non-spike input is charged as dense MACs; omit: left out
    matmul_rate  which operand's rate sets a spike x spike matmul's SOPs in rate mode: left,
                 right, or both (the product of the two rates); event mode counts the pairs
                 where both are nonzero, whatever it says

Activity (this module's `activity`) is those charges per layer and per batch (recorder step),
and the samples: it reads the trace once per options. Costing multiplies by E_MAC and E_AC
(a preset: paper-fp32-45nm, ...), so any number of presets re-cost one activity.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from spiketrace.analyze.counters import _ignore_names, _where
from spiketrace.analyze.counters.neurobench.batches import batch_sizes, sample_count
from spiketrace.analyze.energy.breakdown import breakdown_frame, section
from spiketrace.analyze.energy.spread import spread
from spiketrace.analyze.energy.synaptic_layers import map_layers, uncosted_notes
from spiketrace.analyze.presets.costs import FlatCosts

MODEL = "paper"
PRESET_UNITS = {"e_mac_pj": "pJ", "e_ac_pj": "pJ"}
CONVENTION = "Spikformer (Zhou et al., ICLR 2023) App. C.2, Eqs. 21-22: E = E_MAC x MACs + E_AC x SOPs"
# option -> (choices, default)
OPTIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "mode": (("rate", "event"), "rate"),
    "first_layer": (("per-step", "once"), "per-step"),
    "non_spike": (("mac", "omit"), "mac"),
    "matmul_rate": (("left", "right", "both"), "left"),
}
SAMPLES_RULE = ("NeuroBench's rule: each batch's batch dimension (dim 1 of a SpikingJelly multi-step module's "
                "[T, B, ...] input, else dim 0 of the model's first input), summed")
LAYER_KEYS = ["scope", "index", "kind"]
LAYER_COLUMNS = ["scope", "index", "kind", "op", "input", "charged", "first", "neurobench", "calls",
                 "input_firing_rate", "dense_mac", "sop", "mac"]


@dataclass(frozen=True)
class Costs(FlatCosts):
    """Energy per MAC and per AC (synaptic operation), pJ."""

    MODEL: ClassVar[str] = MODEL
    UNITS: ClassVar[Mapping[str, str]] = PRESET_UNITS
    e_mac_pj: float = 4.6
    e_ac_pj: float = 0.9


@dataclass
class Activity:
    """Preset-independent: the charged operations per layer (LAYER_COLUMNS) and per batch
    (rank, step, samples, dense_mac, sop, mac), the samples and the convention used."""

    layers: pd.DataFrame
    batches: pd.DataFrame
    samples: int | None
    convention: dict[str, Any]
    test_set: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    stages: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["stage", "mac", "dense_mac", "sop"]))


def energy_pj(mac, sop, costs: Costs):
    """Eq. 22: E_MAC x MACs + E_AC x SOPs, in pJ (numbers or arrays)."""
    return mac * costs.e_mac_pj + sop * costs.e_ac_pj


def activity_of_counts(layers: Mapping[str, tuple[float, float]], samples: int | None = 1) -> Activity:
    """An Activity from counts someone published or derived: {layer: (MACs, SOPs)} over
    `samples` samples (cost() prices it as a recorded one)."""
    frame = pd.DataFrame([{**dict.fromkeys(LAYER_COLUMNS), "scope": name, "index": 1, "kind": "given",
                           "input": "given", "charged": "given", "dense_mac": float("nan"), "mac": float(mac),
                           "sop": float(sop)} for name, (mac, sop) in layers.items()], columns=LAYER_COLUMNS)
    batches = pd.DataFrame({"rank": [0], "step": [0], "samples": [samples], "dense_mac": [0.0],
                            "mac": [float(frame["mac"].sum())], "sop": [float(frame["sop"].sum())]})
    convention = {"name": CONVENTION, **{name: default for name, (_, default) in OPTIONS.items()},
                  "samples_source": "given"}
    return Activity(frame, batches, samples, convention, {"batches": 1, "sampled_by_schedule": False, "schedule": None,
                                                          "steps_recorded": 1})


def _charges(rows: pd.DataFrame, options: dict, time_steps: int | None) -> tuple[pd.DataFrame, dict]:
    """Each row's charge (sop, mac, first, omitted), the rate operands' nnz and numel (num/den,
    a second pair for both) and its MACs; and what was decided about the first layer."""
    rows = rows.copy()
    spike = rows["x_spike"] | rows["y_spike"]
    lowest = rows[rows["rank"] == rows["rank"].min()] if len(rows) else rows
    first = tuple(lowest.loc[lowest["first_seq"].idxmin(), LAYER_KEYS]) if len(lowest) else None
    rows["first"] = np.logical_and.reduce([rows[k] == v for k, v in zip(LAYER_KEYS, first)]) if first else False
    first_spike = bool(spike[rows["first"]].any()) if first is not None else False
    later = np.full(len(rows), options["non_spike"] == "mac")
    rows["charged"] = np.select([spike, rows["first"], later], ["sop", "first", "mac"], "omitted")
    # the rate operand of spike rows: x (a weight layer's input, a matmul's left), y, or both
    both = rows["x_spike"] & rows["y_spike"]
    operand = np.where(both, options["matmul_rate"], np.where(rows["x_spike"], "left", "right"))
    rows["operand"] = np.where(spike, operand, "")
    use_y = rows["operand"] == "right"
    rows["num"] = np.where(use_y, rows["y_nnz"], rows["x_nnz"])
    rows["den"] = np.where(use_y, rows["y_numel"], rows["x_numel"])
    rows["num2"] = np.where(rows["operand"] == "both", rows["y_nnz"], 1.0)
    rows["den2"] = np.where(rows["operand"] == "both", rows["y_numel"], 1.0)
    decided: dict[str, Any] = {"first_layer_scope": None if first is None else first[0],
                               "first_layer_input": None if first is None else ("spike" if first_spike else "non-spike"),
                               "time_steps": time_steps}
    divisor = 1.0
    if first is not None and not first_spike and options["first_layer"] == "once":
        if time_steps is None:
            own = rows[rows["first"]]
            batches = own[["rank", "step"]].drop_duplicates()
            time_steps = max(1, round(own["calls"].sum() / max(len(batches), 1)))
            decided["time_steps"] = time_steps
            decided["time_steps_source"] = "the first layer's calls per batch"
        else:
            decided["time_steps_source"] = "given"
        divisor = float(time_steps)
    rows["mac"] = np.select([rows["charged"] == "mac", rows["charged"] == "first"],
                            [rows["dense_mac"], rows["dense_mac"] / divisor], 0.0)
    return rows, decided


def _sops(rows: pd.DataFrame, keys: list[str], mode: str) -> pd.DataFrame:
    """Per `keys`, the SOPs of the spike rows in rate mode (per operand group: its rate over
    the group's calls x their dense MACs) and in event mode (the pairs), and their dense MACs."""
    spiking = rows[rows["charged"] == "sop"]
    if not len(spiking):
        return pd.DataFrame(columns=[*keys, "rate_sop", "event_sop", "sop_dense"])
    sums = spiking.groupby([*keys, "operand"], as_index=False)[["num", "den", "num2", "den2", "dense_mac", "pairs"]].sum()
    rate = (np.divide(sums["num"], sums["den"], out=np.zeros(len(sums)), where=sums["den"] > 0)
            * np.divide(sums["num2"], sums["den2"], out=np.zeros(len(sums)), where=sums["den2"] > 0))
    sums = sums.assign(rate_sop=rate * sums["dense_mac"], event_sop=sums["pairs"], sop_dense=sums["dense_mac"])
    return sums.groupby(keys, as_index=False)[["rate_sop", "event_sop", "sop_dense"]].sum()


def _layer_table(rows: pd.DataFrame, mode: str) -> pd.DataFrame:
    if not len(rows):
        return pd.DataFrame({c: [] for c in LAYER_COLUMNS})
    grouped = rows.groupby(LAYER_KEYS, sort=False)
    table = grouped.agg(op=("op", "first"), first=("first", "any"), neurobench=("neurobench", "any"),
                        calls=("calls", "sum"), dense_mac=("dense_mac", "sum"), mac=("mac", "sum"),
                        first_seq=("first_seq", "min"), spikes=("charged", lambda c: (c == "sop").mean()),
                        charged=("charged", lambda c: "+".join(sorted(set(c))))).reset_index()
    table = table.merge(_sops(rows, LAYER_KEYS, mode), on=LAYER_KEYS, how="left")
    table["input"] = np.select([table["spikes"] == 1, table["spikes"] == 0], ["spike", "non-spike"], "mixed")
    table["input_firing_rate"] = np.where(table["sop_dense"] > 0, table["rate_sop"] / table["sop_dense"], np.nan)
    table["sop"] = table["event_sop" if mode == "event" else "rate_sop"].fillna(0.0)
    table = table.sort_values(["first_seq"], kind="stable", ignore_index=True)
    return table[LAYER_COLUMNS]


def _schedule(trace) -> str | None:
    for manifest in trace.manifests.values():
        described = (manifest.get("settings") or {}).get("schedule")
        if described:
            return str(described)
    return None


def _per(rows: pd.DataFrame, keys: list[str], mode: str) -> pd.DataFrame:
    """Per `keys` (rank and step: a batch; stage), the dense MACs, MACs and SOPs charged, each
    layer's SOPs at its rate over the group's calls."""
    sops = _sops(rows, [*keys, *LAYER_KEYS], mode)
    sops = sops.groupby(keys, as_index=False)[["rate_sop", "event_sop"]].sum()
    sops["sop"] = sops["event_sop" if mode == "event" else "rate_sop"]
    macs = rows.groupby(keys, as_index=False)[["mac", "dense_mac"]].sum()
    return macs.merge(sops[[*keys, "sop"]], on=keys, how="left").fillna({"sop": 0.0})


def _batches(sizes: list, rows: pd.DataFrame, mode: str, samples: int | None) -> tuple[pd.DataFrame, list]:
    """One row per batch (rank, recorder step with a forward call of the bound model; `sizes`:
    batch_sizes of the selection): its samples (NeuroBench's, counters/neurobench/batches.py)
    and charged operations."""
    batches = pd.DataFrame([(r, s, np.nan if size is None else size) for r, s, size, _ in sizes],
                           columns=["rank", "step", "samples"])
    if len(rows):
        batches = batches.merge(_per(rows, ["rank", "step"], mode), on=["rank", "step"], how="outer")
    for column in ("mac", "dense_mac", "sop"):
        batches[column] = batches[column].fillna(0.0) if column in batches else 0.0
    notes = []
    known = batches["samples"].notna().all() and len(batches)
    if samples is not None and (not known or batches["samples"].sum() != samples):
        batches["samples"] = samples / max(len(batches), 1)
        notes.append(f"test set: the {samples} samples given are split evenly over the {len(batches)} batches")
    elif not known and len(batches):
        notes.append("test set: some batch has no forward call of the bound model to take its samples from; "
                     "those batches are left out of the spread")
    return batches.sort_values(["rank", "step"], ignore_index=True)[
        ["rank", "step", "samples", "dense_mac", "mac", "sop"]], notes


def activity(trace, *, stage=None, step=None, rank=None, ignore_modules=(), compat=None, strict=False,
             recompute=None, mode: str = "rate", first_layer: str = "per-step", non_spike: str = "mac",
             matmul_rate: str = "left", samples: int | None = None, time_steps: int | None = None) -> Activity:
    """The charged operations of the selection's forward synaptic layers under the options
    (module docstring); `samples` overrides NeuroBench's sample rule, `time_steps` the first
    layer's inferred calls per batch (first_layer="once")."""
    if compat is not None:
        raise ValueError("the paper model has no compat mode (it reproduces papers, not SpikingJelly's counters)")
    options = {"mode": mode, "first_layer": first_layer, "non_spike": non_spike, "matmul_rate": matmul_rate}
    for name, value in options.items():
        choices = OPTIONS[name][0]
        if value not in choices:
            raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    for label, number in (("samples", samples), ("time_steps", time_steps)):
        if number is not None and (isinstance(number, bool) or not isinstance(number, int) or number < 1):
            raise ValueError(f"{label} must be a whole number of at least 1, got {number!r}")
    where = _where(stage=stage, step=step, rank=rank, recompute=recompute)
    rows = map_layers(trace, where, _ignore_names(ignore_modules), pairs=mode == "event")
    rows, decided = _charges(rows, options, time_steps)
    module_where = where  # the same columns select module events
    sizes = batch_sizes(trace.con, module_where)
    counted, notes = sample_count(trace.con, module_where)
    if samples is None:
        samples, source = counted, SAMPLES_RULE
    else:
        notes, source = [], "given"
    batches, batch_notes = _batches(sizes, rows, mode, samples)
    schedule = _schedule(trace)
    convention = {"name": CONVENTION, **options, **decided, "samples_source": source}
    test_set = {"batches": int(len(batches)), "sampled_by_schedule": schedule is not None, "schedule": schedule,
                "steps_recorded": int(sum(m.get("steps_recorded") or 0 for m in trace.manifests.values()))}
    notes = [*notes, *batch_notes, *uncosted_notes(trace, where)]
    if schedule is not None:
        notes.append(f"test set: a schedule ({schedule}) recorded only some batches: the statistics are over those")
    if decided.get("time_steps_source") == "the first layer's calls per batch" and decided["time_steps"] == 1:
        notes.append("first layer once: it ran once per batch, so it is charged as recorded; if that call holds "
                     "every time step (a multi-step layer), give time_steps (--time-steps T)")
    omitted = rows[rows["charged"] == "omitted"]
    if len(omitted):
        notes.append(f"{omitted[LAYER_KEYS].drop_duplicates().shape[0]} layer(s) with non-spike input left out "
                     f"(non_spike=omit): {omitted['dense_mac'].sum():,.0f} dense MACs not charged")
    activity = Activity(_layer_table(rows, mode), batches, samples, convention, test_set, notes)
    if len(rows):
        activity.stages = _per(rows, ["stage"], mode)
    return activity


def _per_sample(value: float, samples: int | None) -> float | None:
    return value / samples if samples else None


@dataclass
class Report:
    """The paper table: per layer, totals, per sample, and the spread over the test set."""

    layers: pd.DataFrame  # LAYER_COLUMNS and energy_pj
    totals: dict[str, float]  # dense_mac, sop, mac, energy_pj, energy_mac_pj, energy_sop_pj
    per_sample: dict[str, float | None]  # dense_mac, sop, mac, energy_pj, energy_mj
    samples: int | None
    convention: dict[str, Any]
    test_set: dict[str, Any]
    batches: pd.DataFrame  # rank, step, samples, dense_mac, mac, sop, energy_pj
    costs: Costs
    warnings: list[str] = field(default_factory=list)
    energy_by_stage: dict[str, float] = field(default_factory=dict)  # stage -> pJ

    @property
    def energy_total_pj(self) -> float:
        return self.totals["energy_pj"]

    def labels(self) -> list[str]:
        """Each layer's name: its scope, and `#index` where one module call runs several (matmuls)."""
        return [scope if index == 1 and kind != "matmul" else f"{scope}#{index}"
                for scope, index, kind in zip(self.layers["scope"], self.layers["index"], self.layers["kind"])]

    @property
    def energy_by_module(self) -> dict[str, float]:
        """Layer name -> pJ (what the plots and the HTML report read of every model)."""
        return dict(zip(self.labels(), self.layers["energy_pj"].astype(float)))

    @property
    def energy_by_module_component(self) -> dict[str, dict[str, float]]:
        return {label: {"mac_pj": float(mac) * self.costs.e_mac_pj, "sop_pj": float(sop) * self.costs.e_ac_pj}
                for label, mac, sop in zip(self.labels(), self.layers["mac"], self.layers["sop"])}

    def to_frame(self) -> pd.DataFrame:
        """Tidy rows (analyze/energy/breakdown.py): total, component, layer, stage, step, count."""
        steps = self.batches.groupby("step")["energy_pj"].sum()
        return breakdown_frame(
            section("total", {"energy_total_pj": self.totals["energy_pj"]}),
            section("component", {"mac_pj": self.totals["energy_mac_pj"], "sop_pj": self.totals["energy_sop_pj"]}),
            section("layer", list(zip(self.labels(), self.layers["energy_pj"].astype(float)))),
            section("stage", self.energy_by_stage),
            section("step", {str(int(k)): float(v) for k, v in steps.items()}),
            section("count", {"dense_mac": self.totals["dense_mac"], "sop": self.totals["sop"],
                              "mac": self.totals["mac"], "samples": self.samples}, "count"))

    def to_json(self) -> dict:
        """The documented document (docs/paper_energy_json.md)."""
        layers = self.layers.astype(object).where(self.layers.notna(), None)
        layers.insert(0, "name", self.labels())
        return {"samples": self.samples, "convention": dict(self.convention),
                "costs": asdict(self.costs), "totals": dict(self.totals), "per_sample": dict(self.per_sample),
                "layers": [{k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}
                           for row in layers.to_dict("records")],
                "test_set": dict(self.test_set), "notes": list(self.warnings)}


def cost(activity: Activity, costs: Costs, *, compat=None, strict=False) -> Report:
    layers = activity.layers.assign(energy_pj=energy_pj(activity.layers["mac"], activity.layers["sop"], costs))
    mac, sop = float(layers["mac"].sum()), float(layers["sop"].sum())
    totals = {"dense_mac": float(layers["dense_mac"].sum()), "sop": sop, "mac": mac,
              "energy_pj": energy_pj(mac, sop, costs),
              "energy_mac_pj": mac * costs.e_mac_pj, "energy_sop_pj": sop * costs.e_ac_pj}
    samples = activity.samples
    per_sample = {key: _per_sample(totals[key], samples) for key in ("dense_mac", "sop", "mac", "energy_pj")}
    per_sample["energy_mj"] = None if per_sample["energy_pj"] is None else per_sample["energy_pj"] * 1e-9
    batches = activity.batches.assign(energy_pj=energy_pj(activity.batches["mac"], activity.batches["sop"], costs))
    test_set = dict(activity.test_set)
    test_set["samples"] = float(batches["samples"].sum()) if batches["samples"].notna().all() else None
    test_set["energy_mj"] = {k: (v * 1e-9 if isinstance(v, float) else v)
                             for k, v in spread(batches["energy_pj"], batches["samples"].fillna(0)).items()}
    for key in ("sop", "mac"):
        test_set[key] = spread(batches[key], batches["samples"].fillna(0))
    stages = activity.stages
    by_stage = dict(zip(stages["stage"].astype(str), energy_pj(stages["mac"], stages["sop"], costs).astype(float)))
    return Report(layers, totals, per_sample, samples, activity.convention, test_set, batches, costs,
                  list(activity.notes), by_stage)


def sweep_totals(activity: Activity, base: Costs, values, *, compat=None) -> pd.DataFrame:
    """energy_total_pj, energy_mac_pj and energy_sop_pj for each index of `values` (preset key
    -> equal-length arrays), every other cost from `base` (recost's bulk path)."""
    unknown = sorted(set(values) - set(PRESET_UNITS))
    if unknown:
        raise ValueError(f"cannot sweep {unknown[0]!r}: the paper model's keys are {', '.join(PRESET_UNITS)}")
    n = len(next(iter(values.values()))) if values else 1
    cost_of = {key: np.broadcast_to(np.asarray(values.get(key, getattr(base, key)), dtype=float), (n,))
               for key in PRESET_UNITS}
    mac = float(activity.layers["mac"].sum()) * cost_of["e_mac_pj"]
    sop = float(activity.layers["sop"].sum()) * cost_of["e_ac_pj"]
    return pd.DataFrame({"energy_total_pj": mac + sop, "energy_mac_pj": mac, "energy_sop_pj": sop})
