"""Compare two traces: model version, spike rates, per-module counts and energy.

`diff_traces(a, b)` returns a TraceDiff whose `metrics` frame has one row per compared
number (metric, scope, a, b, delta, relative), and `failures(conditions)` evaluates
`--fail-if` conditions such as `energy.total>+5%` (relative change of B against A),
`counts.mac>1000` (absolute change) or `spike_rate.Net.sn1<-10%`.

`selection` (spiketrace.analyze.present.selection: --stage --phase --step --rank; --module is refused,
as energy is compared) compares the same part of both traces: counts and energy of the
selection, spike rates and events of its rows.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field

import pandas as pd

from spiketrace.analyze.present.selection import selection_of
from spiketrace.analyze.present.units import format_metric, metric_unit, quantity_in
from spiketrace.analyze.results import Analysis

CONDITION = re.compile(r"^\s*(?P<metric>[\w.\-]+?)\s*(?P<op>>=|<=|>|<)\s*(?P<value>[+-]?\d+(\.\d*)?([eE][+-]?\d+)?)"
                       r"\s*(?:(?P<percent>%)|(?P<unit>[A-Za-zµμ]+))?\s*$")


class ConditionError(ValueError):
    """A --fail-if condition is malformed or names no compared metric."""


def model_signature(trace) -> dict:
    """What identifies the model: its modules' paths, classes and parameter shapes, hashed."""
    modules = trace.sql("SELECT path, class_name, parameters FROM modules WHERE in_model ORDER BY path")
    described = [(p, c, [(q["name"], q["shape"]) for q in json.loads(params)])
                 for p, c, params in modules.itertuples(index=False)]
    digest = hashlib.sha256(json.dumps(described).encode()).hexdigest()[:16]
    return {"digest": digest, "modules": {p: f"{c} {s}" for p, c, s in described}}


def _relative(a: float, b: float) -> float | None:
    if a == 0:
        return 0.0 if b == 0 else None
    return (b - a) / abs(a)


@dataclass
class TraceDiff:
    a: str
    b: str
    model_a: dict
    model_b: dict
    metrics: pd.DataFrame  # metric, scope, a, b, delta, relative
    selection: dict = field(default_factory=dict)  # the filters both sides were compared under

    @property
    def same_model(self) -> bool:
        return self.model_a["digest"] == self.model_b["digest"]

    def changed_modules(self) -> dict[str, tuple[str | None, str | None]]:
        paths = sorted(set(self.model_a["modules"]) | set(self.model_b["modules"]))
        return {p: (self.model_a["modules"].get(p), self.model_b["modules"].get(p)) for p in paths
                if self.model_a["modules"].get(p) != self.model_b["modules"].get(p)}

    def value(self, name: str) -> pd.Series:
        """The row of a dotted metric name: energy.total, counts.mac, counts.mac.Net.fc1, spike_rate.Net.sn1."""
        keys = self.metrics["metric"] + self.metrics["scope"].map(lambda s: "" if s == "Global" else f".{s}")
        rows = self.metrics[keys == name]
        if rows.empty:
            known = ", ".join(sorted(set(keys))[:12])
            raise ConditionError(f"no compared metric {name!r} (for example: {known}, ...)")
        return rows.iloc[0]

    def failures(self, conditions) -> list[str]:
        """The conditions that hold, each as a sentence: why CI should fail."""
        failed = []
        for text in conditions:
            match = CONDITION.match(text)
            if not match:
                raise ConditionError(f"--fail-if {text!r}: expected METRIC>VALUE or METRIC>+N% (also <, >=, <=)")
            row = self.value(match["metric"])
            limit = float(match["value"])
            if match["unit"]:  # energy.total>5uJ: the change against 5 µJ in pJ
                try:
                    limit = quantity_in(limit, match["unit"], metric_unit(row["metric"]), f"--fail-if {text!r}")
                except ValueError as problem:
                    raise ConditionError(str(problem)) from None
            if match["percent"]:
                change = row["relative"]
                if change is None or (isinstance(change, float) and math.isnan(change)):
                    change = math.inf if row["b"] > row["a"] else -math.inf
                observed, shown = 100.0 * change, f"{100.0 * change:+.2f}%"
            else:
                observed = row["delta"]
                shown = ("+" if observed >= 0 else "-") + format_metric(row["metric"], abs(observed))
            holds = {">": observed > limit, "<": observed < limit, ">=": observed >= limit, "<=": observed <= limit}[match["op"]]
            if holds:
                before, after = (format_metric(row["metric"], row[side]) for side in ("a", "b"))
                failed.append(f"{match['metric']} changed {shown} ({before} -> {after}), which is {match['op']} "
                              f"{match['value']}{match['percent'] or match['unit'] or ''}")
        return failed

    def to_json(self) -> dict:
        return {
            "a": self.a, "b": self.b,
            **({"selection": dict(self.selection)} if self.selection else {}),
            "model": {"same": self.same_model, "a": self.model_a["digest"], "b": self.model_b["digest"],
                      "changed_modules": {p: {"a": x, "b": y} for p, (x, y) in self.changed_modules().items()}},
            "metrics": [
                {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
                for row in self.metrics.to_dict(orient="records")
            ],
        }


def _counts(analysis: Analysis, **options) -> pd.DataFrame:
    frame = analysis.counts(**options).frame  # the five op counters
    summed = frame.groupby(["counter", "scope"], as_index=False)["value"].sum()
    return summed.assign(metric="counts." + summed["counter"])[["metric", "scope", "value"]]


def _energies(analysis: Analysis, model: str, preset, **options) -> pd.DataFrame:
    report = analysis.energy(model, preset, **options)
    total = getattr(report, "energy_total_pj", None)
    if total is None:
        total = report.total_pj
    rows = [("energy.total", "Global", total)]
    rows += [("energy.stage." + k, "Global", v) for k, v in (getattr(report, "energy_by_stage", {}) or {}).items()]
    rows += [("energy", k, v) for k, v in (getattr(report, "energy_by_module", {}) or {}).items()]
    return pd.DataFrame(rows, columns=["metric", "scope", "value"])


def _spike_rates(trace) -> pd.DataFrame:
    rates = trace.sql("SELECT scope, sum(ones) / sum(elements) AS value FROM layer_spike_rates GROUP BY scope")
    return rates.assign(metric="spike_rate")[["metric", "scope", "value"]]


def _summary(trace) -> pd.DataFrame:
    """The events of the trace's views (of the selection, when they are restricted)."""
    events = trace.con.execute("SELECT count(*) FROM events").fetchall()[0][0]
    return pd.DataFrame([("events", "Global", events)], columns=["metric", "scope", "value"])


def diff_traces(results_a, results_b, *, model: str | None = None, preset=None, selection=None) -> TraceDiff:
    """Compare two traces (Analyses, Traces or paths): each side's results come from its
    Analysis, so a diff after a report of the same Analysis maps nothing again. `selection`
    (a Selection or a mapping of filters): the part of both traces compared."""
    analyses = [Analysis.of(r) for r in (results_a, results_b)]
    selection = selection_of(selection)
    if selection:
        selection.check(*(a.trace for a in analyses))
    if model is None:  # each trace's default; a training model for both when they differ
        defaults = {a.model() for a in analyses}
        model = defaults.pop() if len(defaults) == 1 else "neuromc"
    sides = []
    for analysis in analyses:
        trace = analysis.trace
        energy = _energies(analysis, model, preset, **selection.energy_options(trace))
        with selection.views(trace):
            rows = [_summary(trace), _spike_rates(trace)]
        sides.append(pd.concat([rows[0], _counts(analysis, **selection.counts_options()), energy, rows[1]],
                               ignore_index=True))
    merged = sides[0].merge(sides[1], on=["metric", "scope"], how="outer", suffixes=("_a", "_b"))
    merged = merged.rename(columns={"value_a": "a", "value_b": "b"})
    merged[["a", "b"]] = merged[["a", "b"]].astype(float).fillna(0.0)
    merged["delta"] = merged["b"] - merged["a"]
    merged["relative"] = [_relative(a, b) for a, b in zip(merged["a"], merged["b"])]
    merged = merged.sort_values(["metric", "scope"], ignore_index=True,
                                key=lambda c: c.map(lambda v: (v != "Global", v)) if c.name == "scope" else c)
    trace_a, trace_b = (a.trace for a in analyses)
    return TraceDiff(str(trace_a.path), str(trace_b.path), model_signature(trace_a), model_signature(trace_b), merged,
                     selection.as_dict())
