"""SpikeSim energy, SpikingJelly 2.0.0's estimate_spikesim_energy, plus SpikeSim's area and latency.

    from spiketrace.analyze.energy import energy
    report = energy(trace, "spikesim", "spikesim-rram-64")                      # dense mode
    report = energy(trace, "spikesim", "spikesim-sram-64", overrides=["activity_mode=event", "xbar_size=128"])
    report.energy_total_pj, report.energy_by_stage, report.area_mm2, report.latency_ms

SpikeSim (Moitra et al., TCAD 2023; github.com/Intelligent-Computing-Lab-Yale/SpikeSim at
c2627bc) maps each Conv2d layer onto crossbars of xbar_size rows. SpikingJelly's port costs
the Conv2d forward inference calls: dense mode from shapes alone (equal to SpikeSim's own
code), event mode from where the input spikes fall (SpikingJelly-defined). A SpikeSim
"stage" is a Conv2d layer, named by its scope, as in SpikingJelly's report; the trace stage
to analyse is the `stage=` argument.

Event mode needs the conv inputs' spike maps: record with Recorder(..., keep_binary_inputs=True).
The mapper is mapper.py, the formulas cost.py.

Beyond SpikingJelly:
* strict=False (the default; SpikingJelly's is True) costs the supported layers and lists the
  rest in `unsupported` with their volumes; strict=True refuses where SpikingJelly refuses.
* `area_mm2` and `latency_ms`: SpikeSim's compute_area and latency_gen over the costed layers
  (its VGG9 / CIFAR-10, T=5, 64x64 RRAM configuration gives 8.43 mm2 and 62.8 ms).
* Linear layers (SpikeSim does not model them) are warned about and listed.
* A stage called with inconsistent shapes costs each call with its own geometry
  (compat="spikingjelly": the first call's, as SpikingJelly does).
* An eval-mode forward recorded with grad enabled is costed as inference, with a warning
  (compat="spikingjelly" and strict=True refuse it, as SpikingJelly's counter does).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import pandas as pd

from spiketrace.analyze.energy.spikesim import cost as formulas
from spiketrace.analyze.energy.spikesim.mapper import KEEP_SETTING, Activity, map_trace
from spiketrace.analyze.energy.spikesim.sweep import PJ_FIELDS as _PJ_FIELDS
from spiketrace.analyze.energy.spikesim.sweep import SWEEPABLE, linear_totals  # noqa: F401 (SWEEPABLE: recost's bulk keys)

MODEL = "spikesim"
_AREA_UM2 = ("rram_xbar_um2", "sram_xbar_um2", "temp_buffer_um2", "sub_um2", "adc_um2", "htree_um2", "mux_um2")
PRESET_UNITS: dict[str, str] = {
    "xbar_size": "1", "device": "str", "activity_mode": "str", "require_if_lif_neurons": "bool",
    **{name: "pJ" for name in _PJ_FIELDS},
    **{f"area.{name}": "um2" for name in _AREA_UM2},
    "area.sram_bit_um2": "um2/bit", "area.tile_buffer_bits": "bit", "area.buffer_bits_per_element": "bit",
    "area.pe_per_tile": "1", "area.neuron_memory_layers": "1",
    "latency.clock_mhz": "MHz", "latency.pe_cycle_clocks": "cycle", "latency.pipeline_fraction": "1",
}
SOURCE_URLS = ("https://doi.org/10.1109/TCAD.2023.3274918",
               "https://github.com/Intelligent-Computing-Lab-Yale/SpikeSim/commit/c2627bc091a47bdcb630ca6207eaf44a00bd1da4")


def _count(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not float(value).is_integer() or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _number(name: str, value, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0 \
            or (positive and value == 0):
        raise ValueError(f"{name} must be finite and {'positive' if positive else 'nonnegative'}, got {value!r}")
    return float(value)


def _from_tree(cls, values: Mapping[str, Any], prefix: str):
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"unknown key {prefix + unknown[0]!r} for the spikesim model "
                         f"(known: {', '.join(k for k in PRESET_UNITS if k.startswith(prefix))})")
    return cls(**dict(values))


@dataclass(frozen=True)
class AreaCosts:
    """SpikeSim compute_area constants (ela_spikesim.py, c2627bc), in um2."""

    rram_xbar_um2: float = 26.2144
    sram_xbar_um2: float = 671.089
    sram_bit_um2: float = 0.7391
    tile_buffer_bits: int = 64 * 128
    temp_buffer_um2: float = 484.643999
    sub_um2: float = 13411.41498
    adc_um2: float = 693.633
    htree_um2: float = 216830 * 2
    mux_um2: float = 45.9
    pe_per_tile: int = 8
    buffer_bits_per_element: int = 22
    neuron_memory_layers: int = 5  # SpikeSim counts the outputs of its first five layers only

    def __post_init__(self) -> None:
        for name in _AREA_UM2 + ("sram_bit_um2",):
            object.__setattr__(self, name, _number(f"area.{name}", getattr(self, name)))
        for name, least in (("tile_buffer_bits", 0), ("pe_per_tile", 1), ("buffer_bits_per_element", 0),
                            ("neuron_memory_layers", 0)):
            object.__setattr__(self, name, _count(f"area.{name}", getattr(self, name), least))


@dataclass(frozen=True)
class LatencyCosts:
    """SpikeSim latency_gen constants: a PE cycle of 26 clocks at 250 MHz, 75 % pipelining."""

    clock_mhz: float = 250.0
    pe_cycle_clocks: float = 26.0
    pipeline_fraction: float = 0.75

    def __post_init__(self) -> None:
        object.__setattr__(self, "clock_mhz", _number("latency.clock_mhz", self.clock_mhz, positive=True))
        object.__setattr__(self, "pe_cycle_clocks", _number("latency.pe_cycle_clocks", self.pe_cycle_clocks))
        fraction = _number("latency.pipeline_fraction", self.pipeline_fraction)
        if fraction > 1:
            raise ValueError(f"latency.pipeline_fraction must be in [0, 1], got {fraction}")
        object.__setattr__(self, "pipeline_fraction", fraction)


@dataclass(frozen=True)
class Costs:
    """SpikingJelly's SpikeSimEnergyConfig (same field names and defaults), plus SpikeSim's
    area and latency constants."""

    xbar_size: int = 64
    device: str = "rram"
    activity_mode: str = "dense"
    require_if_lif_neurons: bool = True
    tile_buffer_pj: float = 397.0
    temp_buffer_pj: float = 0.2
    sub_pj: float = 1.15e-6
    adc_pj: float = 2.03084
    htree_pj: float = 19.64 * 8.0
    mux_pj: float = 0.094245
    mem_fetch_pj: float = 4.64
    neuron_pj: float = 1.274 * 4.0
    rram_xbar_pj: float = 1.76423
    sram_xbar_pj: float = 671.089
    area: AreaCosts = field(default_factory=AreaCosts)
    latency: LatencyCosts = field(default_factory=LatencyCosts)

    def __post_init__(self) -> None:
        object.__setattr__(self, "xbar_size", _count("xbar_size", self.xbar_size, 1))
        if self.device not in ("rram", "sram"):
            raise ValueError(f"device must be 'rram' or 'sram', got {self.device!r}")
        if self.activity_mode not in ("dense", "event"):
            raise ValueError(f"activity_mode must be 'dense' or 'event', got {self.activity_mode!r}")
        if not isinstance(self.require_if_lif_neurons, bool):
            raise ValueError(f"require_if_lif_neurons must be true or false, got {self.require_if_lif_neurons!r}")
        for name in _PJ_FIELDS:
            object.__setattr__(self, name, _number(name, getattr(self, name)))

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> Costs:
        values = dict(values)
        area = values.pop("area", {})
        latency = values.pop("latency", {})
        for name, table in (("area", area), ("latency", latency)):
            if not isinstance(table, Mapping):
                raise ValueError(f"{name} must be a table of parameters, got {table!r}")
        unknown = sorted(set(values) - set(SPIKINGJELLY_FIELDS))
        if unknown:
            raise ValueError(f"unknown key {unknown[0]!r} for the spikesim model (known: {', '.join(PRESET_UNITS)})")
        return cls(**values, area=_from_tree(AreaCosts, area, "area."),
                   latency=_from_tree(LatencyCosts, latency, "latency."))

    def spikingjelly(self) -> dict[str, Any]:
        """The fields of SpikingJelly's SpikeSimEnergyConfig."""
        return {name: getattr(self, name) for name in SPIKINGJELLY_FIELDS}


SPIKINGJELLY_FIELDS = tuple(f.name for f in fields(Costs) if f.name not in ("area", "latency"))


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
        rows = [("total", "energy_total_pj", self.energy_total_pj, None, None, "pJ"),
                ("total", "area_mm2", None, None, self.area_mm2, "mm2"),
                ("total", "latency_ms", None, None, self.latency_ms, "ms")]
        rows += [("component", k, v, None, None, "pJ") for k, v in self.breakdown_pj.items()]
        rows += [("stage", k, v, None, None, "pJ") for k, v in self.energy_by_stage.items()]
        rows += [(name, k, v, None, None, "pJ") for name, values in (("step", self.energy_by_step),
                 ("rank", self.energy_by_rank)) for k, v in values.items()]
        rows += [("area", k, None, None, v, "um2" if k.endswith("_um2") else "1") for k, v in self.area_breakdown_um2.items()]
        rows += [("count", k, None, v, None, "1") for k, v in self.counts.items()]
        rows += [("unsupported", f"{u['kind']}:{u['scope']}", None, u["calls"], u.get("macs"), "MAC")
                 for u in self.unsupported]
        return pd.DataFrame(rows, columns=["breakdown", "key", "pj", "count", "value", "unit"])

    def to_json(self) -> dict:
        document = asdict(self)
        document["config"] = {**self.config.spikingjelly(), "area": asdict(self.config.area),
                              "latency": asdict(self.config.latency)}
        return document


def activity(trace, *, stage=None, step=None, rank=None, ignore_modules=(), compat=None, strict=False,
             packed_inputs: bool = True, recompute=None, **options) -> Activity:
    """Map the trace's Conv2d calls (and neurons, Linear layers) of `stage`, `step`, `rank` (a
    value or a list each; all when None). packed_inputs=False skips loading the spike maps
    (dense mode only then). `recompute="exclude"` leaves out the calls activation checkpointing
    recomputed during backward (included by default: they ran); "only" keeps just them."""
    if options:
        raise TypeError(f"the spikesim model takes no options {sorted(options)}")
    if compat not in (None, "spikingjelly"):
        raise ValueError(f"compat must be None or 'spikingjelly', got {compat!r}")
    from spiketrace.analyze.counters import _ignore_names, _where
    from spiketrace.analyze.counters.engine import ignored_scopes_sql

    where = _where(stage=stage, step=step, rank=rank, recompute=recompute)
    names = _ignore_names(ignore_modules)
    listed = "[" + ", ".join("'" + n.replace("'", "''") + "'" for n in names) + "]"
    not_ignored = "" if not names else f"""AND NOT EXISTS (SELECT 1 FROM modules a WHERE a.rank = m.rank AND a.in_model
        AND (m.path = a.path OR starts_with(m.path, a.path || '.'))
        AND (list_has_any(a.mro, {listed}) OR list_contains({listed}, a.class_name) OR list_contains({listed}, a.path)))"""
    return map_trace(trace, where=where, ignore_scopes_sql=ignored_scopes_sql(names, None) if names else None,
                     not_ignored_modules=not_ignored, load_packed=packed_inputs)


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


def sweep_totals(activity: Activity, base: Costs, values, *, compat=None) -> pd.DataFrame:
    """recost's bulk path: energy_total_pj of each preset of a sweep of pJ parameters (sweep.py)."""
    return linear_totals(cost, activity, base, values, compat=compat)[["energy_total_pj"]]


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
