"""Lemaire totals under many presets at once: report.py's arithmetic as arrays over presets.

The activity is first summed into what the preset prices: the op counts, and the bytes (or,
in Qualia's convention, the word accesses) per memory size hit, the SNN FIFO apart (its size
is a preset parameter). Each preset is then a row of parameters:

* spikingjelly: ops and addressing are counts x (e_add, e_mul + e_add); memory is bytes x
  the preset's piecewise-linear pJ/byte at each buffer's capacity (the FIFO's
  snn_fifo_capacity_elements words), evaluated for every preset and capacity at once;
* qualia: adds, MACs and muls x their costs; every read or write costs e_ram of the memory it
  hits, ram_slope * elements * mem_width + ram_floor ("old"), or bus_access / (bus_width //
  mem_width) ("new").

The result equals report.py's cost() preset by preset (tests/test_recost_bulk.py).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from spiketrace.analyze.energy.lemaire.costs import LemaireCosts
from spiketrace.analyze.energy.lemaire.sql import WORD_BYTES

# The numeric keys (recost costs a sweep of convention or qualia.sram_estimation preset by preset).
SWEEPABLE = ("e_add_pj", "e_mul_pj", "snn_fifo_capacity_elements", "memory_breakpoints.*", "qualia.mem_width",
             "qualia.ram_slope", "qualia.ram_floor", "qualia.bus_width", "qualia.bus_access")
QUALIA_FIELDS = {"qualia.mem_width": "qualia_mem_width_bits", "qualia.ram_slope": "qualia_ram_slope_pj_per_bit",
                 "qualia.ram_floor": "qualia_ram_floor_pj", "qualia.bus_width": "qualia_bus_width_bits",
                 "qualia.bus_access": "qualia_bus_access_pj"}


def _parameters(base: LemaireCosts, values: Mapping[str, np.ndarray]):
    """(n, scalar parameter -> (n,) array, breakpoint xs (n, P), ys (n, P))."""
    n = len(next(iter(values.values()))) if values else 1
    scalars = {"e_add_pj": base.e_add_pj, "e_mul_pj": base.e_mul_pj,
               "snn_fifo_capacity_elements": base.snn_fifo_capacity_elements,
               **{key: getattr(base, name) for key, name in QUALIA_FIELDS.items()}}
    points = np.array(base.memory_breakpoints, dtype=float)
    xs, ys = np.tile(points[:, 0], (n, 1)), np.tile(points[:, 1], (n, 1))
    for key, column in values.items():
        column = np.asarray(column, dtype=float)
        if key in scalars:
            scalars[key] = column
        elif key.startswith("memory_breakpoints.p") and key.count(".") == 2:
            point, leaf = key.split(".")[1:]
            index = int(point[1:])
            if index >= len(points) or leaf not in ("capacity_bytes", "pj_per_byte"):
                raise ValueError(f"cannot sweep {key!r}: the base has breakpoints p0 .. p{len(points) - 1}")
            (xs if leaf == "capacity_bytes" else ys)[:, index] = column
        else:
            raise ValueError(f"cannot sweep {key!r} in bulk (numeric lemaire keys: {', '.join(SWEEPABLE)})")
    bad = np.flatnonzero((np.diff(xs, axis=1) <= 0).any(axis=1))
    if len(bad):
        raise ValueError(f"memory_breakpoints x values must be strictly increasing (preset {int(bad[0])} of the sweep)")
    return n, {k: np.broadcast_to(np.asarray(v, dtype=float), (n,)) for k, v in scalars.items()}, xs, ys


def _pj_per_byte(capacity: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """LemaireCosts.memory_cost_pj for (n, G) capacities, each row with its own breakpoints."""
    memory = np.clip(capacity, xs[:, :1], xs[:, -1:])
    segment = np.clip((xs[:, None, :] < memory[:, :, None]).sum(axis=2) - 1, 0, xs.shape[1] - 2)
    x0, x1 = np.take_along_axis(xs, segment, 1), np.take_along_axis(xs, segment + 1, 1)
    y0, y1 = np.take_along_axis(ys, segment, 1), np.take_along_axis(ys, segment + 1, 1)
    return y0 + (y1 - y0) / (x1 - x0) * (memory - x0)


def _spikingjelly(activity, p, xs, ys) -> dict[str, np.ndarray]:
    calls, accesses = activity.calls, activity.accesses
    add, mac = p["e_add_pj"], p["e_mul_pj"] + p["e_add_pj"]
    n_ = {q: float(calls[q].sum()) for q in ("ac", "mac", "acc_addr", "mac_addr")}
    ops, addressing = n_["ac"] * add + n_["mac"] * mac, n_["acc_addr"] * add + n_["mac_addr"] * mac
    capacity = accesses["capacity_bytes"].astype("Float64")
    by_capacity = accesses.assign(fifo=capacity.isna(), capacity=capacity.fillna(0.0).astype(float)) \
        .groupby(["fifo", "capacity"], as_index=False)["bytes"].sum()
    fifo, moved = by_capacity["fifo"].to_numpy(bool), by_capacity["bytes"].to_numpy(float)
    fifo_bytes = (p["snn_fifo_capacity_elements"] * WORD_BYTES)[:, None]
    capacities = np.where(fifo[None, :], fifo_bytes, by_capacity["capacity"].to_numpy(float)[None, :])
    memory = (_pj_per_byte(capacities, xs, ys) * moved[None, :]).sum(axis=1)
    return {"total_pj": ops + addressing + memory, "ops_pj": ops, "addressing_pj": addressing, "memory_pj": memory}


def _qualia(activity, base: LemaireCosts, p) -> dict[str, np.ndarray]:
    terms = activity.qualia_terms
    count = terms["count"].to_numpy(float)
    memory = terms["memory"].astype(float).to_numpy()
    fifo = np.isnan(memory)
    stored = terms["kind"].isin(["read", "write"]).to_numpy()
    width = p["qualia.mem_width"]
    if base.qualia_sram_estimation == "new":
        if (p["qualia.bus_width"] < width).any():
            raise ValueError("qualia.bus_width is narrower than qualia.mem_width in some preset of the sweep")
        access = p["qualia.bus_access"] / np.floor_divide(p["qualia.bus_width"], width)
        memory_pj = access * count[stored].sum()
    else:  # e_ram(n) = slope * n * width + floor, n the FIFO's size for its accesses
        elements = (count * np.where(fifo, 0.0, memory))[stored].sum() \
            + count[stored & fifo].sum() * p["snn_fifo_capacity_elements"]
        memory_pj = p["qualia.ram_slope"] * width * elements + p["qualia.ram_floor"] * count[stored].sum()
    kind, component = terms["kind"].to_numpy(), terms["component"].to_numpy()
    unit = {"add": p["e_add_pj"], "mac": p["e_mul_pj"] + p["e_add_pj"], "mul": p["e_mul_pj"]}
    parts = {name: sum(count[(component == name) & (kind == k)].sum() * u for k, u in unit.items())
             for name in ("ops", "addr")}
    return {"total_pj": parts["ops"] + parts["addr"] + memory_pj, "ops_pj": parts["ops"],
            "addressing_pj": parts["addr"], "memory_pj": memory_pj}


def sweep_totals(activity, base: LemaireCosts, values: Mapping[str, np.ndarray], *, compat=None) -> pd.DataFrame:
    """total_pj for each index of `values` (preset keys -> equal-length arrays), every other
    parameter from `base`, in base's convention: one total per preset, the report's
    total row (`parts` gives ops_pj, addressing_pj and memory_pj too)."""
    return parts(activity, base, values)[["total_pj"]]


def parts(activity, base: LemaireCosts, values: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """total_pj, ops_pj, addressing_pj and memory_pj for each index of `values`."""
    if base.convention not in activity.conventions:
        raise ValueError(f"this activity was mapped for {activity.conventions}, not the {base.convention!r} convention")
    n, p, xs, ys = _parameters(base, values)
    totals = _qualia(activity, base, p) if base.convention == "qualia" else _spikingjelly(activity, p, xs, ys)
    return pd.DataFrame({k: np.broadcast_to(v, (n,)).astype(float) for k, v in totals.items()})
