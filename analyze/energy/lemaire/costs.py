"""The Lemaire model's preset: LemaireCosts (SpikingJelly's cost and hardware config, the
convention, Qualia's memory-energy knobs), built from a preset's [parameters] tree
(PRESET_UNITS, units stripped)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from spiketrace.analyze.energy.lemaire.sql import CONVENTIONS, WORD_BYTES

PRESET_UNITS: dict[str, str] = {
    "convention": "str",
    "e_add_pj": "pJ",
    "e_mul_pj": "pJ",
    "memory_breakpoints.*.capacity_bytes": "byte",
    "memory_breakpoints.*.pj_per_byte": "pJ/byte",
    "snn_fifo_capacity_elements": "1",
    "qualia.mem_width": "bit",
    "qualia.sram_estimation": "str",
    "qualia.ram_slope": "pJ/bit",
    "qualia.ram_floor": "pJ",
    "qualia.bus_width": "bit",
    "qualia.bus_access": "pJ",
}
# SpikingJelly's first breakpoint sits at 0 bytes; other sizes must be positive.
PRESET_ZERO_ALLOWED = ("memory_breakpoints.*.capacity_bytes",)
SJ_BREAKPOINTS = ((0.0, 0.0), (8.0 * 1024.0, 10.0 / WORD_BYTES), (32.0 * 1024.0, 20.0 / WORD_BYTES),
                  (1024.0 * 1024.0, 100.0 / WORD_BYTES))


@dataclass(frozen=True)
class LemaireCosts:
    """SpikingJelly's LemaireEnergyCostConfig (e_add_pj, e_mul_pj, memory_breakpoints) and the
    hardware part of LemaireEnergyConfig (snn_fifo_capacity_elements), same names and defaults;
    plus the convention and Qualia's memory-energy knobs (used by convention "qualia" only)."""

    e_add_pj: float = 0.1
    e_mul_pj: float = 3.1
    memory_breakpoints: tuple[tuple[float, float], ...] = SJ_BREAKPOINTS
    snn_fifo_capacity_elements: int = 1000
    convention: str = "spikingjelly"
    qualia_mem_width_bits: int = 32
    qualia_sram_estimation: str = "old"
    qualia_ram_slope_pj_per_bit: float = 1.09e-5
    qualia_ram_floor_pj: float = 13.2
    qualia_bus_width_bits: int = 64
    qualia_bus_access_pj: float = 10.0

    def __post_init__(self) -> None:
        for name in ("e_add_pj", "e_mul_pj", "qualia_ram_slope_pj_per_bit", "qualia_ram_floor_pj",
                     "qualia_bus_access_pj"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be finite and nonnegative, got {value!r}")
        points = self.memory_breakpoints
        if len(points) < 2:
            raise ValueError("memory_breakpoints must hold at least 2 (capacity bytes, pJ/byte) points")
        for i, point in enumerate(points):
            if len(point) != 2 or not all(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0 for v in point):
                raise ValueError(f"memory_breakpoints point {i} must be a finite, nonnegative (x, y) pair, got {point!r}")
            if i and point[0] <= points[i - 1][0]:
                raise ValueError("memory_breakpoints x values must be strictly increasing")
        for name in ("snn_fifo_capacity_elements", "qualia_mem_width_bits", "qualia_bus_width_bits"):
            if int(getattr(self, name)) != getattr(self, name) or getattr(self, name) <= 0:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.convention not in CONVENTIONS:
            raise ValueError(f"convention must be one of {CONVENTIONS}, got {self.convention!r}")
        if self.qualia_sram_estimation not in ("old", "new"):
            raise ValueError(f"qualia.sram_estimation must be 'old' (ICONIP 2022) or 'new', got {self.qualia_sram_estimation!r}")
        if self.qualia_sram_estimation == "new" and self.qualia_bus_width_bits < self.qualia_mem_width_bits:
            raise ValueError("qualia.bus_width is narrower than qualia.mem_width: Qualia's 'new' SRAM estimate "
                             "divides by zero there")

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> LemaireCosts:
        """From a preset's [parameters] tree (units stripped); unknown keys raise naming them."""
        values = dict(values)
        kwargs: dict[str, Any] = {}
        for name in ("e_add_pj", "e_mul_pj"):
            if name in values:
                kwargs[name] = float(values.pop(name))
        if "snn_fifo_capacity_elements" in values:
            kwargs["snn_fifo_capacity_elements"] = _integer("snn_fifo_capacity_elements",
                                                            values.pop("snn_fifo_capacity_elements"))
        if "convention" in values:
            kwargs["convention"] = str(values.pop("convention"))
        if "memory_breakpoints" in values:
            kwargs["memory_breakpoints"] = _breakpoints(values.pop("memory_breakpoints"))
        if "qualia" in values:
            qualia = dict(values.pop("qualia"))
            for key, name, kind in (("mem_width", "qualia_mem_width_bits", int), ("sram_estimation",
                                    "qualia_sram_estimation", str), ("ram_slope", "qualia_ram_slope_pj_per_bit", float),
                                    ("ram_floor", "qualia_ram_floor_pj", float), ("bus_width", "qualia_bus_width_bits", int),
                                    ("bus_access", "qualia_bus_access_pj", float)):
                if key in qualia:
                    raw = qualia.pop(key)
                    kwargs[name] = _integer(f"qualia.{key}", raw) if kind is int else kind(raw)
            if qualia:
                raise ValueError(f"unknown key 'qualia.{min(qualia)}' for the lemaire model")
        if values:
            raise ValueError(f"unknown key {min(values)!r} for the lemaire model")
        return cls(**kwargs)

    def memory_cost_pj(self, capacity_bytes):
        """pJ per byte for a buffer of `capacity_bytes` (SpikingJelly's memory_cost_pj; vectorised)."""
        xs = np.array([p[0] for p in self.memory_breakpoints], dtype=float)
        ys = np.array([p[1] for p in self.memory_breakpoints], dtype=float)
        memory = np.clip(np.asarray(capacity_bytes, dtype=float), xs[0], xs[-1])
        # the segment [x_i, x_{i+1}] with x_i < m <= x_{i+1} (the first one for m = x_0), as SpikingJelly picks it
        segment = np.clip(np.searchsorted(xs, memory, side="left") - 1, 0, len(xs) - 2)
        x0, x1, y0, y1 = xs[segment], xs[segment + 1], ys[segment], ys[segment + 1]
        return y0 + (y1 - y0) / (x1 - x0) * (memory - x0)

    def e_ram_pj(self, elements):
        """Qualia's _e_ram: pJ for one access to a memory of `elements` words (vectorised)."""
        bits = self.qualia_mem_width_bits
        if self.qualia_sram_estimation == "new":
            return np.full(np.shape(elements), self.qualia_bus_access_pj / (self.qualia_bus_width_bits // bits))
        return self.qualia_ram_slope_pj_per_bit * np.asarray(elements, dtype=float) * bits + self.qualia_ram_floor_pj


def _integer(key: str, value) -> int:
    if isinstance(value, bool) or float(value) != int(value):
        raise ValueError(f"{key} must be an integer, got {value!r}")
    return int(value)


def _breakpoints(tree: Mapping[str, Any]) -> tuple[tuple[float, float], ...]:
    """{"p0": {"capacity_bytes": 0, "pj_per_byte": 0}, ...} -> ((0.0, 0.0), ...) in key order p0, p1, ..."""
    if not isinstance(tree, Mapping):
        raise ValueError("memory_breakpoints must be a table of points p0, p1, ...")  # noqa: TRY004 - preset problems are ValueErrors (presets/loader.py)
    points = []
    for name in sorted(tree, key=lambda k: (len(k), k)):
        point = tree[name]
        if not name.startswith("p") or not name[1:].isdigit() or not isinstance(point, Mapping):
            raise ValueError(f"unknown key 'memory_breakpoints.{name}' (points are p0, p1, ...)")
        extra = sorted(set(point) - {"capacity_bytes", "pj_per_byte"})
        if extra:
            raise ValueError(f"unknown key 'memory_breakpoints.{name}.{extra[0]}'")
        for leaf in ("capacity_bytes", "pj_per_byte"):
            if leaf not in point:
                raise ValueError(f"memory_breakpoints.{name} lacks {leaf}")
            if float(point[leaf]) < 0:
                raise ValueError(f"memory_breakpoints.{name}.{leaf} = {point[leaf]}: must be nonnegative")
        points.append((float(point["capacity_bytes"]), float(point["pj_per_byte"])))
    if [int(n[1:]) for n in sorted(tree, key=lambda k: (len(k), k))] != list(range(len(points))):
        raise ValueError(f"memory_breakpoints points must be p0 .. p{len(points) - 1}, got {sorted(tree)}")
    return tuple(points)


