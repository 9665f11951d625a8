"""The NeuroMC preset: SpikingJelly 2.0.0's MemoryHierarchyConfig (config.py) plus the
compute-cost constants it keeps in core.py, as one validated, frozen cost object.

Field names and defaults are SpikingJelly's (`preset_name` and `technology_nm` are
read-only properties there, plain fields here). A preset need not list SpikingJelly's 22
memory instances: bits on an instance it lacks are reported as uncosted, not refused
(strict costing restores SpikingJelly's refusal).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from spiketrace.analyze.energy.neuromc import rules as rules

REQUIRED_INSTANCES = (
    "reg_1b", "reg_16b", "reg_32b", "sram_fp_conv_in_s", "sram_fp_conv_in_w", "sram_fp_conv_out_xi",
    "sram_fp_soma_u", "sram_fp_soma_s", "sram_fp_soma_smask", "sram_bp_conv_in_du", "sram_bp_conv_in_w",
    "sram_bp_conv_out_res", "sram_bp_grad_in_u", "sram_bp_grad_in_s", "sram_bp_grad_in_smask",
    "sram_bp_grad_out_du", "sram_wg_conv_in_s", "sram_wg_conv_in_du", "sram_wg_conv_out_dw",
    "sram_2MB", "sram_6MB", "dram",
)


@dataclass(frozen=True)
class MemoryInstanceSpec:
    """One memory instance: size and bandwidths in bits (per access), costs in pJ per access."""

    name: str
    size_bits: int
    datawidth: int
    r_bw: int
    w_bw: int
    r_cost: float
    w_cost: float

    def __post_init__(self) -> None:
        where = f"memory_instances.{self.name}"
        for key in ("size_bits", "datawidth", "r_bw", "w_bw"):
            value = getattr(self, key)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{where}.{key} = {value!r}: a size or bandwidth must be a positive number of bits")
        for key in ("r_cost", "w_cost"):
            value = getattr(self, key)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{where}.{key} = {value!r}: an energy must be finite and nonnegative")


_DEFAULT_INSTANCES = {spec.name: spec for spec in (
    MemoryInstanceSpec("reg_1b", 1, 1, 1, 1, 0.00901 / 7.1 * 2, 0.00901 / 7.1 * 2),
    MemoryInstanceSpec("reg_16b", 16, 16, 16, 16, 0.14416 / 7.1 * 2, 0.14416 / 7.1 * 2),
    MemoryInstanceSpec("reg_32b", 32, 32, 32, 32, 0.14416 * 2 / 7.1 * 2, 0.14416 * 2 / 7.1 * 2),
    MemoryInstanceSpec("sram_fp_conv_in_s", 18496 * 16, 1, 1, 1, 0.44854798, 0.44854798),
    MemoryInstanceSpec("sram_fp_conv_in_w", 18432 * 256, 16, 16, 16, 5.302477904, 5.302477904),
    MemoryInstanceSpec("sram_fp_conv_out_xi", 65536 * 16, 16, 16, 16, 5.792676768, 5.792676768),
    MemoryInstanceSpec("sram_fp_soma_u", 1048576, 16, 256, 256, 92.68282828, 92.68282828),
    MemoryInstanceSpec("sram_fp_soma_s", 262144, 1, 16, 16, 7.176767677, 7.176767677),
    MemoryInstanceSpec("sram_fp_soma_smask", 65536, 1, 16, 16, 7.176767677, 7.176767677),
    MemoryInstanceSpec("sram_bp_conv_in_du", 73984 * 16, 16, 16, 16, 5.792676768, 5.792676768),
    MemoryInstanceSpec("sram_bp_conv_in_w", 18432 * 256, 16, 16, 16, 5.302477904, 5.302477904),
    MemoryInstanceSpec("sram_bp_conv_out_res", 65536 * 16, 16, 16, 16, 5.792676768, 5.792676768),
    MemoryInstanceSpec("sram_bp_grad_in_u", 1048576, 16, 256, 256, 92.68282828, 92.68282828),
    MemoryInstanceSpec("sram_bp_grad_in_smask", 65536, 1, 16, 16, 7.176767677, 7.176767677),
    MemoryInstanceSpec("sram_bp_grad_in_s", 65536, 1, 16, 16, 7.176767677, 7.176767677),
    MemoryInstanceSpec("sram_bp_grad_out_du", 1048576, 16, 256, 256, 92.68282828, 92.68282828),
    MemoryInstanceSpec("sram_wg_conv_in_s", 4624 * 16, 1, 1, 1, 0.44854798, 0.44854798),
    MemoryInstanceSpec("sram_wg_conv_in_du", 65536 * 16, 16, 16, 16, 5.792676768, 5.792676768),
    MemoryInstanceSpec("sram_wg_conv_out_dw", 18432 * 256, 16, 16, 16, 5.302477904, 5.302477904),
    MemoryInstanceSpec("sram_2MB", 1048576 * 16, 16, 256, 256, 46.976, 45.96),
    MemoryInstanceSpec("sram_6MB", 50331648, 16, 256, 256, 458.1830181, 375.0422185),
    MemoryInstanceSpec("dram", 134217728 * 64, 16, 64, 64, 1300.0, 1300.0),
)}
_SPEC_KEYS = ("size_bits", "datawidth", "r_bw", "w_bw", "r_cost", "w_cost")
_FLAGS = ("zero_dram_in_paper_energy", "zero_noc_in_paper_energy", "zero_sram_high_directions")

PRESET_UNITS = {
    "level_order": "str",
    "memory_instances.*.size_bits": "bit",
    "memory_instances.*.datawidth": "bit",
    "memory_instances.*.r_bw": "bit",
    "memory_instances.*.w_bw": "bit",
    "memory_instances.*.r_cost": "pJ",
    "memory_instances.*.w_cost": "pJ",
    **{flag: "bool" for flag in _FLAGS},
    "mac_cost_pj.*": "pJ",
    "extra_op_cost_pj.*": "pJ",
    "preset_name": "str",
    "technology_nm": "nm",
}


@dataclass(frozen=True)
class Costs:
    """SpikingJelly's MemoryHierarchyConfig fields, then its _MAC_COST_PJ (per MAC, by core
    type; a core type absent costs 0 per MAC, as in SpikingJelly) and _EXTRA_OP_COST_PJ."""

    level_order: tuple[str, ...] = ("dram", "sram", "reg", "noc")
    memory_instances: Mapping[str, MemoryInstanceSpec] = field(default_factory=lambda: dict(_DEFAULT_INSTANCES))
    zero_dram_in_paper_energy: bool = True
    zero_noc_in_paper_energy: bool = True
    zero_sram_high_directions: bool = True
    mac_cost_pj: Mapping[str, float] = field(default_factory=lambda: dict(rules.MAC_COST_PJ))
    extra_op_cost_pj: Mapping[str, float] = field(default_factory=lambda: dict(rules.EXTRA_OP_COST_PJ))
    preset_name: str = "neuromc_like_v1"
    technology_nm: int = 32

    def __post_init__(self) -> None:
        for name, spec in self.memory_instances.items():
            if not isinstance(spec, MemoryInstanceSpec) or spec.name != name:
                raise ValueError(f"memory_instances.{name} must be a MemoryInstanceSpec named {name!r}")
        for table, known in (("mac_cost_pj", rules.CORE_TYPES), ("extra_op_cost_pj", rules.PRIMITIVES)):
            for key, value in getattr(self, table).items():
                if key not in known:
                    raise ValueError(f"unknown key {table}.{key!r} (known: {', '.join(known)})")
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                    raise ValueError(f"{table}.{key} = {value!r}: an energy must be finite and nonnegative")

    def missing_instances(self) -> list[str]:
        """SpikingJelly's validate(): the required instances this preset lacks."""
        return sorted(set(REQUIRED_INSTANCES) - set(self.memory_instances))

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> Costs:
        """From a preset's [parameters] tree (numbers already in PRESET_UNITS' units)."""
        known = {f.name for f in fields(cls)}
        for key in values:
            if key not in known:
                raise ValueError(f"unknown key {key!r} for the neuromc model (known: {', '.join(sorted(known))})")
        arguments: dict[str, Any] = {}
        if "level_order" in values:
            order = values["level_order"]
            if isinstance(order, str) or not all(isinstance(level, str) for level in order):
                raise ValueError(f"level_order must be a list of level names, got {order!r}")
            arguments["level_order"] = tuple(order)
        if "memory_instances" in values:
            arguments["memory_instances"] = {name: _spec(name, spec) for name, spec in values["memory_instances"].items()}
        for flag in _FLAGS:
            if flag in values:
                if not isinstance(values[flag], bool):
                    raise ValueError(f"{flag} must be true or false, got {values[flag]!r}")
                arguments[flag] = values[flag]
        for table in ("mac_cost_pj", "extra_op_cost_pj"):
            if table in values:
                if not isinstance(values[table], Mapping):
                    raise ValueError(f"{table} must be a table of costs, got {values[table]!r}")
                arguments[table] = dict(values[table])
        if "preset_name" in values:
            arguments["preset_name"] = str(values["preset_name"])
        if "technology_nm" in values:
            arguments["technology_nm"] = values["technology_nm"]
        return cls(**arguments)


def _spec(name: str, values: Any) -> MemoryInstanceSpec:
    if not isinstance(values, Mapping):
        raise ValueError(f"memory_instances.{name} must be a table with {', '.join(_SPEC_KEYS)}")  # noqa: TRY004 - preset problems are ValueErrors (presets/loader.py)
    for key in values:
        if key not in (*_SPEC_KEYS, "name"):
            raise ValueError(f"unknown key 'memory_instances.{name}.{key}' (known: {', '.join(_SPEC_KEYS)})")
    missing = [key for key in _SPEC_KEYS if key not in values]
    if missing:
        raise ValueError(f"memory_instances.{name} lacks {', '.join(missing)}")
    if values.get("name", name) != name:
        raise ValueError(f"memory_instances.{name}.name is {values['name']!r}; it must be the table's name")
    return MemoryInstanceSpec(name, *(values[key] for key in _SPEC_KEYS))
