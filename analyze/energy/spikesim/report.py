"""SpikeSim costing: activity x Costs -> Report. Which convolutions are costed and their
counts, energies, area and latency are formulas.py's; this module decides what is refused or
warned about (compat, strict), adds the energies up by stage, step, rank and module, and lists
the layers it does not cost.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import pandas as pd

from spiketrace.analyze.energy.breakdown import COLUMNS as BREAKDOWN_COLUMNS
from spiketrace.analyze.energy.breakdown import breakdown_frame, section
from spiketrace.analyze.energy.spikesim import formulas
from spiketrace.analyze.energy.spikesim.costs import Costs
from spiketrace.analyze.energy.spikesim.mapper import KEEP_SETTING, Activity

COLUMNS = (*BREAKDOWN_COLUMNS, "value", "unit")  # to_frame's: value holds what is not pJ, in unit

SOURCE_URLS = ("https://doi.org/10.1109/TCAD.2023.3274918",
               "https://github.com/Intelligent-Computing-Lab-Yale/SpikeSim/commit/c2627bc091a47bdcb630ca6207eaf44a00bd1da4")


@dataclass
class Report:
    """SpikingJelly's SpikeSimEnergyReport fields (model_info as a dict, config as Costs),
    then what SpikeSim's own code adds (area, latency) and what was not costed."""

    energy_total_pj: float
    energy_by_stage: dict[str, float]  # SpikeSim stage = Conv2d layer scope
    energy_by_component: dict[str, Any]
    event_stats_by_stage: dict[str, dict[str, Any]]
    stage_metadata: dict[str, dict[str, Any]]
    warnings: list[str]
    breakdown_pj: dict[str, float]
    counts: dict[str, int]
    model_info: dict[str, Any]
    config: Costs
    area_mm2: float = 0.0
    latency_ms: float = 0.0
    area_breakdown_um2: dict[str, float] = field(default_factory=dict)
    latency_detail: dict[str, Any] = field(default_factory=dict)
    # one entry per layer not costed: kind (conv / linear / neuron), scope, class_name, reason, calls, macs, output_elements
    unsupported: list[dict[str, Any]] = field(default_factory=list)
    energy_by_module: dict[str, float] = field(default_factory=dict)
    energy_by_module_component: dict[str, dict[str, float]] = field(default_factory=dict)
    energy_by_step: dict[str, float] = field(default_factory=dict)  # recorder step -> pJ; sums to the total
    energy_by_rank: dict[str, float] = field(default_factory=dict)  # rank -> pJ; sums to the total

    def to_frame(self) -> pd.DataFrame:
        """Tidy rows (analyze/energy/breakdown.py) with a `value` (area, latency, MACs) and a
        `unit` column: breakdown total/component/stage/step/rank/area/count/unsupported."""
        area = [{"breakdown": "area", "key": k, "value": v, "unit": "um2" if k.endswith("_um2") else "1"}
                for k, v in self.area_breakdown_um2.items()]
        unsupported = [{"breakdown": "unsupported", "key": f"{u['kind']}:{u['scope']}", "count": u["calls"],
                        "value": u.get("macs"), "unit": "MAC"} for u in self.unsupported]
        return breakdown_frame(
            section("total", {"energy_total_pj": self.energy_total_pj}, unit="pJ"),
            section("total", {"area_mm2": self.area_mm2}, "value", unit="mm2"),
            section("total", {"latency_ms": self.latency_ms}, "value", unit="ms"),
            *(section(name, values, unit="pJ") for name, values in (
                ("component", self.breakdown_pj), ("stage", self.energy_by_stage), ("step", self.energy_by_step),
                ("rank", self.energy_by_rank))),
            area, section("count", self.counts, "count", unit="1"), unsupported, columns=COLUMNS)

    def to_json(self) -> dict:
        document = asdict(self)
        document["config"] = {**self.config.spikingjelly(), "area": asdict(self.config.area),
                              "latency": asdict(self.config.latency)}
        return document


def _neuron_check(modules: pd.DataFrame) -> tuple[str | None, pd.DataFrame]:
    bad = modules[modules["neuron"] & ~modules["if_lif"]]
    if not len(bad):
        return None, bad
    names = [p.split(".", 1)[1] if "." in p else c for p, c in zip(bad["path"], bad["class_name"])]
    details = ", ".join(f"{n} ({c})" for n, c in zip(names, bad["class_name"]))
    return f"SpikeSim assumes IF/LIF neuronal modules. Unsupported neuron modules found: {details}.", bad


def _require_spike_maps(calls: pd.DataFrame, act: Activity) -> None:
    unknown = calls[calls["x_binary"].isna()]
    if len(unknown):
        raise ValueError(f"{act.trace_path}: event mode needs to know whether each conv input is binary, but "
                         f"{len(unknown)} calls (first: {unknown['scope'].iloc[0]}) have no tensors.is01: record "
                         "with Recorder(..., value_statistics=True)")
    binary = calls[calls["x_binary"].astype(bool)]
    missing = binary[act.packed[binary.index].isna()]
    if len(missing):
        why = ("the trace was recorded without it" if not act.keeps_binary_inputs
               else "they were not loaded or are absent from packed_inputs")
        raise ValueError(
            f"{act.trace_path}: SpikeSim event mode needs the bit-packed spike maps of binary Conv2d inputs "
            f"(table packed_inputs), but {len(missing)} of {len(binary)} binary-input calls lack them "
            f"(first: {missing['scope'].iloc[0]}); {why}. Record with Recorder(..., {KEEP_SETTING}=True), "
            "or cost in dense mode (activity_mode = \"dense\").")


def cost(activity: Activity, costs: Costs, *, compat=None, strict=False) -> Report:
    act, sj = activity, compat == "spikingjelly"
    calls = formulas.classify(act.calls, refuse_grad=sj or strict)
    modules = act.modules
    if not sj and "foreign_neuron" in modules:  # snnTorch/Norse neurons: SpikingJelly knows none of them
        modules = modules.assign(neuron=modules["neuron"] | modules["foreign_neuron"],
                                 if_lif=modules["if_lif"] | modules["foreign_if_lif"])
    root = modules[modules["is_root"]]
    training = bool(root["training"].fillna(False).any())
    if training and strict:
        raise ValueError(formulas.TRAINING_MESSAGE)
    neuron_message, bad_neurons = _neuron_check(modules) if costs.require_if_lif_neurons else (None, modules[:0])
    if neuron_message and strict:
        raise ValueError(neuron_message)

    costed = calls[calls["reject"] == ""].copy()
    # a stage's later call with another geometry than its first (SpikeSimCounter's shape check)
    signature = formulas.GEOMETRY + ["out_channels"]
    costed["mismatch"] = (costed[signature] != costed.groupby("scope", sort=False)[signature].transform("first")).any(axis=1)
    # SpikeSimCounter's warnings: once per (key, scope), in op order; strict raises the first.
    notes = pd.concat([calls.loc[calls["reject"] != "", ["rank", "seq", "scope", "reject"]],
                       costed.loc[costed["mismatch"], ["rank", "seq", "scope"]].assign(reject="shape-mismatch")])
    notes = notes.assign(key=notes["reject"] + ":" + notes["scope"]).sort_values(["rank", "seq"])
    notes = notes.drop_duplicates("key")
    messages = [formulas.mismatch_message(row.scope, sj) if row.reject == "shape-mismatch"
                else formulas.reject_message(row.reject, calls.loc[row.Index]) for row in notes.itertuples()]
    if strict and messages:
        raise NotImplementedError(messages[0])

    event_calls = event_tiles = None
    if costs.activity_mode == "event":
        _require_spike_maps(costed, act)
        event_calls, event_tiles = act.event_counts(costs.xbar_size)
        binary = costed["x_binary"].astype(bool)
        event_calls = event_calls[event_calls.index.isin(costed.index[binary])]
    counts, tiles = formulas.call_counts(costed, costs.xbar_size, event_calls, event_tiles)
    stats, metadata = formulas.stage_tables(costed, counts, tiles, costs)
    per_call = formulas.per_call_energy(costed, counts, tiles, costs)
    if sj:
        by_stage = {s: formulas.stage_energy_spikingjelly(stats[s], metadata[s], costs) for s in stats}
    else:
        energies = per_call.groupby(costed["scope"], sort=False).sum()
        by_stage = {s: {**{c: float(v) for c, v in energies.loc[s].items()}, "total_pj": float(energies.loc[s].sum())}
                    for s in stats}
    by_step, by_rank = formulas.energy_by_call_group(costed, per_call.sum(axis=1),
                                                    {s: b["total_pj"] for s, b in by_stage.items()})
    totals: dict[str, float] = {}
    for breakdown in by_stage.values():
        for key, value in breakdown.items():
            if key != "total_pj":
                totals[key] = totals.get(key, 0.0) + value
    energy_by_stage = {s: b["total_pj"] for s, b in by_stage.items()}
    total_pj = float(sum(energy_by_stage.values()))

    warnings = ([neuron_message] if neuron_message else []) + messages
    if not energy_by_stage:
        if strict:
            raise ValueError(formulas.EMPTY_MESSAGE)
        warnings.append(formulas.EMPTY_MESSAGE)
    if training:
        warnings.insert(0, formulas.TRAINING_MESSAGE)
    unsupported = _unsupported(calls, modules, bad_neurons)
    if not sj:
        warnings += formulas.extra_warnings(costed, unsupported)
    warnings += act.warnings  # energy/stateful.py's: stateful modules it leaves uncosted

    table = formulas.layers(costed)
    area = formulas.area_um2(table, costs)
    timing = formulas.latency(table, costs)
    dense = costs.activity_mode == "dense"
    return Report(
        energy_total_pj=total_pj,
        energy_by_stage=energy_by_stage,
        energy_by_component={"totals": {**totals, "total_pj": total_pj}, "by_stage": by_stage},
        event_stats_by_stage=stats,
        stage_metadata=metadata,
        warnings=warnings,
        breakdown_pj=totals,
        counts={"dense_pe_cycle_count": int(counts["pe_cycles"].sum()), "stage_count": len(metadata)},
        model_info={
            "model_id": "spikesim_c2627bc_dense_v1" if dense else "spikingjelly_spikesim_event_v1",
            "fidelity": "reference-code" if dense else "spikingjelly-defined",
            "source_urls": SOURCE_URLS, "technology_nm": 65,
            "precision": "SpikeSim crossbar and IF/LIF peripheral assumptions",
            "scope": "runtime Conv2d inference PE-cycle energy",
        },
        config=costs,
        area_mm2=area["total_um2"] / 1e6,
        latency_ms=timing["latency_ns"] / 1e6,
        area_breakdown_um2=area,
        latency_detail=timing,
        unsupported=unsupported,
        energy_by_module=dict(energy_by_stage),
        energy_by_module_component={s: {k: v for k, v in b.items() if k != "total_pj"} for s, b in by_stage.items()},
        energy_by_step=by_step,
        energy_by_rank=by_rank,
    )


def _unsupported(calls: pd.DataFrame, modules: pd.DataFrame, bad_neurons: pd.DataFrame) -> list[dict]:
    """Layers not costed, with their volume: convolution calls refused (MACs as the op would
    do them), Linear layers (SpikeSim has no model for them) and non-IF/LIF neurons."""
    rows = []
    rejected = calls[calls["reject"] != ""]
    for (scope, why), group in rejected.groupby(["scope", "why"], sort=False):
        rows.append({"kind": "conv", "scope": scope, "class_name": str(group["scope_class"].iloc[0]),
                     "reason": why, "calls": len(group), "macs": int(group["macs"].sum()),
                     "output_elements": int(group["out_numel"].fillna(0).sum())})
    for row in modules[modules["linear"] & (modules["calls"] > 0)].itertuples():
        rows.append({"kind": "linear", "scope": row.scope, "class_name": row.class_name,
                     "reason": "SpikeSim does not model Linear layers", "calls": int(row.calls),
                     "macs": int(row.output_elements * (row.in_features or 0)), "output_elements": int(row.output_elements)})
    for row in bad_neurons.itertuples():
        rows.append({"kind": "neuron", "scope": row.scope, "class_name": row.class_name,
                     "reason": "not an IF/LIF neuron", "calls": int(row.calls), "macs": None,
                     "output_elements": int(row.output_elements)})
    return rows
