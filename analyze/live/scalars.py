"""The scalars of one recorder step: what the live worker logs for each step it is sent.

    from spiketrace.analyze import Analysis
    from spiketrace.analyze.live import ScalarConfig, step_scalars
    with Analysis("runs/train", verify=False) as analysis:
        scalars = step_scalars(analysis, 1, None, ScalarConfig())
        scalars["spiketrace/flop"], scalars.skipped       # {name: float}, {name: why it is missing}

Every number is the one the CLI prints for the same step (docs/live_analysis.md), computed by
the same calls: counters through `Analysis.counts(names, step=S, rank=R)` (as `spiketrace
counts TRACE --step S [--rank R]`), energies through `Analysis.energy(model, preset, step=S,
rank=R)` (as `spiketrace energy TRACE --step S ...`), spike rates from the trace's
`layer_spike_rates` view under the step's selection.

A scalar the trace cannot give for that step (a counter or model refusing a trace captured at
a lower statistics level, a model that cannot map it) is left out of the scalars and named in
`skipped` with the one-line reason, so one refusal never costs the others.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields

from spiketrace.analyze.counters import ALL_COUNTERS
from spiketrace.analyze.energy import DEFAULT_PRESETS, MODELS, load_preset
from spiketrace.analyze.energy.breakdown import total_of
from spiketrace.analyze.present.selection import Selection
from spiketrace.analyze.results import DEFAULT_COUNTERS, Analysis
from spiketrace.analyze.trace.statistics_level import InsufficientStatisticsError, require_level

# Per spiking layer, its ones and elements over the selected forward calls: the step's rate is
# ones / elements over every stage of the step (see spike_rate_scalars for why all stages).
SPIKE_RATE_QUERY = ("SELECT scope, sum(ones)::BIGINT AS ones, sum(elements)::BIGINT AS elements "
                    "FROM layer_spike_rates GROUP BY scope ORDER BY scope")


class ConfigError(ValueError):
    """A live analysis setting that cannot be used (one line naming the key)."""


def one_line(problem: BaseException | str) -> str:
    """A message on one line (DuckDB's carry the query and a caret on lines below; those go)."""
    text = problem if isinstance(problem, str) else str(problem)
    lines = []
    for line in text.splitlines():
        if line.startswith("LINE "):
            break
        if line.strip():
            lines.append(line.strip())
    if lines:
        return " ".join(lines)
    return type(problem).__name__ if isinstance(problem, BaseException) else ""


def reason(problem: BaseException) -> str:
    """Why something failed, on one line: the message of a refusal (ValueError, OSError: the
    library's and the file system's), the exception's type too for anything else (a bug)."""
    message = one_line(problem)
    return message if isinstance(problem, (ValueError, OSError)) else f"{type(problem).__name__}: {message}"


@dataclass(frozen=True)
class EnergyEntry:
    """One energy total to log: a model and a preset; None picks as `spiketrace energy` does (the
    trace's default model, the model's default preset)."""

    model: str | None = None
    preset: str | None = None

    @property
    def is_default(self) -> bool:
        return self.model is None and self.preset is None


@dataclass(frozen=True)
class ScalarConfig:
    """What step_scalars computes (the worker's --config, less its sinks)."""

    counters: tuple[str, ...] = DEFAULT_COUNTERS
    energy: tuple[EnergyEntry, ...] = (EnergyEntry(),)
    spike_rates: bool = True
    coverage: bool = True
    prefix: str = "spiketrace"

    @classmethod
    def from_json(cls, document: Mapping) -> ScalarConfig:
        """The config of a JSON object ({"counters": [..] | null, "energy": [{"model", "preset"}],
        "spike_rates", "coverage", "prefix"}; a key left out keeps its default); ConfigError
        naming the key at fault."""
        if not isinstance(document, Mapping):
            raise ConfigError(f"config: expected a JSON object, got {type(document).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(document) - known)
        if unknown:
            raise ConfigError(f"config: unknown key(s) {unknown}; choose from {sorted(known)}")
        values: dict = {}
        if document.get("counters") is not None:
            values["counters"] = _counters(document["counters"])
        if "energy" in document:
            values["energy"] = _energy_entries(document["energy"])
        for key in ("spike_rates", "coverage"):
            if key in document:
                if not isinstance(document[key], bool):
                    raise ConfigError(f"config: {key} must be true or false, got {document[key]!r}")
                values[key] = document[key]
        if "prefix" in document:
            if not isinstance(document["prefix"], str) or not document["prefix"].strip("/"):
                raise ConfigError(f"config: prefix must be a non-empty string, got {document['prefix']!r}")
            values["prefix"] = document["prefix"].strip("/")
        return cls(**values)


def _counters(value) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise ConfigError(f"config: counters must be a list of counter names or null, got {value!r}")
    unknown = [name for name in value if name not in ALL_COUNTERS]
    if unknown:
        raise ConfigError(f"config: counters: unknown counter(s) {unknown}; choose from {sorted(ALL_COUNTERS)}")
    return tuple(value)


def _energy_entries(value) -> tuple[EnergyEntry, ...]:
    """The entries, each checked as far as it can be without a trace: the model exists, the
    preset loads and is of that model."""
    if not isinstance(value, list):
        raise ConfigError(f"config: energy must be a list of {{\"model\", \"preset\"}} objects, got {value!r}")
    entries = []
    for index, item in enumerate(value):
        where = f"config: energy[{index}]"
        if not isinstance(item, Mapping) or set(item) - {"model", "preset"}:
            raise ConfigError(f"{where}: expected an object with keys model and preset, got {item!r}")
        model, preset = item.get("model"), item.get("preset")
        if not all(v is None or isinstance(v, str) for v in (model, preset)):
            raise ConfigError(f"{where}: model and preset must be strings or null, got {item!r}")
        if model is not None and model not in MODELS:
            raise ConfigError(f"{where}: unknown energy model {model!r}; choose from {sorted(MODELS)}")
        if preset is not None:
            try:
                loaded = load_preset(preset)
            except (ValueError, OSError) as problem:
                raise ConfigError(f"{where}: preset {preset!r}: {one_line(problem)}") from None
            if model is not None and loaded.model != model:
                raise ConfigError(f"{where}: preset {loaded.name!r} is for the {loaded.model} model, not {model}")
        entries.append(EnergyEntry(model, preset))
    return tuple(entries)


class StepScalars(dict[str, float]):
    """The scalars of one step, {name: value}; `skipped` names those left out, {name: reason}."""

    def __init__(self, values=(), skipped: Mapping[str, str] | None = None) -> None:
        super().__init__(values)
        self.skipped: dict[str, str] = dict(skipped or {})


def step_scalars(analysis: Analysis, recorder_step: int, rank: int | None = None,
                 config: ScalarConfig | Mapping | None = None) -> StepScalars:
    """The scalars of recorder step `recorder_step` (of rank `rank`, or all ranks added up) of the
    analysed trace: counters and their coverage, energy totals in pJ, spike rates per layer, named
    as docs/live_analysis.md lists. SelectionError when the trace holds no such step or rank."""
    config = config if isinstance(config, ScalarConfig) else ScalarConfig.from_json(config or {})
    selection = Selection(step=int(recorder_step), rank=None if rank is None else int(rank))
    selection.check(analysis.trace)
    scalars = StepScalars()
    parts = [counter_scalars(analysis, selection, config), energy_scalars(analysis, selection, config)]
    if config.spike_rates:
        parts.append(spike_rate_scalars(analysis, selection, config.prefix))
    for part in parts:
        scalars.update(part)
        scalars.skipped.update(part.skipped)
    for name in [name for name, value in scalars.items() if not math.isfinite(value)]:
        scalars.skipped[name] = f"not a finite number ({scalars.pop(name)})"
    return scalars


def counter_scalars(analysis: Analysis, selection: Selection, config: ScalarConfig) -> StepScalars:
    """`P/<counter>` (the counter's total: `counts --format json`'s counters.<c>.total) and
    `P/coverage/<counter>` (its coverage, by tensor bytes) for every counter the trace serves."""
    prefix, scalars = config.prefix, StepScalars()

    def names_of(counter: str) -> list[str]:
        return [f"{prefix}/{counter}", *([f"{prefix}/coverage/{counter}"] if config.coverage else [])]

    served = []
    for counter in config.counters:  # a counter refusing the trace's statistics level must not stop the others
        try:
            require_level(analysis.trace, f"counter {counter}")
            served.append(counter)
        except InsufficientStatisticsError as problem:
            scalars.skipped.update(dict.fromkeys(names_of(counter), one_line(problem)))
    if not served:
        return scalars
    try:
        result = analysis.counts(served, **selection.counts_options())
    except ValueError as problem:  # the counters' own refusals; anything else is a bug and propagates
        scalars.skipped.update({name: one_line(problem) for counter in served for name in names_of(counter)})
        return scalars
    totals = result.totals()
    for counter in served:
        scalars[f"{prefix}/{counter}"] = float(totals.get(counter, 0))
        if config.coverage:
            scalars[f"{prefix}/coverage/{counter}"] = float(result.coverage(counter))
    return scalars


def energy_scalars(analysis: Analysis, selection: Selection, config: ScalarConfig) -> StepScalars:
    """The energy total in pJ of each entry: `P/energy_pj` for a first entry that is the default,
    else `P/energy_pj/<model>/<preset>` with the model and preset it resolves to."""
    scalars = StepScalars()
    options = selection.energy_options(analysis.trace)
    for index, entry in enumerate(config.energy):
        name = f"{config.prefix}/energy_pj/{entry.model or 'default'}/{entry.preset or 'default'}"
        try:
            model = analysis.model(entry.model, entry.preset)
            if index == 0 and entry.is_default:
                name = f"{config.prefix}/energy_pj"
            else:
                name = f"{config.prefix}/energy_pj/{model}/{load_preset(entry.preset or DEFAULT_PRESETS[model]).name}"
            report = analysis.energy(model, entry.preset, **options)
            # the total row of the report's frame: the total `spiketrace energy --format json` prints
            # (energy_total_pj, Lemaire's total_pj), and the paper and chip models' totals alike
            scalars[name] = total_of(report.to_frame())
        except Exception as problem:  # noqa: BLE001 - a model refusing this trace or step skips its scalar, not the step
            scalars.skipped[name] = reason(problem)
    return scalars


def spike_rate_scalars(analysis: Analysis, selection: Selection, prefix: str) -> StepScalars:
    """`P/spike_rate/<scope>`: per spiking layer, ones / elements of its binary outputs over the
    step's forward calls (of the selected rank, or all ranks added up).

    All stages of the step are summed, not the stage named "forward": the stage names are the
    training loop's choice, a layer's forward calls within one step each run once (the view
    leaves out the forwards activation checkpointing repeats during backward), and a rate
    per step is what a training curve plots. One value per layer, however many stages."""
    scalars = StepScalars()
    with selection.views(analysis.trace):
        rates = analysis.trace.con.execute(SPIKE_RATE_QUERY).fetchall()
    for scope, ones, elements in rates:
        if elements:
            scalars[f"{prefix}/spike_rate/{scope}"] = float(ones) / float(elements)
    return scalars

