"""A single self-contained HTML report of a trace: a banner if its capture was degraded, a summary
with the model's scope and findings (the capture's own first), what the numbers leave out, energy by
component, stage, layer (and step and rank when the trace has several), counts, spike rates, coverage.

This module gathers the page's numbers from one Analysis (the energy model maps the trace
once, the counters run once) into plain rows; `templates/report.html.j2` lays them out
(Jinja2, autoescaped: every trace string is printed escaped), `templates/report.js` makes
the tables sortable and filterable, `templates/report.css` styles them. Plots are PNG data
URIs from spiketrace.analyze.present.plots; nothing is fetched when the page is viewed.

`selection` (spiketrace.analyze.present.selection: --stage --phase --step --rank; --module is refused, as
the page is about energy) makes a page of that part of the trace: its energy, counts, spike
rates and events, named in the summary. `progress=True` shows a bar on a terminal.

The page checks itself when loaded: `<body data-images-loaded data-images-total
data-errors>` say how many images decoded and which script errors occurred, so a headless
browser can verify that it rendered (tests/test_diff_report.py, tests/test_report_page.py).
"""

from __future__ import annotations

import base64
import html
import io
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import pandas as pd
from markupsafe import Markup

from spiketrace.analyze.energy import DEFAULT_PRESETS, SCOPES, ModelScopeWarning, scope_label, scope_warnings
from spiketrace.analyze.energy.breakdown import total_of
from spiketrace.analyze.energy.scopes import trace_phases
from spiketrace.analyze.present import plots
from spiketrace.analyze.present.bar_chart import series
from spiketrace.analyze.present.comparison import report_section
from spiketrace.analyze.present.counts import BYTE_COUNTERS, STAGE_ORDER, coverage, human, human_bytes, percent
from spiketrace.analyze.present.energy_table import energy_rows
from spiketrace.analyze.present.health import report_health
from spiketrace.analyze.present.layer_tables import left_out, spike_rates
from spiketrace.analyze.present.selection import selection_of
from spiketrace.analyze.present.units import format_energy
from spiketrace.analyze.progress import steps as progress_steps
from spiketrace.analyze.results import Analysis

TEMPLATES = Path(__file__).with_name("templates")
FIGURES = 4  # the plots of the page (_figures)


def _escaped(value):
    """What a template prints: strings escaped as html.escape does (quotes included)."""
    return value if isinstance(value, Markup) or not isinstance(value, str) else Markup(html.escape(value))


ENVIRONMENT = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, finalize=_escaped,
                                 undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


# -- the page's pieces -----------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One table cell: its text, the number behind it (what sorting compares), a share (0..1)
    drawn as a bar behind the text, and the depth a tree row is indented by."""

    text: str
    value: float | None = None
    share: float | None = None
    depth: int = 0

    @property
    def classes(self) -> str:
        return " ".join(c for c, on in (("bar", self.share is not None), ("indent", self.depth > 0)) if on)

    @property
    def style(self) -> str:
        parts = [f"--share: {100 * min(max(self.share, 0.0), 1.0):.1f}%"] if self.share is not None else []
        return "; ".join(parts + ([f"--depth: {self.depth}"] if self.depth else []))


@dataclass
class Table:
    id: str
    columns: list[str]
    rows: list[list[Cell]]
    caption: str = ""
    row_classes: list[str] = field(default_factory=list)

    @property
    def numeric(self) -> list[bool]:
        """Per column: whether its cells carry numbers (sorted largest first on a click)."""
        return [any(row[i].value is not None for row in self.rows) for i in range(len(self.columns))]


def _number(value) -> float | None:
    number = float(value)
    return number if math.isfinite(number) else None


def energy_cell(pj: float) -> Cell:
    return Cell(format_energy(pj), _number(pj))


def share_cell(fraction: float | None) -> Cell:
    return Cell("-") if fraction is None or not math.isfinite(fraction) else Cell(percent(fraction), fraction, fraction)


def count_cell(value, counter: str = "") -> Cell:
    return Cell((human_bytes if counter in BYTE_COUNTERS else human)(int(value)), _number(value))


def _plain(value) -> Cell:
    """A cell of a data frame as it is: numbers keep their value (so they sort as numbers)."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return Cell("" if value is None or isinstance(value, float) else str(value))  # NaN: ""
    return Cell(f"{value:,}" if float(value).is_integer() else f"{value:.4g}", _number(value))


def frame_table(frame: pd.DataFrame, id: str, caption: str = "") -> Table:
    return Table(id, [str(c) for c in frame.columns],
                 [[_plain(v) for v in row] for row in frame.itertuples(index=False)], caption)


def _label(key: str) -> str:
    return key.removesuffix("_pj").removeprefix("energy_").replace("_", " ")


def _image(figure, alt: str) -> dict:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    return {"alt": alt, "src": "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()}


def _figures(report, counts, model: str, preset, classes: dict, analysis: Analysis, selection=None,
             bar=None) -> dict:
    makers = {
        "layers": ("energy per layer", lambda: plots.energy_by_layer(report, model, preset, classes=classes)),
        "stage": ("energy per stage", lambda: plots.stage_breakdown(report, model, preset)),
        "spikes": ("spike rate heatmap", lambda: plots.spike_rate_heatmap(analysis, selection=selection)),
        "roofline": ("roofline", lambda: plots.roofline(counts, classes=classes)),
    }
    out = {}
    for key, (name, make) in makers.items():
        if bar is not None:
            bar.step(f"plot: {name}")
        try:
            out[key] = _image(make(), name)
        except (ValueError, KeyError) as problem:  # e.g. no binary outputs: say so, draw the rest
            out[key] = {"alt": name, "src": "", "problem": str(problem)}
    return out


# -- what the trace and the results say ------------------------------------------------------


def _groups(trace) -> tuple[str, ...]:
    """The per-step and per-rank views a trace has: those of step and rank that take several values."""
    row = trace.sql("SELECT count(DISTINCT step) AS step, count(DISTINCT rank) AS rank FROM events").iloc[0]
    return tuple(g for g in ("step", "rank") if int(row[g]) > 1)


def _per_group(result, group: str, energies: dict, names: list[str], model: str) -> dict:
    """One row per step (or rank): each counter's total and, where the model splits it so, the energy."""
    frame = result.frame[result.frame["scope"] == "Global"]
    sums = frame.groupby([group, "counter"])["value"].sum().unstack("counter").fillna(0).sort_index()
    names = [n for n in names if n in sums.columns]
    energies = {str(k): float(v) for k, v in (energies or {}).items()}
    keys = [str(int(k)) for k in sums.index]
    with_energy = bool(energies) and all(k in energies for k in keys)
    rows = [[Cell(k, float(k))] + [count_cell(sums.loc[i, n], n) for n in names]
            + ([energy_cell(energies[k])] if with_energy else []) for k, i in zip(keys, sums.index)]
    table = Table(f"per-{group}", [group, *names] + (["energy"] if with_energy else []), rows,
                  f"totals per {group} (all modules)")
    what, values = ("energy", [energies[k] for k in keys]) if with_energy else \
        (names[0], [float(sums.loc[i, names[0]]) for i in sums.index])
    text = format_energy if with_energy else (lambda v: count_cell(v, what).text)
    return {"name": group, "table": table, "values": dict(zip(keys, values)), "what": what,
            "series": series(f"{what} per {group}", [(k, v, f"{group} {k}: {text(v)}") for k, v in zip(keys, values)]),
            "note": "" if with_energy else f"the {model} model gives no energy per {group}"}


# -- findings ----------------------------------------------------------------------------------


def _finding(headline: str, detail: str, warn: bool = False) -> dict:
    return {"headline": headline, "detail": detail, "warn": warn}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def findings(*, model: str, total: float, components, layers, stages: dict, dead: list[str], uncosted: list[str],
             outside: dict, uncovered: list[str], groups: list[dict]) -> list[dict]:
    """The few things worth saying first, each computed from numbers the page shows.

    components: (key, depth, pJ, share of parent) as energy_table.energy_rows gives them;
    layers: (scope, class, pJ) of the leaf layers; stages: stage -> pJ; dead: layers that
    never fired; uncosted: the work the model did not cost; outside: phase -> events outside
    the model's scope; uncovered: ops no counter rule covers; groups: the per-step/rank views."""
    out = []
    if not total:
        out.append(_finding("nothing costed", f"the {model} model costed none of this trace's work (total 0 pJ)", True))
    top = [(key, pj) for key, depth, pj, _ in components if depth == 0]
    if total and top:
        key, pj = max(top, key=lambda kv: kv[1])
        if pj / total >= 0.5:  # one part of the energy outweighs all the others together
            what = "memory traffic" if _label(key) == "memory" else _label(key)
            out.append(_finding(f"{_label(key)} dominates",
                                f"{percent(pj / total)} of the energy is {what} ({format_energy(pj)} of {format_energy(total)})"))
    if total and layers:
        scope, kind, pj = max(layers, key=lambda layer: layer[2])
        out.append(_finding("largest layer", f"{scope}{f' ({kind})' if kind else ''} takes {percent(pj / total)} "
                                             f"of the energy ({format_energy(pj)})"))
    if total and len(stages) > 1:
        stage, pj = max(stages.items(), key=lambda kv: kv[1])
        out.append(_finding("largest stage", f"{stage} takes {percent(pj / total)} of the energy ({format_energy(pj)})"))
    if dead:
        out.append(_finding("dead layer" if len(dead) == 1 else "dead layers",
                            f"{', '.join(dead)} never fired (spike rate 0)", True))
    if uncosted:
        names = ", ".join(uncosted[:4]) + (f" and {len(uncosted) - 4} more" if len(uncosted) > 4 else "")
        out.append(_finding("uncosted work", f"{_plural(len(uncosted), 'kind')} of work the {model} model did not "
                                             f"cost: {names}", True))
    if outside:
        work = ", ".join(f"{phase} ({_plural(n, 'op')})" for phase, n in sorted(outside.items()))
        out.append(_finding("outside the model's scope", f"{model} is {SCOPES[model].label}; this trace also holds "
                                                         f"{work}, which it does not cost in full", True))
    if uncovered:
        out.append(_finding("ops without a rule", f"{_plural(len(uncovered), 'op')} of a counter's kind have no rule: "
                                                  f"{', '.join(uncovered[:4])}{' ...' if len(uncovered) > 4 else ''}", True))
    for view in groups:
        values = view["values"]
        low, high = min(values, key=values.get), max(values, key=values.get)
        text = format_energy if view["what"] == "energy" else (lambda v, w=view["what"]: count_cell(v, w).text)
        spread = f" ({percent(values[high] / values[low] - 1)} more)" if values[low] else ""
        out.append(_finding(f"per {view['name']}", f"{view['what']} from {text(values[low])} ({view['name']} {low}) to "
                                                  f"{text(values[high])} ({view['name']} {high}){spread}"))
    return out


# -- the page ----------------------------------------------------------------------------------


def _stage_order(stage: str) -> tuple:
    return (STAGE_ORDER.index(stage) if stage in STAGE_ORDER else len(STAGE_ORDER), stage)


def _counts_table(result, names: list[str], classes: dict, depth: int) -> Table:
    sums = result.frame.groupby(["scope", "counter"])["value"].sum().unstack("counter").fillna(0)
    names = [n for n in names if n in sums.columns]
    level = {s: 0 if s == "Global" else s.count(".") + 1 for s in sums.index}
    rows = [[Cell(s, depth=level[s]), Cell(classes.get(s, ""))] + [count_cell(sums.loc[s, n], n) for n in names]
            for s in sums.index if level[s] <= depth]
    return Table("counts", ["scope", "class", *names], rows, "operation counts (ops; memory_access in bytes)")


def _coverage_tables(result, names: list[str]) -> tuple[Table, Table, list[str]]:
    shares = coverage(result, names)
    unsupported = result.unsupported
    rows = []
    for name in names:
        missing = unsupported[unsupported["counter"] == name] if len(unsupported) else unsupported
        rows.append([Cell(name), share_cell(shares[name]), share_cell(result.coverage(name, "calls")),
                     Cell(str(len(missing)), len(missing)), Cell(str(len(result.not_applicable_of(name))),
                                                                 len(result.not_applicable_of(name)))])
    per_counter = Table("coverage-by-counter", ["counter", "covered (bytes)", "covered (calls)", "ops without a rule",
                                                "ops not applicable"], rows, "per counter")
    if len(unsupported):  # one row per op: its calls, and which counters lack a rule for it
        unsupported = (unsupported.groupby("op")
                       .agg(calls=("calls", "max"), tensor_bytes=("tensor_bytes", "max"),
                            uncovered_by=("counter", lambda c: ", ".join(sorted(c))))
                       .sort_values("calls", ascending=False).reset_index())
    ops = Table("uncovered-ops", ["op", "calls", "tensors", "uncovered by"],
                [[Cell(op), Cell(str(int(n)), int(n)), Cell(human_bytes(int(b)), int(b)), Cell(by)]
                 for op, n, b, by in unsupported[["op", "calls", "tensor_bytes", "uncovered_by"]].itertuples(index=False)]
                if len(unsupported) else [], "ops without a rule")
    return per_counter, ops, list(unsupported["op"]) if len(unsupported) else []


def page(results, *, model: str | None = None, preset=None, depth: int = 2, selection=None,
         progress: bool = False) -> dict:
    """Everything the report shows, as the template's context: one mapping of the model, one
    run of the counters (grouped by step and rank when the trace has several), of `selection`
    (a Selection or a mapping of filters; the whole trace by default)."""
    analysis = Analysis.of(results)
    selection = selection_of(selection)
    model = analysis.model(model, preset)
    trace = analysis.trace
    if selection:
        selection.check(trace)
    summary = trace.summary()
    with progress_steps(4 + FIGURES, "report", enabled=progress) as bar:
        bar.step("energy")
        with warnings.catch_warnings():  # the page states the model's scope itself (the caveats)
            warnings.simplefilter("ignore", ModelScopeWarning)
            report = analysis.energy(model, preset, **selection.energy_options(trace))
        frame = report.to_frame()
        total = total_of(frame)
        components = energy_rows(frame, "component", model)
        stages = dict(sorted(((str(k), float(v)) for k, v in (getattr(report, "energy_by_stage", {}) or {}).items()),
                             key=lambda kv: _stage_order(kv[0])))
        modules = energy_rows(frame, "module", model)
        classes = plots.layer_classes(analysis)
        keys = [key for key, *_ in modules]
        leaves = [(k, classes.get(k, ""), pj) for k, _, pj, _ in modules if not any(o.startswith(k + ".") for o in keys)]
        bar.step("counts")
        with selection.views(trace):
            groups = _groups(trace)
        options = selection.counts_options()
        result = analysis.counts(by=groups, **options) if groups else analysis.counts(**options)
        names = list(dict.fromkeys(result.frame["counter"]))
        bar.step("spike rates")
        with selection.views(trace):  # what the selected rows hold
            rates, quiet = spike_rates(trace)
            phases = trace_phases(trace)
            scope_caveats = scope_warnings(trace, model)
            events = trace.con.execute("SELECT count(*) FROM events").fetchall()[0][0]
        cost_left_out = left_out(report)
        per_counter, uncovered, uncovered_ops = _coverage_tables(result, names)
        views = [_per_group(result, g, getattr(report, f"energy_by_{g}", {}), names, model) for g in groups]
        scope = SCOPES[model]
        label = scope_label(model, phases)  # what the selection holds: "inference: forward", ...
        outside = {p: n for p, n in phases.items() if p not in scope.phases}
        bar.step("tables")
        chosen = preset or DEFAULT_PRESETS[model]
        figures = _figures(report, result, model, chosen, classes, analysis, selection, bar)
    shares = coverage(result, names)
    fired = rates.groupby(["scope", "class"], sort=False)["ones"].sum()  # over its stages: never fired at all
    dead = [f"{s} ({c})" for (s, c), ones in fired.items() if ones == 0]
    uncosted_names = [str(r.get("name") or r.get("scope") or r.get("kind")) for r in cost_left_out.to_dict("records")]
    steps = summary.get("steps_recorded")
    name = Path(str(trace.path)).name
    facts = [("trace", str(trace.path)), *([("selection", selection.describe())] if selection else []),
             ("schema version", summary.get("schema_version")),
             ("complete", summary.get("complete")), ("ranks", summary.get("ranks")), ("steps recorded", steps),
             ("events", events), ("device", summary.get("device")),
             ("torch", (summary.get("versions") or {}).get("torch")), ("preset", str(chosen))]
    facts += [(f"metadata: {k}", v) for k, v in sorted((summary.get("metadata") or {}).items())]
    return {
        "title": f"spiketrace report: {name}" + (f" ({selection.describe()})" if selection else ""),
        "trace_path": str(trace.path), "model": model, "depth": depth,
        "health": report_health(trace, model),  # banner, findings, facts, caveats of the capture itself
        "nav": [("summary", "summary"), ("findings", "findings"), ("caveats", "caveats"), ("energy", "energy"),
                ("energy-per-layer", "layers"), ("chips", "chips"), *[(f"per-{g}-view", f"per {g}") for g in groups],
                ("operation-counts", "counts"), ("spiking", "spike rates"), ("coverage", "coverage")],
        "cards": [
            {"label": "total energy", "value": format_energy(total), "note": f"{model} model under preset {chosen}"},
            {"label": "model scope", "value": model, "note": label},
            {"label": "trace" if not selection else "selection", "value": _plural(events, "event"),
             "note": f"{_plural(len(summary.get('ranks') or []), 'rank')}, {_plural(int(steps or 0), 'step')}, "
                     f"{'complete' if summary.get('complete') else 'INCOMPLETE'}"},
            {"label": "coverage", "value": percent(min(shares.values(), default=1.0)),
             "note": "lowest of the counters, by bytes"},
        ],
        "facts": [(k, "" if v is None else str(v)) for k, v in facts],
        "findings": findings(model=model, total=total, components=components, layers=leaves, stages=stages, dead=dead,
                             uncosted=uncosted_names, outside=outside, uncovered=uncovered_ops, groups=views),
        "caveats": [f"Model scope: {model} is {label}.", *scope_caveats,
                    *list(getattr(report, "warnings", []) or [])],
        "left_out": frame_table(cost_left_out, "left-out", f"{len(cost_left_out)} kinds of work the {model} model did not cost")
        if len(cost_left_out) else None,
        "coverage_line": "; ".join(f"{n} {percent(v)}" for n, v in shares.items()),
        "components": Table("components", ["component", "energy", "share"],
                            [[Cell(_label(k), depth=d), energy_cell(pj), share_cell(s)] for k, d, pj, s in components]),
        "stages": Table("stages", ["stage", "energy", "share"],
                        [[Cell(k), energy_cell(v), share_cell(v / total if total else None)] for k, v in stages.items()]),
        "layers": Table("layers", ["module", "class", "energy", "share"],
                        [[Cell(k, depth=d), Cell(classes.get(k, "")), energy_cell(pj), share_cell(pj / total if total else None)]
                         for k, d, pj, _ in modules]),
        "groups": views,
        "counts": _counts_table(result, names, classes, depth),
        "rates": Table("spike-rates", [str(c) for c in rates.columns],
                       [[_plain(v) if c != "spike_rate" else Cell(f"{v:.4f}", _number(v), _number(v))
                         for c, v in zip(rates.columns, row)] for row in rates.itertuples(index=False)],
                       "binary outputs per layer and stage (all ranks)", ["dead" if ones == 0 else "" for ones in rates["ones"]]),
        "quiet": quiet,
        "coverage": per_counter, "unsupported": uncovered,
        "plots": figures, "comparison": report_section(analysis, selection.energy_options(trace), frame_table, _image),
    }


def build_report(results, *, model: str | None = None, preset=None, depth: int = 2, selection=None,
                 progress: bool = False) -> str:
    """The page for `results` (an Analysis, or a Trace or path taken as its Analysis): the
    energy model maps the trace once and the counters run once, whatever the page shows."""
    context = page(results, model=model, preset=preset, depth=depth, selection=selection, progress=progress)
    return ENVIRONMENT.get_template("report.html.j2").render(context)


def write_report(results, out, **options) -> Path:
    path = Path(out)
    path.write_text(build_report(results, **options), encoding="utf-8")
    return path
