"""Import a ZigZag hardware YAML `memories:` block into a NeuroMC-style memory hierarchy.

ZigZag (KU Leuven) describes each memory by `size` (bits), `r_bw` / `w_bw` (bits per
access) and `r_cost` / `w_cost` (pJ per access) — the same quantities a NeuroMC preset's
`memory_instances.<name>` holds. `preset_from_zigzag` derives a preset from a base one:
each ZigZag memory replaces the NeuroMC instance it is mapped to (`mapping`, ZigZag name ->
instance; by default instances of the same name), keeping the base's `datawidth`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from spiketrace.analyze.energy import Preset, PresetError, load_preset

FIELDS = {"size": "size_bits", "r_bw": "r_bw", "w_bw": "w_bw", "r_cost": "r_cost", "w_cost": "w_cost"}


def read_memories(path: str | Path) -> dict[str, dict[str, float]]:
    """{memory name: {size, r_bw, w_bw, r_cost, w_cost}} of a ZigZag hardware YAML file."""
    import yaml  # only this importer needs it

    path = Path(path)
    try:
        document = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise PresetError(f"{path}: no such ZigZag hardware file") from None
    except yaml.YAMLError as problem:
        raise PresetError(f"{path}: not valid YAML: {problem}") from None
    memories = (document or {}).get("memories") if isinstance(document, dict) else None
    if not isinstance(memories, dict) or not memories:
        raise PresetError(f"{path}: no `memories:` block")
    out = {}
    for name, spec in memories.items():
        missing = [k for k in FIELDS if not isinstance((spec or {}).get(k), (int, float))]
        if missing:
            raise PresetError(f"{path}: memories.{name} lacks numeric {', '.join(missing)}")
        out[str(name)] = {k: float(spec[k]) for k in FIELDS}
    return out


def preset_from_zigzag(path: str | Path, base: str | Path | Preset = "neuromc-like-v1",
                       mapping: Mapping[str, str] | None = None) -> Preset:
    memories = read_memories(path)
    preset = load_preset(base)
    instances = preset.parameters.get("memory_instances", {})
    mapping = dict(mapping) if mapping else {name: name for name in memories if name in instances}
    if not mapping:
        raise PresetError(f"{path}: no ZigZag memory has the name of an instance of {preset.name} "
                          f"({', '.join(sorted(instances))}); map them with --map ZIGZAG=INSTANCE")
    overrides = {}
    for source, target in mapping.items():
        if source not in memories:
            raise PresetError(f"{path}: no memory {source!r} (it has {', '.join(memories)})")
        if target not in instances:
            raise PresetError(f"{preset.name}: no memory instance {target!r} to map {source!r} onto")
        for zigzag_key, neuromc_key in FIELDS.items():
            overrides[f"memory_instances.{target}.{neuromc_key}"] = memories[source][zigzag_key]
    derived = preset.derive(overrides)
    pairs = ", ".join(f"{s}->{t}" for s, t in mapping.items())
    return dataclasses.replace(derived, name=f"{preset.name}+{Path(path).stem}",
                               source=f"{derived.source}; memories from ZigZag hardware file {Path(path).name} ({pairs})")


def preset_toml(preset: Preset) -> str:
    """The preset as a TOML file (every number with its unit), loadable by load_preset."""
    def literal(value) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, str):
            return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(value, (list, tuple)):
            return "[" + ", ".join(literal(v) for v in value) + "]"
        return repr(value)

    lines = ["[preset]", f"name = {literal(preset.name)}", f"model = {literal(preset.model)}",
             f"description = {literal(preset.description)}", f"source = {literal(preset.source)}", "", "[parameters]"]
    for key, value in preset.flat().items():
        unit = preset.units.get(key)
        quoted = ".".join(f'"{part}"' if not part.replace("_", "").isalnum() else part for part in key.split("."))
        if unit in (None, "str", "bool") or isinstance(value, (str, bool, list)):
            lines.append(f"{quoted} = {literal(value)}")
        else:
            lines.append(f'{quoted} = {{ value = {literal(value)}, unit = "{unit}" }}')
    return "\n".join(lines) + "\n"
