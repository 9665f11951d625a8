"""A single self-contained HTML report of a trace: summary, energy and count breakdowns,
plots (PNG data URIs), spike rates and coverage. Nothing is fetched when it is viewed.

The page checks itself when loaded: `<body data-images-loaded data-images-total
data-errors>` say how many images decoded and which script errors occurred, so a headless
browser can verify that it rendered (tests/test_report.py).
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import pandas as pd

import warnings

from analyze.energy import DEFAULT_PRESETS, SCOPES, ModelScopeWarning, scope_warnings
from analyze.present import plots
from analyze.present.counts import human
from analyze.present.units import format_energy
from analyze.results import Analysis

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 72rem; color: #222; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.5rem 0; font-size: 0.9rem; }
th, td { padding: 0.2rem 0.7rem; border-bottom: 1px solid #eee; text-align: right; }
th:first-child, td:first-child { text-align: left; }
img { max-width: 100%; height: auto; margin: 0.5rem 0; border: 1px solid #eee; }
.note { color: #666; font-size: 0.85rem; }
"""

SELF_CHECK = """
window.spiketraceErrors = [];
window.addEventListener('error', e => window.spiketraceErrors.push(String(e.message)));
window.addEventListener('load', () => {
  const images = Array.from(document.images);
  document.body.dataset.imagesTotal = images.length;
  document.body.dataset.imagesLoaded = images.filter(i => i.complete && i.naturalWidth > 0).length;
  document.body.dataset.errors = window.spiketraceErrors.join(' | ');
});
"""


def _table(frame: pd.DataFrame, caption: str = "") -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
                   for row in frame.itertuples(index=False))
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _image(figure, alt: str) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    data = base64.b64encode(buffer.getvalue()).decode()
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _figures(analysis: Analysis, report, counts, model: str, preset) -> list[str]:
    makers = [
        ("energy per layer", lambda: plots.energy_by_layer(report, model, preset, classes=plots.layer_classes(analysis))),
        ("energy per stage", lambda: plots.stage_breakdown(report, model, preset)),
        ("spike rate heatmap", lambda: plots.spike_rate_heatmap(analysis)),
        ("roofline", lambda: plots.roofline(counts, classes=plots.layer_classes(analysis))),
    ]
    out = []
    for name, make in makers:
        try:
            out.append(_image(make(), name))
        except (ValueError, KeyError) as problem:  # e.g. no binary outputs: say so, draw the rest
            out.append(f'<p class="note">{html.escape(name)}: not drawn ({html.escape(str(problem))})</p>')
    return out


def _spike_rates(trace) -> tuple[pd.DataFrame, str]:
    """Per spiking layer its rate, its class and a note when it never fired (a dead layer);
    and a sentence naming the leaf layers whose outputs are not spikes."""
    rates = trace.sql("SELECT scope, class_name AS class, stage, calls, ones, elements, round(spike_rate, 4) AS spike_rate "
                      "FROM layer_spike_rates ORDER BY scope, stage")
    rates["note"] = rates["ones"].map(lambda ones: "dead: never fired" if ones == 0 else "")
    leaves = trace.sql("SELECT coalesce(m.tracker_name, m.path) AS scope, any_value(m.class_name) AS class FROM modules m "
                       "WHERE m.is_leaf AND EXISTS (SELECT 1 FROM module_events e WHERE e.rank = m.rank "
                       "AND e.module_id = m.module_id AND e.kind = 'forward_post') GROUP BY ALL ORDER BY scope")
    others = leaves[~leaves["scope"].isin(set(rates["scope"]))]
    quiet = ("Not spiking (outputs not 0/1): " + ", ".join(f"{s} ({c})" for s, c in zip(others["scope"], others["class"]))
             if len(others) else "")
    return rates, quiet


def _left_out(report) -> pd.DataFrame:
    """The work the model could not cost, one row each (NeuroMC's uncosted, the others' unsupported)."""
    for name in ("uncosted", "unsupported"):
        value = getattr(report, name, None)
        frame = value if isinstance(value, pd.DataFrame) else pd.DataFrame(value or [])
        if len(frame):
            keep = [c for c in ("kind", "name", "scope", "class_name", "calls", "stages", "modules", "reason")
                    if c in frame.columns]
            return frame[keep]
    return pd.DataFrame()


def _caveats(trace, model: str, report) -> list[str]:
    """The model's scope, its warnings and what it left uncosted: one short block."""
    notes = [f"Model scope: {model} is {SCOPES[model].label}."]
    notes += scope_warnings(trace, model) + list(getattr(report, "warnings", []) or [])
    block = ["<ul class='caveats'>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>"]
    left_out = _left_out(report)
    if len(left_out):
        block.append(_table(left_out, f"{len(left_out)} kinds of work the {model} model did not cost"))
    return block


def build_report(results, *, model: str | None = None, preset=None, depth: int = 2) -> str:
    """The page for `results` (an Analysis, or a Trace or path taken as its Analysis): the
    energy model maps the trace once and the counters run once, whatever the page shows."""
    analysis = Analysis.of(results)
    model = analysis.model(model, preset)
    trace = analysis.trace
    summary = trace.summary()
    with warnings.catch_warnings():  # the page states the model's scope itself (_caveats)
        warnings.simplefilter("ignore", ModelScopeWarning)
        report = analysis.energy(model, preset)
    frame = report.to_frame()
    total_key = "energy_total_pj" if "energy_total_pj" in set(frame["key"]) else "total_pj"
    total = float(frame.loc[frame["key"] == total_key, "pj"].iloc[0])
    components = frame[frame["breakdown"] == "component"][["key", "pj"]]
    components = components.assign(energy=components["pj"].map(format_energy),
                                   share=(100 * components["pj"] / total).round(1) if total else 0.0)
    components = components[["key", "energy", "share"]]
    stages = frame[frame["breakdown"] == "stage"][["key", "pj"]].assign(energy=lambda f: f["pj"].map(format_energy))[["key", "energy"]]
    result = analysis.counts()
    counts = result.frame.groupby(["scope", "counter"])["value"].sum().unstack("counter").fillna(0).astype("int64")
    counts = counts[[d <= depth for d in counts.index.map(lambda s: 0 if s == "Global" else s.count(".") + 1)]]
    counts = counts.reset_index().map(lambda v: human(v) if isinstance(v, (int,)) or hasattr(v, "dtype") else v)
    classes = plots.layer_classes(analysis)
    counts.insert(1, "class", counts["scope"].map(lambda s: classes.get(s, "")))
    unsupported = result.unsupported
    if len(unsupported):  # one row per op: its calls, and which counters lack a rule for it
        unsupported = (unsupported.groupby("op")
                       .agg(calls=("calls", "max"), tensor_bytes=("tensor_bytes", "max"),
                            uncovered_by=("counter", lambda c: ", ".join(sorted(c))))
                       .sort_values("calls", ascending=False).reset_index())
    rates, quiet = _spike_rates(trace)
    chosen = preset or DEFAULT_PRESETS[model]
    info = pd.DataFrame([
        ("trace", str(trace.path)), ("schema version", summary.get("schema_version")),
        ("complete", summary.get("complete")), ("ranks", summary.get("ranks")),
        ("events", trace.count("events")), ("energy model", f"{model} ({SCOPES[model].label}) under {chosen}"),
        ("total energy", format_energy(total)),
    ], columns=["", "value"])
    sections = [
        f"<h1>spiketrace report: {html.escape(Path(str(trace.path)).name)}</h1>",
        "<h2>Summary</h2>", _table(info),
        "<h2>What the numbers leave out</h2>", *_caveats(trace, model, report),
        "<h2>Energy by component</h2>", _table(components),
        "<h2>Energy by stage</h2>", _table(stages),
        "<h2>Plots</h2>", *_figures(analysis, report, result, model, preset),
        f"<h2>Operation counts per module (depth ≤ {depth})</h2>", _table(counts),
        "<h2>Spike rates per layer</h2>", _table(rates) if len(rates) else '<p class="note">no binary layer outputs</p>',
        f'<p class="note">{html.escape(quiet)}</p>' if quiet else "",
        "<h2>Coverage: ops of a counter's kind without a rule</h2>",
        _table(unsupported) if len(unsupported) else '<p class="note">every op of the trace is covered</p>',
    ]
    title = f"spiketrace report: {Path(str(trace.path)).name}"
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style><script>{SELF_CHECK}</script></head><body>{''.join(sections)}</body></html>")


def write_report(results, out, **options) -> Path:
    path = Path(out)
    path.write_text(build_report(results, **options), encoding="utf-8")
    return path
