"""Energy models over a trace: activity (preset-independent) x preset -> pJ.

    from spiketrace.analyze import open_trace
    from spiketrace.analyze.energy import energy, recost
    with open_trace("runs/step") as trace:
        report = energy(trace, model="compute", preset="compute-int8-45nm")
        report.energy_total_pj, report.to_frame()
        sweep = recost(trace, "compute", sweep={"e_mac_pj": [0.5, 1.0, 4.6]})

Each model is a module with MODEL, PRESET_UNITS, Costs.from_values, activity(trace, ...) and
cost(activity, costs); see analyze/energy/compute.py for the smallest one. The larger models
are packages of one shape: mapper.py (Activity, activity), costs.py (Costs, PRESET_UNITS),
report.py (Report, cost), sweep.py (SWEEPABLE, sweep_totals: a sweep costed in bulk), and an
__init__ that re-exports them. Every report's to_frame() is the tidy frame of breakdown.py.
`recost` maps the trace once and costs it under every preset, so N presets cost N cheap
costings.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import itertools
import sys
import types
import warnings
from collections.abc import Iterable, Mapping
from importlib import import_module
from importlib.util import find_spec
from typing import Any

import numpy as np
import pandas as pd

from spiketrace.analyze.energy.scopes import SCOPES, default_model, scope_label, scope_warnings, selection_label
from spiketrace.analyze.presets import Preset, PresetError
from spiketrace.analyze.presets import loader as preset_loader
from spiketrace.analyze.trace import accepts_path
from spiketrace.analyze.trace.statistics_level import require_level

# model -> module; a model whose module is absent is not offered.
_CANDIDATES = {
    "compute": "spiketrace.analyze.energy.compute",
    "neuromc": "spiketrace.analyze.energy.neuromc",
    "lemaire": "spiketrace.analyze.energy.lemaire",
    "spikesim": "spiketrace.analyze.energy.spikesim",
    "paper": "spiketrace.analyze.energy.paper",
    "chip": "spiketrace.analyze.energy.chip",
}
MODELS = {name: path for name, path in _CANDIDATES.items() if find_spec(path) is not None}
DEFAULT_PRESETS = {
    "compute": "compute-fp32-45nm",
    "neuromc": "neuromc-like-v1",
    "lemaire": "lemaire-spikingjelly",
    "spikesim": "spikesim-rram-64",
    "paper": "paper-fp32-45nm",
    "chip": "loihi-2018",
}

__all__ = ["default_model", "energy", "list_presets", "load_preset", "map_activity", "MODELS",
           "ModelScopeWarning", "Preset", "PresetError", "read_preset_file", "recost", "SCOPES", "scope_label", "selection_label",
           "sweep_presets"]


def _model(model: str):
    if model not in MODELS:
        raise ValueError(f"unknown energy model {model!r}; choose from {sorted(MODELS)}")
    return import_module(MODELS[model])


def model_spec(model: str):
    """The module of `model` (its PRESET_UNITS, Costs, PRESET_ZERO_ALLOWED): what presets validate against."""
    if model not in MODELS:
        raise PresetError(f"unknown model {model!r}; choose from {sorted(MODELS)}")
    return import_module(MODELS[model])


def load_preset(preset, overrides=()) -> Preset:
    """A shipped preset by name, a preset file by path, or a Preset; then `overrides` applied."""
    return preset_loader.load_preset(preset, overrides, models=model_spec)


def read_preset_file(path) -> Preset:
    return preset_loader.read_preset_file(path, models=model_spec)


def list_presets() -> list[Preset]:
    return preset_loader.list_presets(models=model_spec)


def _preset_for(model: str, preset, overrides=()) -> Preset:
    loaded = load_preset(DEFAULT_PRESETS[model] if preset is None else preset, overrides)
    if loaded.model != model:
        raise PresetError(f"preset {loaded.name!r} is for the {loaded.model} model, not {model}")
    return loaded


def map_activity(trace, model: str, *, stage=None, compat=None, ignore_modules=(), strict: bool = False, **options):
    """The model's preset-independent activity of `trace`: the expensive step (it reads the
    trace), which spiketrace.analyze.results.Analysis does once per (model, options)."""
    module = _model(model)
    require_level(trace, f"model {model}")
    return module.activity(trace, stage=stage, ignore_modules=ignore_modules, compat=compat, strict=strict,
                                  **options)


class ModelScopeWarning(UserWarning):
    """The selection holds work the energy model does not cost in full (see energy/scopes.py)."""


@accepts_path
def energy(trace, model: str | None = None, preset=None, *, overrides=(), stage=None, compat=None,
           ignore_modules=(), strict: bool = False, activity=None, **options):
    """The model's report (SpikingJelly's field names) for `trace` under one preset
    (a shipped name, a TOML path or a Preset; the model's default when None). `model` None
    picks by the trace: neuromc for a training trace, compute for inference. `activity`
    (from map_activity with the same options) skips mapping the trace again. Work outside
    the model's scope (e.g. backward under `compute`) raises a ModelScopeWarning."""
    model = model_of(trace, model, [preset] if preset is not None else [])
    module = _model(model)
    chosen = _preset_for(model, preset, overrides)
    if activity is None:
        activity = map_activity(trace, model, stage=stage, ignore_modules=ignore_modules, compat=compat, strict=strict,
                                **options)
    if compat is None:  # compat reproduces SpikingJelly, which says nothing of scope
        for message in scope_warnings(trace, model, stage):
            warnings.warn(message, ModelScopeWarning, stacklevel=2)
    return module.cost(activity, chosen.costs(), compat=compat, strict=strict)


def _label(key: str, value, unit: str | None) -> str:
    """`e_mac_pj=1.5 pJ`: six significant digits and the key's unit (no 1.5000000000000002)."""
    shown = f"{value:.6g}" if isinstance(value, float) else str(value)
    return f"{key}={shown}" + (f" {unit}" if unit and unit not in ("1", "str", "bool") else "")


def model_of(trace, model: str | None = None, presets=(), base=None, sweep_keys=()) -> str:
    """`model`; else the model of the preset named (base first); else, when the trace's default
    model lacks a swept key, the first model of MODELS whose presets have every swept key
    (compute before paper for e_mac_pj and e_ac_pj, which both price); else the trace's default."""
    if model:
        return model
    for preset in (base, *(presets or ())):
        if preset is not None:
            return load_preset(preset).model
    default = default_model(trace)
    if sweep_keys:
        knowing = [name for name in MODELS if all(any(fnmatch.fnmatchcase(key, pattern)
                                                      for pattern in model_spec(name).PRESET_UNITS)
                                                  for key in sweep_keys)]
        if default not in knowing and knowing:
            return knowing[0]
    return default


def sweep_presets(base: Preset, sweep: Mapping[str, Iterable[Any]]) -> list[Preset]:
    """The cartesian product of `sweep` (dotted key -> values) over `base`."""
    keys = list(sweep)
    derived_presets = []
    for values in itertools.product(*(list(sweep[k]) for k in keys)):
        derived = base.derive(dict(zip(keys, values)))
        label = ",".join(_label(k, derived.flat()[k], derived.units.get(k)) for k in keys)
        derived_presets.append(dataclasses.replace(derived, name=f"{base.name}[{label}]"))
    return derived_presets


@accepts_path
def recost(trace, model: str | None = None, presets=None, *, sweep: Mapping[str, Iterable[Any]] | None = None, base=None,
           stage=None, compat=None, ignore_modules=(), strict: bool = False, progress=None, activity=None,
           **options) -> pd.DataFrame:
    """One row per (preset, breakdown entry): the model's to_frame() under each preset, plus a
    `preset` column and one column per swept key. The trace is mapped once (not at all when
    `activity` is given). A sweep varies `base`; with no base and one preset, that preset (so
    `--preset fp16 --sweep ...` sweeps around fp16, not around the default plus fp16)."""
    model = model_of(trace, model, presets, base, sweep_keys=list(sweep or ()))
    if sweep and base is None and len(presets or []) == 1:
        base, presets = presets[0], []
    module = _model(model)
    chosen = [_preset_for(model, p) for p in (presets or [])]
    bulk = getattr(module, "sweep_totals", None) if sweep and _sweepable(module, sweep) else None
    if bulk is not None:
        if activity is None:
            activity = map_activity(trace, model, stage=stage, ignore_modules=ignore_modules, compat=compat,
                                    strict=strict, **options)
        return _bulk_recost(activity, module, bulk, chosen, _preset_for(model, base), sweep, compat=compat,
                            strict=strict, progress=progress)
    if sweep:
        chosen += sweep_presets(_preset_for(model, base), sweep)
    if not chosen:
        chosen = [_preset_for(model, None)]
    if activity is None:
        activity = map_activity(trace, model, stage=stage, ignore_modules=ignore_modules, compat=compat, strict=strict,
                                **options)
    frames = []
    iterator = progress(chosen) if progress else chosen
    for preset in iterator:
        frame = module.cost(activity, preset.costs(), compat=compat, strict=strict).to_frame()
        frame.insert(0, "preset", preset.name)
        if preset.provenance:  # a chip preset's rows say how far to trust them
            frame = frame.assign(preset_source=preset.source, preset_grade=preset.provenance.get("grade"),
                                 preset_scope=preset.provenance.get("scope"))
        for key in (sweep or {}):
            frame[key] = preset.flat().get(key)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def _sweepable(module, sweep) -> bool:
    """Whether the model costs this sweep in bulk (its sweep_totals): every swept key matches
    one of its SWEEPABLE patterns (a model without them takes any); else preset by preset."""
    patterns = getattr(module, "SWEEPABLE", None)
    return patterns is None or all(any(fnmatch.fnmatchcase(key, p) for p in patterns) for key in sweep)


def _bulk_recost(activity, module, bulk, presets, base: Preset, sweep, *, compat=None, strict=False,
                 progress=None) -> pd.DataFrame:
    """A sweep costed in one vectorised call (models whose module has a sweep_totals): every
    distinct value is validated once through the preset rules, then the cartesian product is
    costed as arrays; rows carry the totals (energy_total/compute/memory_pj)."""
    keys = list(sweep)
    columns = {}
    for key in keys:
        values = [base.derive({key: v}).flat()[key] for v in sweep[key]]  # unit and sign checks, once per value
        columns[key] = values
    grids = np.meshgrid(*(np.asarray(columns[k], dtype=float) for k in keys), indexing="ij")
    flat = {k: g.ravel() for k, g in zip(keys, grids)}
    totals = bulk(activity, base.costs(), flat, compat=compat)
    labels = [f"{base.name}[" + ",".join(_label(k, float(flat[k][i]), base.units.get(k)) for k in keys) + "]"
              for i in range(len(totals))]
    wide = totals.assign(preset=labels, **flat)
    frame = wide.melt(id_vars=["preset", *keys], var_name="key", value_name="pj").assign(breakdown="total")
    frame = frame[["preset", "breakdown", "key", "pj", *keys]]
    if presets:
        singles = [module.cost(activity, p.costs(), compat=compat, strict=strict)
                   .to_frame().assign(preset=p.name) for p in (progress(presets) if progress else presets)]
        frame = pd.concat([*(s[s["breakdown"] == "total"] for s in singles), frame], ignore_index=True)
    return frame


class _CallablePackage(types.ModuleType):
    """`from analyze import energy` gives this package, and the package called is energy():
    `spiketrace.analyze.energy(trace, "neuromc")` and `spiketrace.analyze.energy.energy(...)` are the same call, so
    the public name and the package it lives in never shadow each other."""

    def __call__(self, *args, **kwargs):
        return energy(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
