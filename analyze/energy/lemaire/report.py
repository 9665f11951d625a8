"""Lemaire costing: activity x LemaireCosts -> pJ, in either convention.

spikingjelly (SpikingJelly 2.0.0 LemaireEnergyProfiler.get_report):
    ops_pj        = ac * e_add + mac * (e_mul + e_add)
    addressing_pj = acc_addr * e_add + mac_addr * (e_mul + e_add)
    memory_pj     = sum over accesses of bytes * pj_per_byte(capacity of the buffer hit),
                    pj_per_byte piecewise linear through the breakpoints, clamped at both ends;
                    the SNN FIFO holds snn_fifo_capacity_elements 4-byte words.
qualia (Qualia 2.6.0 EnergyEstimationMetric, per inference):
    every memory access of a word costs e_ram(n) = ram_slope * n * mem_width + ram_floor
    (or bus_access / (bus_width // mem_width) with sram_estimation = "new"), n the elements of
    the memory hit; adds cost e_add, MACs e_mul + e_add, the Hybrid layer's leak e_mul.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from spiketrace.analyze.energy.breakdown import breakdown_frame, section
from spiketrace.analyze.energy.lemaire.costs import LemaireCosts
from spiketrace.analyze.energy.lemaire.mapper import LemaireActivity
from spiketrace.analyze.energy.lemaire.sql import ACCESSES, WORD_BYTES

BUFFER_OF = {"read_in_bytes": "inout", "write_out_bytes": "inout", "read_params_bytes": "params",
             "read_potential_bytes": "potential", "write_potential_bytes": "potential"}
SPIKINGJELLY_MODEL_INFO = {
    "model_id": "lemaire_2022_runtime_v1", "fidelity": "paper",
    "source_urls": ["https://arxiv.org/abs/2210.13107", "https://doi.org/10.1007/978-3-031-30105-6_48"],
    "technology_nm": 45, "precision": "32-bit integer operations and 32-bit SRAM accesses",
    "scope": "runtime Conv/Linear forward inference under the Lemaire analytical model",
}
QUALIA_MODEL_INFO = {
    "model_id": "lemaire_qualia_2.6", "fidelity": "reference-code",
    "source_urls": ["https://arxiv.org/abs/2210.13107", "https://pypi.org/project/qualia-plugin-snn/2.6.0/"],
    "technology_nm": 45, "precision": "mem_width-bit memory words (see config)",
    "scope": "per-inference SNN energy of Linear/Conv1d/Conv2d layers as Qualia's EnergyEstimationMetric costs it",
}


@dataclass
class LemaireReport:
    """SpikingJelly's LemaireEnergyReport fields (total_pj, breakdown_pj, counts,
    buffer_sizes_bytes, warnings, model_info, config), plus per-stage, per-module and
    per-module-component energies. Under convention "qualia" the energies and counts are per
    inference (per sample, all timesteps) and counts are word accesses, as Qualia reports them."""

    total_pj: float
    breakdown_pj: dict[str, float]
    counts: dict[str, float]
    buffer_sizes_bytes: dict[str, int]
    warnings: list[str]
    model_info: dict[str, Any]
    config: dict[str, Any]
    convention: str = "spikingjelly"
    energy_by_stage: dict[str, float] = field(default_factory=dict)
    energy_by_module: dict[str, float] = field(default_factory=dict)
    energy_by_module_component: dict[str, dict[str, float]] = field(default_factory=dict)
    # recorder step / rank -> pJ, summing to the total; empty under "qualia", whose energy is
    # per inference from spike rates pooled over all calls, so it has no share per step or rank
    energy_by_step: dict[str, float] = field(default_factory=dict)
    energy_by_rank: dict[str, float] = field(default_factory=dict)

    def to_frame(self) -> pd.DataFrame:
        """Tidy rows (analyze/energy/breakdown.py): total, component, stage, step, rank, module,
        count and buffer (sizes in bytes, in the count column)."""
        return breakdown_frame(
            section("total", {"total_pj": self.total_pj}),
            *(section(name, values) for name, values in (
                ("component", self.breakdown_pj), ("stage", self.energy_by_stage), ("step", self.energy_by_step),
                ("rank", self.energy_by_rank), ("module", self.energy_by_module))),
            section("count", self.counts, "count"), section("buffer", self.buffer_sizes_bytes, "count"))

    def to_json(self) -> dict:
        return asdict(self)


def _config(costs: LemaireCosts, strict: bool) -> dict[str, Any]:
    """The LemaireEnergyConfig layout (strict, cost_config, snn_fifo_capacity_elements) plus ours."""
    document = asdict(costs)
    return {"strict": strict, "snn_fifo_capacity_elements": costs.snn_fifo_capacity_elements,
            "cost_config": {k: document[k] for k in ("e_add_pj", "e_mul_pj")}
            | {"memory_breakpoints": [list(p) for p in costs.memory_breakpoints]},
            "convention": costs.convention,
            "qualia": {k.removeprefix("qualia_"): v for k, v in document.items() if k.startswith("qualia_")}}


def cost(activity: LemaireActivity, costs: LemaireCosts, *, compat=None, strict=False) -> LemaireReport:
    if compat not in (None, "spikingjelly", "qualia"):
        raise ValueError(f"lemaire: unknown compat {compat!r}; choose None, 'spikingjelly' or 'qualia'")
    if costs.convention not in activity.conventions:
        raise ValueError(f"this activity was mapped for {activity.conventions}, not the {costs.convention!r} convention")
    if costs.convention == "qualia":
        if strict and activity.qualia_warnings:
            raise ValueError(activity.qualia_warnings[0])
        return _qualia_cost(activity, costs, strict)
    if strict and activity.unsupported:  # SpikingJelly's strict validate_model refusal, its message
        raise ValueError(f"Lemaire formulas do not support {activity.unsupported[0]}; its energy is omitted.")
    return _spikingjelly_cost(activity, costs, strict)


def _spikingjelly_cost(activity: LemaireActivity, costs: LemaireCosts, strict: bool) -> LemaireReport:
    calls, accesses = activity.calls, activity.accesses
    add, mac_pj = costs.e_add_pj, costs.e_mul_pj + costs.e_add_pj
    totals = {q: int(calls[q].sum()) for q in ("synop", "mac", "ac", "acc_addr", "mac_addr")}
    fifo_bytes = costs.snn_fifo_capacity_elements * WORD_BYTES
    capacity = accesses["capacity_bytes"].astype("Float64").fillna(fifo_bytes).to_numpy(dtype=float)
    priced = accesses.assign(capacity=capacity, buffer=accesses["access"].map(BUFFER_OF),
                             pj=accesses["bytes"].to_numpy(dtype=float) * costs.memory_cost_pj(capacity))
    memory = priced.groupby("buffer")["pj"].sum()
    inout, params, potential = (float(memory.get(b, 0.0)) for b in ("inout", "params", "potential"))
    ops_pj = totals["ac"] * add + totals["mac"] * mac_pj
    addressing_pj = totals["acc_addr"] * add + totals["mac_addr"] * mac_pj
    memory_pj = inout + params + potential
    moved = priced.groupby("access")["bytes"].sum()
    buffers = priced.groupby("buffer")["capacity"].max()
    call_pj = calls.assign(ops_pj=calls["ac"] * add + calls["mac"] * mac_pj,
                           addressing_pj=calls["acc_addr"] * add + calls["mac_addr"] * mac_pj)
    where = ["rank", "step", "stage", "module"]
    components = pd.concat([
        call_pj.melt(id_vars=where, value_vars=["ops_pj", "addressing_pj"], var_name="component", value_name="pj"),
        priced.assign(component=priced["buffer"] + "_pj")[[*where, "component", "pj"]],
    ], ignore_index=True)
    return LemaireReport(
        total_pj=ops_pj + addressing_pj + memory_pj,
        breakdown_pj={"ops_pj": ops_pj, "addressing_pj": addressing_pj, "memory_pj": memory_pj,
                      "inout_pj": inout, "params_pj": params, "potential_pj": potential},
        counts={"synop": totals["synop"], "mac": totals["mac"], "ac": totals["ac"],
                **{name: int(moved.get(name, 0)) for name in ACCESSES},
                "acc_addr": totals["acc_addr"], "mac_addr": totals["mac_addr"]},
        buffer_sizes_bytes={f"{b}_buffer_bytes": int(buffers.get(b, 0)) for b in ("inout", "params", "potential")},
        warnings=list(activity.warnings),
        model_info=dict(SPIKINGJELLY_MODEL_INFO),
        config=_config(costs, strict),
        convention="spikingjelly",
        energy_by_stage={str(k): float(v) for k, v in components.groupby("stage")["pj"].sum().items()},
        energy_by_module={str(k): float(v) for k, v in components.groupby("module")["pj"].sum().items()},
        energy_by_module_component={
            str(module): {str(c): float(v) for c, v in group.groupby("component")["pj"].sum().items()}
            for module, group in components.groupby("module")},
        energy_by_step={str(int(k)): float(v) for k, v in components.groupby("step")["pj"].sum().items()},
        energy_by_rank={str(int(k)): float(v) for k, v in components.groupby("rank")["pj"].sum().items()},
    )


QUALIA_COUNTS = {("ops", "add"): "ac", ("ops", "mac"): "mac", ("ops", "mul"): "mul", ("addr", "add"): "acc_addr",
                 ("addr", "mac"): "mac_addr", ("mem_io", "read"): "read_in", ("mem_io", "write"): "write_out",
                 ("mem_weights", "read"): "read_weights", ("mem_bias", "read"): "read_bias",
                 ("mem_pot", "read"): "read_potential", ("mem_pot", "write"): "write_potential"}
QUALIA_BUFFER_OF = {"mem_io": "inout", "mem_weights": "params", "mem_bias": "params", "mem_pot": "potential"}


def _qualia_cost(activity: LemaireActivity, costs: LemaireCosts, strict: bool) -> LemaireReport:
    terms = activity.qualia_terms
    assert terms is not None  # mapped for the qualia convention: cost() checked
    memory = terms["memory"].astype(float).fillna(float(costs.snn_fifo_capacity_elements)).to_numpy()
    per_op = {"add": costs.e_add_pj, "mac": costs.e_mul_pj + costs.e_add_pj, "mul": costs.e_mul_pj}
    unit = np.where(terms["kind"].isin(["read", "write"]), costs.e_ram_pj(memory),
                    terms["kind"].map(per_op).fillna(0.0).to_numpy(dtype=float))
    priced = terms.assign(pj=terms["count"].to_numpy(dtype=float) * unit, memory=memory)
    by_component = priced.groupby("component")["pj"].sum()
    part = {c: float(by_component.get(c, 0.0)) for c in ("ops", "addr", "mem_pot", "mem_weights", "mem_bias", "mem_io")}
    memory_pj = part["mem_pot"] + part["mem_weights"] + part["mem_bias"] + part["mem_io"]
    counted = priced.groupby(["component", "kind"])["count"].sum()
    stored = priced[priced["kind"].isin(["read", "write"])].assign(buffer=lambda f: f["component"].map(QUALIA_BUFFER_OF))
    widest = stored.groupby("buffer")["memory"].max()
    word = costs.qualia_mem_width_bits / 8
    warnings = list(activity.qualia_warnings)
    if not len(terms):
        warnings.append("qualia: no Linear/Conv layer was selected: the Lemaire energy is 0")
    warnings += activity.state_warnings
    return LemaireReport(
        total_pj=part["ops"] + part["addr"] + memory_pj,
        breakdown_pj={"ops_pj": part["ops"], "addressing_pj": part["addr"], "memory_pj": memory_pj,
                      "inout_pj": part["mem_io"], "params_pj": part["mem_weights"] + part["mem_bias"],
                      "potential_pj": part["mem_pot"], "weights_pj": part["mem_weights"], "bias_pj": part["mem_bias"]},
        counts={name: float(counted.get(key, 0.0)) for key, name in QUALIA_COUNTS.items()},
        buffer_sizes_bytes={f"{b}_buffer_bytes": math.ceil(widest.get(b, 0.0) * word)
                            for b in ("inout", "params", "potential")},
        warnings=warnings,
        model_info=dict(QUALIA_MODEL_INFO),
        config=_config(costs, strict) | {"timesteps": activity.timesteps},
        convention="qualia",
        energy_by_module={str(k): float(v) for k, v in priced.groupby("module", sort=False)["pj"].sum().items()},
        energy_by_module_component={
            str(module): {str(c): float(v) for c, v in group.groupby("component")["pj"].sum().items()}
            for module, group in priced.groupby("module", sort=False)},
    )
