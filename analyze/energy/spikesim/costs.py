"""The SpikeSim model's preset: Costs (SpikingJelly's SpikeSimEnergyConfig, same field names
and defaults) with SpikeSim's area (AreaCosts) and latency (LatencyCosts) constants, built from
a preset's [parameters] tree (PRESET_UNITS, units stripped)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

# The pJ parameters: every SpikeSim energy is linear in them (sweep.py).
PJ_FIELDS = ("tile_buffer_pj", "temp_buffer_pj", "sub_pj", "adc_pj", "htree_pj", "mux_pj", "mem_fetch_pj",
             "neuron_pj", "rram_xbar_pj", "sram_xbar_pj")
_AREA_UM2 = ("rram_xbar_um2", "sram_xbar_um2", "temp_buffer_um2", "sub_um2", "adc_um2", "htree_um2", "mux_um2")
PRESET_UNITS: dict[str, str] = {
    "xbar_size": "1", "device": "str", "activity_mode": "str", "require_if_lif_neurons": "bool",
    **{name: "pJ" for name in PJ_FIELDS},
    **{f"area.{name}": "um2" for name in _AREA_UM2},
    "area.sram_bit_um2": "um2/bit", "area.tile_buffer_bits": "bit", "area.buffer_bits_per_element": "bit",
    "area.pe_per_tile": "1", "area.neuron_memory_layers": "1",
    "latency.clock_mhz": "MHz", "latency.pe_cycle_clocks": "cycle", "latency.pipeline_fraction": "1",
}


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
            raise ValueError(f"require_if_lif_neurons must be true or false, got {self.require_if_lif_neurons!r}")  # noqa: TRY004 - preset problems are ValueErrors (presets/loader.py)
        for name in PJ_FIELDS:
            object.__setattr__(self, name, _number(name, getattr(self, name)))

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> Costs:
        values = dict(values)
        area = values.pop("area", {})
        latency = values.pop("latency", {})
        for name, table in (("area", area), ("latency", latency)):
            if not isinstance(table, Mapping):
                raise ValueError(f"{name} must be a table of parameters, got {table!r}")  # noqa: TRY004 - preset problems are ValueErrors (presets/loader.py)
        unknown = sorted(set(values) - set(SPIKINGJELLY_FIELDS))
        if unknown:
            raise ValueError(f"unknown key {unknown[0]!r} for the spikesim model (known: {', '.join(PRESET_UNITS)})")
        return cls(**values, area=_from_tree(AreaCosts, area, "area."),
                   latency=_from_tree(LatencyCosts, latency, "latency."))

    def spikingjelly(self) -> dict[str, Any]:
        """The fields of SpikingJelly's SpikeSimEnergyConfig."""
        return {name: getattr(self, name) for name in SPIKINGJELLY_FIELDS}


SPIKINGJELLY_FIELDS = tuple(f.name for f in fields(Costs) if f.name not in ("area", "latency"))
