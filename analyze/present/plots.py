"""Figures for papers and design reviews, from results: an energy report, counts, a recost
frame, or an Analysis (a Trace or a path is taken as its shared Analysis, so every figure
of one trace reuses one mapping per model; plots never run an engine themselves).

Every function returns a matplotlib Figure built with the object-oriented API (no pyplot,
no global backend: the user's own plots and Jupyter's inline display are untouched) with a
title, axis labels with units and labels that do not overlap; `save(figure, path)` writes
.png, .svg, .pdf or a self-contained .html (the SVG inlined, nothing fetched when viewed).

    energy_by_layer(results)      stacked bars per module: compute and memory components
    stage_breakdown(results)      energy per stage (forward / backward / optimizer)
    spike_rate_heatmap(results)   layer x time step firing rate
    training_curve(results)       energy and spike rate per recorder step, over training
    roofline(results)             arithmetic intensity vs FLOPs per module, optional peaks
    sweep_curves(frame, key)      total energy vs a swept preset key (from recost)
    sweep_heatmap(frame, x, y)    total energy over two swept keys
    compare(results_a, results_b) per-module energy of two traces side by side

The functions that read a trace take `selection` (spiketrace.analyze.present.selection: a Selection or a
mapping of --stage/--phase/--step/--rank/--module): the energy of the selected stages, steps
and ranks, the counts and spike rates of the selected work.
"""

from __future__ import annotations

import html
import io
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from spiketrace.analyze.energy.scopes import scope_label, trace_phases
from spiketrace.analyze.present.counts import short_class
from spiketrace.analyze.present.selection import selection_of
from spiketrace.analyze.present.units import energy_scale
from spiketrace.analyze.results import Analysis
from spiketrace.analyze.trace.facts import module_classes

COMPONENT_COLOURS = {"mac_pj": "#4C72B0", "ac_pj": "#55A868", "parameter_memory_pj": "#C44E52",
                     "neuron_state_memory_pj": "#8172B2", "total_pj": "#937860"}


class PlotFigure(Figure):
    """A Figure that shows itself in Jupyter (as PNG) without pyplot or an inline backend."""

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", dpi=100)
        return buffer.getvalue()


def _figure(width: float, height: float) -> tuple[Figure, Axes]:
    figure = PlotFigure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)  # this figure's own raster canvas; the global backend is left alone
    return figure, figure.subplots()


def energy_report(results, model: str | None = None, preset=None, selection=None,
                  **options) -> tuple[Any, str | None]:
    """(report, model): `results` itself when it is an energy report, else its Analysis's
    report (cached mapping; model None = the trace's default) of `selection`."""
    if hasattr(results, "energy_by_module") or hasattr(results, "energy_by_stage"):
        if selection_of(selection):
            raise ValueError("a selection applies where a trace is read: pass the trace or its Analysis, not a report")
        return results, model
    analysis = Analysis.of(results)
    model = analysis.model(model, preset)
    options = {**selection_of(selection).energy_options(analysis.trace), **options}
    return analysis.energy(model, preset, **options), model


def _about(model: str | None, preset, *results, selection=None) -> str:
    """The title's note of which model and preset drew the figure, with the model's scope: of
    what the selection of `results` holds (inference: forward, ...), or the model's own label
    when a result is a report (no trace to read)."""
    if model is None:
        return ""
    return f"\n{model} ({scope_label(model, _phases(results, selection))}), {preset or 'default preset'}"


def _phases(results, selection) -> set[str] | None:
    """The phases the selection of `results` holds; None when a result is a report."""
    phases: set[str] = set()
    for result in results:
        if hasattr(result, "energy_by_module") or hasattr(result, "energy_by_stage"):
            return None  # a report: what it was mapped from is not at hand
        trace = _trace_of(result)
        with selection_of(selection).views(trace):
            phases |= set(trace_phases(trace))
    return phases


def _trace_of(results):
    return Analysis.of(results).trace


def _short(names: list[str]) -> list[str]:
    """Layer names without the root module's name they all share (Net.fc1 -> fc1)."""
    roots = {n.split(".", 1)[0] for n in names}
    return [n.split(".", 1)[1] if len(roots) == 1 and "." in n else n for n in names]


def layer_classes(results) -> dict[str, str]:
    """scope -> short class name, when `results` leads to a trace (a bare report does not)."""
    if hasattr(results, "energy_by_module") or hasattr(results, "energy_by_stage") or hasattr(results, "unsupported"):
        return {}
    modules = module_classes(Analysis.of(results).trace)
    return dict(zip(modules["scope"], modules["class_name"].map(short_class)))


def _labels(names, classes) -> list[str]:
    """`fc1 (Linear)`: where the layer is and what it is."""
    return [f"{short} ({classes[name]})" if name in classes else short for name, short in zip(names, _short(list(names)))]


def _layer_ticks(axes, names, classes=None) -> None:
    # vertical labels never collide, however long the module paths are
    axes.set_xticks(range(len(names)), _labels(list(names), classes or {}), rotation=90)


def _by_module_component(report) -> dict[str, dict[str, float]]:
    """{module: {component: pJ}}; a model without a component split gives one 'total' part."""
    split = getattr(report, "energy_by_module_component", None)
    return split if split else {m: {"total_pj": v} for m, v in (getattr(report, "energy_by_module", {}) or {}).items()}


def _leaf_modules(report) -> list[str]:
    scopes = list(_by_module_component(report))
    return [s for s in scopes if not any(o.startswith(s + ".") for o in scopes)]


def energy_by_layer(results, model: str | None = None, preset=None, classes=None, selection=None, **options):
    classes = layer_classes(results) if classes is None else classes
    report, model = energy_report(results, model, preset, selection, **options)
    layers = _leaf_modules(report)
    split = _by_module_component(report)
    table = pd.DataFrame({layer: split[layer] for layer in layers}).T.fillna(0.0)
    known = [c for c in COMPONENT_COLOURS if c in table.columns]
    table = table[known + [c for c in table.columns if c not in known]]  # a model's own components last
    scale, unit = energy_scale(table.sum(axis=1).to_numpy())
    figure, axes = _figure(max(6.0, 0.45 * len(layers) + 3), 5)
    bottom = np.zeros(len(table))
    for component in table.columns:
        values = table[component].to_numpy() / scale
        axes.bar(range(len(table)), values, bottom=bottom, label=component.removesuffix("_pj").replace("_", " "),
                 color=COMPONENT_COLOURS.get(component))
        bottom += values
    _layer_ticks(axes, table.index, classes)
    axes.set_ylabel(f"energy ({unit})")
    axes.set_xlabel(f"layer (in {table.index[0].split('.')[0]})" if len(table) else "layer")
    axes.set_title(f"Energy per layer by component{_about(model, preset, results, selection=selection)}")
    if axes.get_legend_handles_labels()[0]:  # a model that costed nothing draws no bars
        axes.legend(loc="upper right", fontsize="small")
    return figure


def stage_breakdown(results, model: str | None = None, preset=None, selection=None, **options):
    report, model = energy_report(results, model, preset, selection, **options)
    stages = pd.Series(report.energy_by_stage).sort_values(ascending=False)
    scale, unit = energy_scale(stages.to_numpy())
    figure, axes = _figure(6, 4)
    bars = axes.bar(stages.index, stages.to_numpy() / scale, color="#4C72B0")
    total = stages.sum()
    axes.bar_label(bars, labels=[f"{100 * v / total:.1f}%" if total else "" for v in stages], padding=2)
    axes.set_ylabel(f"energy ({unit})")
    axes.set_xlabel("stage")
    axes.set_title(f"Energy per stage{_about(model, preset, results, selection=selection)}")
    axes.margins(y=0.15)
    return figure


def spike_rate_heatmap(results, selection=None):
    trace = _trace_of(results)
    with selection_of(selection).views(trace):
        rates = trace.sql("SELECT scope, time_step, sum(ones) / sum(elements) AS rate FROM step_spike_rates GROUP BY ALL")
    if rates.empty:
        raise ValueError(f"{trace.path}: no binary module outputs, so no spike rates to plot")
    if rates["time_step"].notna().any():  # pass-through layers without per-step outputs are left out
        rates = rates.dropna(subset=["time_step"])
    else:  # only sequence averages are known: one column
        rates = rates.assign(time_step=0)
    grid = rates.pivot(index="scope", columns="time_step", values="rate").sort_index()
    figure, axes = _figure(max(5.0, 0.5 * grid.shape[1] + 4), max(3.0, 0.4 * grid.shape[0] + 1.5))
    image = axes.imshow(grid.to_numpy(dtype=float), aspect="auto", cmap="viridis", vmin=0)
    axes.set_yticks(range(len(grid)), _labels(list(grid.index), layer_classes(results)))
    axes.set_xticks(range(grid.shape[1]), [str(int(t)) for t in grid.columns])
    axes.set_xlabel("time step")
    axes.set_ylabel("layer")
    axes.set_title("Spike rate per layer and time step")
    figure.colorbar(image, ax=axes, label="spike rate (fraction of ones)")
    return figure


def training_curve(results, model: str | None = None, preset=None, selection=None, **options):
    """Energy per recorder step (the model's energy_by_step, all ranks) and the spike rate of
    the binary layer outputs per step (the training_spike_rates view): the energy-over-training
    picture of a long run or a schedule."""
    report, model = energy_report(results, model, preset, selection, **options)
    energy = pd.Series({int(step): pj for step, pj in report.energy_by_step.items()}).sort_index()
    if energy.empty:
        raise ValueError("no recorder steps with energy: nothing to draw over training")
    trace = _trace_of(results)
    with selection_of(selection).views(trace):
        rates = trace.sql(
            "SELECT step, sum(ones) / sum(elements) AS rate FROM training_spike_rates GROUP BY step ORDER BY step")
    scale, unit = energy_scale(energy.to_numpy())
    figure = PlotFigure(figsize=(max(8.0, 0.15 * len(energy) + 5), 5.5), layout="constrained")
    FigureCanvasAgg(figure)
    energy_axes, rate_axes = figure.subplots(2, 1, sharex=True)
    energy_axes.plot(energy.index, energy.to_numpy() / scale, marker="o", color="#4C72B0")
    energy_axes.set_ylabel(f"energy per step ({unit})")
    energy_axes.set_title(f"Energy and spike rate over training{_about(model, preset, results, selection=selection)}")
    energy_axes.tick_params(labelbottom=False)
    rate_axes.plot(rates["step"], rates["rate"], marker="s", color="#C44E52")
    rate_axes.set_ylabel("spike rate")
    rate_axes.set_ylim(bottom=0)
    rate_axes.set_xlabel("recorder step")
    rate_axes.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    for axes in (energy_axes, rate_axes):  # ticks matplotlib places beyond the limits carry labels too
        low, high = axes.get_ylim()
        axes.set_yticks([tick for tick in axes.get_yticks() if low <= tick <= high])
    return figure


def roofline(results, *, peak_flops: float | None = None, bandwidth: float | None = None, classes=None,
             selection=None):
    """Per leaf module its arithmetic intensity (FLOP per byte, from SpikingJelly's flop and
    memory_access counters). Given the machine (peak_flops in FLOP/s, bandwidth in byte/s)
    this is a roofline: the roof min(peak, bandwidth x intensity) is drawn and each layer
    sits at the performance it can attain on it (y in FLOP/s), memory-bound left of the
    ridge point, compute-bound right of it. Without the machine there is no roof: y is each
    layer's work in FLOPs, and the title says so."""
    result = results if hasattr(results, "unsupported") else Analysis.of(results).counts()  # a CounterResult or its source
    classes = layer_classes(results) if classes is None else classes
    frame = result.frame[result.frame["counter"].isin(["flop", "memory_access"])]
    totals = frame.groupby(["counter", "scope"])["value"].sum().unstack("counter").fillna(0)
    scopes = list(totals.index)
    leaves = [s for s in scopes if s != "Global" and not any(o.startswith(s + ".") for o in scopes)]
    data = totals.loc[leaves]
    data = data[(data["flop"] > 0) & (data["memory_access"] > 0)]
    intensity = data["flop"] / data["memory_access"]
    machine = bool(peak_flops and bandwidth)
    height = np.minimum(peak_flops, bandwidth * intensity) if peak_flops and bandwidth else data["flop"]
    figure, axes = _figure(6.5, 4.5)
    axes.scatter(intensity, height, color="#4C72B0", zorder=3)
    for name, x, y in zip(data.index, intensity, height):
        label = name.rsplit(".", 1)[-1] + (f" ({classes[name]})" if name in classes else "")
        axes.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize="small")
    if peak_flops and bandwidth:  # the machine
        # the roof: bandwidth-bound slope up to the ridge, then the compute peak
        ridge = peak_flops / bandwidth
        low = min(float(intensity.min()) if len(intensity) else ridge, ridge) / 4
        high = max(float(intensity.max()) if len(intensity) else ridge, ridge) * 4
        xs = np.array([low, ridge, high])
        axes.plot(xs, np.minimum(peak_flops, bandwidth * xs), color="#55A868", linewidth=2, label="roof")
        axes.axvline(ridge, color="#C44E52", linestyle="--", label=f"ridge point {ridge:g} FLOP/byte")
        axes.set_yscale("log")
        axes.set_ylim(min(float(bandwidth * low), float(height.min()) if len(height) else peak_flops) / 3, peak_flops * 3)
        axes.text(ridge, peak_flops * 2.5, " compute-bound →", ha="left", va="top", fontsize="small", color="#C44E52")
        axes.text(ridge, peak_flops * 2.5, "← memory-bound ", ha="right", va="top", fontsize="small", color="#C44E52")
        axes.legend(loc="lower right", fontsize="small")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("arithmetic intensity (FLOP / byte)")
    axes.set_ylabel("attainable performance (FLOP/s)" if machine else "work (FLOPs)")
    axes.margins(x=0.2, y=0.2)
    axes.set_title("Roofline per layer" if machine else "Work and intensity per layer\n(no roof: give peak FLOP/s and bandwidth)")
    return figure


def _totals(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["key"].isin(["energy_total_pj", "total_pj"])]


def _short_number(value) -> str:
    """A swept value as a label: 0.30000000000000004 -> 0.3 (six significant digits)."""
    return f"{value:.6g}" if isinstance(value, (float, np.floating)) else str(value)


def sweep_curves(frame: pd.DataFrame, key: str):
    totals = _totals(frame).dropna(subset=[key]).sort_values(key)
    scale, unit = energy_scale(totals["pj"].to_numpy())
    figure, axes = _figure(6, 4)
    others = [c for c in frame.columns if c not in ("preset", "breakdown", "key", "pj", "count", key)]
    groups = totals.groupby(others, dropna=False) if others else [("", totals)]
    for label, group in groups:
        name = ", ".join(f"{k}={_short_number(v)}" for k, v in zip(others, np.atleast_1d(label))) if others else None
        axes.plot(group[key], group["pj"] / scale, marker="o", label=name)
    if others:
        axes.legend(fontsize="small")
    axes.set_xlabel(key)
    axes.set_ylabel(f"total energy ({unit})")
    axes.set_title(f"Total energy vs {key}")
    return figure


def sweep_heatmap(frame: pd.DataFrame, x: str, y: str):
    totals = _totals(frame).dropna(subset=[x, y])
    grid = totals.pivot_table(index=y, columns=x, values="pj", aggfunc="mean").sort_index(ascending=False)
    scale, unit = energy_scale(grid.to_numpy().ravel())
    figure, axes = _figure(6.5, 4.5)
    image = axes.imshow(grid.to_numpy() / scale, aspect="auto", cmap="magma")
    axes.set_xticks(range(grid.shape[1]), [f"{v:g}" for v in grid.columns], rotation=35, ha="right")
    axes.set_yticks(range(grid.shape[0]), [f"{v:g}" for v in grid.index])
    axes.set_xlabel(x)
    axes.set_ylabel(y)
    axes.set_title("Total energy over two preset parameters")
    figure.colorbar(image, ax=axes, label=f"total energy ({unit})")
    return figure


def compare(results_a, results_b, model: str | None = None, preset=None, labels=("A", "B"), classes=None,
            selection=None, **options):
    classes = layer_classes(results_a) if classes is None else classes
    (a, model), (b, _) = (energy_report(r, model, preset, selection, **options) for r in (results_a, results_b))
    layers = sorted(set(_leaf_modules(a)) | set(_leaf_modules(b)))
    values = np.array([[a.energy_by_module.get(layer, 0.0), b.energy_by_module.get(layer, 0.0)] for layer in layers])
    scale, unit = energy_scale(values.ravel())
    figure, axes = _figure(max(6.0, 0.8 * len(layers) + 3), 4.5)
    positions = np.arange(len(layers))
    for column, (label, colour) in enumerate(zip(labels, ("#4C72B0", "#DD8452"))):
        axes.bar(positions + (column - 0.5) * 0.4, values[:, column] / scale, width=0.4, label=label, color=colour)
    axes.set_xticks(positions, _labels(layers, classes), rotation=90)
    axes.set_ylabel(f"energy ({unit})")
    axes.set_xlabel("layer")
    axes.set_title(f"Energy per layer: {labels[0]} vs {labels[1]}"
                   f"{_about(model, preset, results_a, results_b, selection=selection)}")
    axes.legend()
    return figure


def save(figure, path: str | Path) -> Path:
    path = Path(path)
    if path.suffix == ".html":
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg")
        svg = buffer.getvalue()
        svg = svg[svg.index("<svg"):]  # inline SVG in HTML takes no XML prolog or DOCTYPE
        title = figure.axes[0].get_title() if figure.axes else "spiketrace plot"
        path.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                        f"</head><body>{svg}</body></html>")
    elif path.suffix in (".png", ".svg", ".pdf"):
        figure.savefig(path, dpi=150)
    else:
        raise ValueError(f"{path}: choose .png, .svg, .pdf or .html")
    return path
