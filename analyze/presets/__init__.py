"""Hardware presets: the shipped TOML files (data) beside their loader (loader.py), units
(units.py), the declared ranges, choices and required keys of each model (ranges.py, data),
the checks that apply them (checks.py), the safe reading of a file (files.py) and the
parsing of `--set` overrides (overrides.py). Loading
needs the energy models' key schemas: use spiketrace.analyze.energy.load_preset, list_presets and
read_preset_file, which bind the model registry."""

from spiketrace.analyze.presets.loader import PRESET_DIR, Preset, PresetError, shipped_presets
from spiketrace.analyze.presets.units import convert

__all__ = ["PRESET_DIR", "Preset", "PresetError", "convert", "shipped_presets"]
