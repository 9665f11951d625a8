"""One trace's energy per sample under many presets: the chips (analyze/energy/chip.py) beside the
paper convention (analyze/energy/paper.py) and its 45 nm baselines, one row per preset.

    from spiketrace.analyze.energy.comparison import compare
    rows = compare("runs/eval").rows   # model, preset, grade, basis, scope, energy_per_sample_pj, ...

Each model's activity is read once (the paper model's and the chip model's), then every preset
of that model re-costs it: N presets cost two mappings and N costings. A compute preset
(compute-fp32-45nm, ...) is priced as the paper convention prices it: its e_mac_pj and e_ac_pj
on the paper activity (its memory figure is not charged, and the row says so).

Every row says what it leaves uncosted: for a chip the terms its preset does not cost (host work
without a host preset, static energy without a step time, figures the preset does not give);
for the paper convention everything but the MAC and AC arithmetic (memory, neuron updates,
static energy). The default presets (`default_presets`) are every shipped chip preset of grade
A or B and every paper preset, the convention's own (paper-fp32-45nm) first.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from spiketrace.analyze.energy import DEFAULT_PRESETS, list_presets, load_preset, map_activity, scope_warnings
from spiketrace.analyze.energy import chip as chip_model
from spiketrace.analyze.energy import paper as paper_model
from spiketrace.analyze.presets import Preset
from spiketrace.analyze.trace import accepts_path

COLUMNS = ["model", "preset", "grade", "basis", "scope", "energy_per_sample_pj", "energy_pj", "samples", "uncosted",
           "source"]
GRADES = ("A", "B")
PAPER_SCOPE = "compute only"  # the paper convention's scope: MAC and AC arithmetic, nothing else
PAPER_UNCOSTED = "memory, neuron updates, static energy"
# the options each model's activity takes (beyond the selection: stage, step, rank, ignore_modules, recompute)
MODEL_OPTIONS = {"paper": ("samples", "time_steps"), "chip": ("samples", "time_steps", "step_time", "host")}
_TERM_TEXT = {"neuron_active": "active updates", "neuron_inactive": "inactive updates",
              "spike": "spikes", "neuron_time": "neuron time", "static": "static energy"}


def default_presets() -> list[str]:
    """Every shipped chip preset of grade A or B, then every paper preset (the convention's default first)."""
    shipped = list_presets()
    chips = [p.name for p in shipped if p.model == "chip" and p.provenance.get("grade") in GRADES]
    papers = sorted((p.name for p in shipped if p.model == "paper"), key=lambda n: (n != DEFAULT_PRESETS["paper"], n))
    return chips + papers


@dataclass
class Comparison:
    """One row per preset (COLUMNS), the samples divided by and what the models noted."""

    rows: pd.DataFrame
    samples: int | None
    options: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    mapped: dict[str, int] = field(default_factory=dict)  # model -> mappings of the trace it took

    def to_json(self) -> dict:
        clean = self.rows.astype(object).where(self.rows.notna(), None)
        return {"samples": self.samples, "options": dict(self.options),
                "presets": [{k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}
                            for row in clean.to_dict("records")],
                "notes": list(self.notes)}


def _model_of(preset: Preset) -> str:
    """The model that prices `preset` here: chip, or paper (for paper and compute presets)."""
    if preset.model in ("chip", "paper"):
        return preset.model
    if preset.model == "compute":
        return "paper"
    raise ValueError(f"preset {preset.name!r} is a {preset.model} preset: compare takes chip, paper and compute presets")


def _paper_costs(preset: Preset) -> paper_model.Costs:
    values = preset.flat()
    return paper_model.Costs(e_mac_pj=float(values["e_mac_pj"]), e_ac_pj=float(values["e_ac_pj"]))


def chip_uncosted(report: chip_model.Report, scope: str | None) -> str:
    """What a chip report leaves out, in a few words: host work, static energy, figures not given."""
    parts, missing = [], []
    for term, count, status in zip(report.terms["term"], report.terms["count"], report.terms["status"]):
        if status == "costed":
            continue
        if term == "host":
            if count:
                parts.append(f"host work ({count:,.0f} MACs)")
        elif term == "static":
            if scope != "all-in":  # an all-in figure was measured with the chip's leakage in it
                parts.append("static energy" + (" (no step time)" if status == "needs step time" else ""))
        elif status == "needs step time":
            parts.append(f"{_TERM_TEXT[term]} (no step time)")
        elif scope != "all-in" and term != "neuron_time":  # all-in: inside the synaptic figure
            missing.append(_TERM_TEXT[term])
    if missing:
        parts.insert(0, "no figure for " + ", ".join(missing))
    ops = report.host_ops
    if len(ops):
        parts.append(f"normalisation/softmax ({float(ops['elements'].sum()):,.0f} elements)")
    return "; ".join(parts) or "nothing listed"


def _row(preset: Preset, model: str, report, samples: int | None) -> dict[str, Any]:
    provenance = dict(preset.provenance)
    if model == "chip":
        uncosted, scope = chip_uncosted(report, provenance.get("scope")), provenance.get("scope", "")
    else:
        scope, uncosted = PAPER_SCOPE, PAPER_UNCOSTED
        if preset.model == "compute":
            uncosted = "memory traffic (the compute preset's e_memory_pj_per_byte), neuron updates, static energy"
    total = float(report.totals["energy_pj"])
    return {"model": model if preset.model != "compute" else "paper (compute preset)", "preset": preset.name,
            "grade": provenance.get("grade", "-"), "basis": provenance.get("basis", "per-op figures"), "scope": scope,
            "energy_per_sample_pj": total / samples if samples else math.nan, "energy_pj": total, "samples": samples,
            "uncosted": uncosted, "source": preset.source}


@accepts_path
def compare(trace, presets: Iterable[Any] | None = None, *, samples: int | None = None, time_steps: int | None = None,
            step_time=None, host: str | None = None, activity_of: Callable[..., Any] | None = None,
            **selection) -> Comparison:
    """The energy per sample of `trace` under each of `presets` (names, TOML paths or Presets; the
    default_presets when None). `selection` (stage, step, rank, ignore_modules, recompute) picks
    the work; `samples`, `time_steps`, `step_time` and `host` are the models' own options.
    `activity_of(model, **options)` gives a model's activity (an Analysis's cached one); by
    default each model's trace is mapped here, once."""
    chosen = [load_preset(p) for p in (default_presets() if presets is None else presets)]
    if not chosen:
        raise ValueError("no presets to compare")
    given = {"samples": samples, "time_steps": time_steps, "step_time": step_time, "host": host}
    activities: dict[str, Any] = {}
    mapped: dict[str, int] = {}

    def activity(model: str):
        if model not in activities:
            options = {**selection, **{k: given[k] for k in MODEL_OPTIONS[model] if given[k] is not None}}
            if activity_of is not None:
                activities[model] = activity_of(model, **options)
            else:
                activities[model] = map_activity(trace, model, **options)
                mapped[model] = mapped.get(model, 0) + 1
        return activities[model]

    rows, notes = [], []
    for preset in chosen:
        model = _model_of(preset)
        mapped_activity = activity(model)
        report: chip_model.Report | paper_model.Report
        if model == "chip":
            report = chip_model.cost(mapped_activity, preset.costs())
        else:
            report = paper_model.cost(mapped_activity, _paper_costs(preset))
        rows.append(_row(preset, model, report, mapped_activity.samples))
    for model, mapped_activity in activities.items():
        notes += [f"{model}: {note}" for note in mapped_activity.notes]
        notes += [f"{model}: {note}" for note in scope_warnings(trace, model, selection.get("stage"))]
    if "chip" in activities and activities["chip"].time["step_time_s"] is None:
        notes.append("chip: static energy not included (no time per step given; --step-time 1ms charges it)")
    counted = {a.samples for a in activities.values()}
    if len(counted) > 1:
        raise ValueError(f"the models counted different samples ({sorted(map(str, counted))}): give --samples N")
    frame = pd.DataFrame(rows, columns=COLUMNS)
    return Comparison(frame, next(iter(counted)), {k: v for k, v in given.items() if v is not None},
                      list(dict.fromkeys(notes)), mapped)
