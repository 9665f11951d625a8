"""Every plot: drawn from the right numbers, titled, labelled with units, no overlapping text,
saved as png/svg/html, and reachable from `spiketrace plot`."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from spiketrace.analyze import open_trace
from spiketrace.analyze.cli import main
from spiketrace.analyze.energy import energy, recost
from spiketrace.analyze.present import plots
from spiketrace.capture import Recorder
from tests.zoo import CASES, OPTIMIZERS, build, run_steps


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("plots") / "trace"
    case = CASES[3]  # multi-step LIF / IF / PLIF conv net
    model, x = build(case)
    optimizer = OPTIMIZERS["adam"](model.parameters())
    with Recorder(path, model=model, optimizer=optimizer) as recorder:
        run_steps(recorder, model, x, case, optimizer)
    return path


def texts_overlap(figure) -> list[tuple[str, str]]:
    """Pairs of visible, non-empty texts (titles, labels, tick labels) whose boxes intersect."""
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    texts = []
    for axes in figure.axes:
        candidates = [axes.title, axes.xaxis.label, axes.yaxis.label, *axes.get_xticklabels(), *axes.get_yticklabels()]
        texts += [(t.get_text(), t.get_window_extent(renderer)) for t in candidates if t.get_visible() and t.get_text()]
    return [(a, b) for (a, box_a), (b, box_b) in itertools.combinations(texts, 2)
            if box_a.overlaps(box_b) and box_a.width > 0 and box_b.width > 0]


def check(figure, title_part: str, y_unit: str | None = None):
    axes = figure.axes[0]
    assert title_part in axes.get_title()
    assert axes.get_xlabel() and axes.get_ylabel()
    if y_unit:
        assert y_unit in axes.get_ylabel()
    assert texts_overlap(figure) == []


def pj_per_axis_unit(axes) -> float:
    """pJ per unit of the y axis, read from its label ("energy (nJ)")."""
    unit = axes.get_ylabel().split("(")[1].rstrip(")")
    return {"pJ": 1, "nJ": 1e3, "µJ": 1e6, "mJ": 1e9}[unit]


def test_energy_by_layer_stacks_the_reports_components(trace_path):
    with open_trace(trace_path) as trace:
        report = energy(trace, "compute")
        figure = plots.energy_by_layer(trace, "compute")
    check(figure, "Energy per layer", "(")
    axes = figure.axes[0]
    root = next(iter(report.energy_by_module_component)).split(".")[0]
    layers = [f"{root}.{t.get_text().split(' (')[0]}" for t in axes.get_xticklabels()]  # "fc1 (Linear)"
    scale = pj_per_axis_unit(axes)
    heights = {}
    for patch in axes.patches:  # stacked: sum per x position
        position = round(patch.get_x() + patch.get_width() / 2)
        heights[layers[position]] = heights.get(layers[position], 0) + patch.get_height() * scale
    for layer in layers:
        assert heights[layer] == pytest.approx(sum(report.energy_by_module_component[layer].values()), rel=1e-9)


def test_stage_breakdown_sums_to_the_total(trace_path):
    with open_trace(trace_path) as trace:
        report = energy(trace, "compute")
        figure = plots.stage_breakdown(trace, "compute")
    check(figure, "Energy per stage", "(")
    axes = figure.axes[0]
    assert {t.get_text() for t in axes.get_xticklabels()} == {"forward", "backward", "optimizer"}
    scale = pj_per_axis_unit(axes)
    assert sum(p.get_height() for p in axes.patches) * scale == pytest.approx(report.energy_total_pj, rel=1e-9)


def test_spike_heatmap_cells_are_the_views_rates(trace_path):
    with open_trace(trace_path) as trace:
        rates = trace.sql("SELECT scope, time_step, ones / elements AS rate FROM step_spike_rates "
                          "WHERE time_step IS NOT NULL")  # Flatten passes spikes on without steps
        figure = plots.spike_rate_heatmap(trace)
    check(figure, "Spike rate")
    grid = figure.axes[0].images[0].get_array()
    root = rates["scope"].iloc[0].split(".")[0]
    layers = [f"{root}.{t.get_text().split(' (')[0]}" for t in figure.axes[0].get_yticklabels()]
    assert grid.shape == (rates["scope"].nunique(), rates["time_step"].nunique())
    for scope, step, rate in rates.itertuples(index=False):
        assert grid[layers.index(scope), int(step)] == pytest.approx(rate)


def test_training_curve_draws_each_steps_energy_and_spike_rate(tmp_path):
    from tests.training_runs import record

    path = record(tmp_path / "t", 4)  # 4 training steps of a spiking conv net, each with an eval forward
    with open_trace(path) as trace:
        report = energy(trace, "neuromc")
        figure = plots.training_curve(trace, "neuromc")
        # By hand: the spike rate of a step is sum(nnz) / sum(numel) over the binary outputs of
        # the forward calls of the layers in that step, training and eval: LIF, Flatten, IF (the
        # neurons are not leaves: their surrogate function is a child module).
        by_hand = trace.sql(
            "SELECT e.step, sum(t.nnz) / sum(t.numel) AS rate FROM module_events e "
            "JOIN modules m ON m.rank = e.rank AND m.module_id = e.module_id "
            "JOIN tensor_states t ON t.rank = e.rank AND t.tensor_id = e.outputs[1] "
            "WHERE e.kind = 'forward_post' AND (m.is_leaf OR m.class_name IN ('LIFNode', 'IFNode')) AND t.is01 "
            "GROUP BY e.step ORDER BY e.step")
    energy_axes, rate_axes = figure.axes
    [energy_line], [rate_line] = energy_axes.get_lines(), rate_axes.get_lines()
    steps = sorted(int(step) for step in report.energy_by_step)
    assert list(energy_line.get_xdata()) == steps == [0, 1, 2, 3]
    unit = energy_axes.get_ylabel().split("(")[1].rstrip(")")
    scale = {"pJ": 1, "nJ": 1e3, "µJ": 1e6, "uJ": 1e6, "mJ": 1e9, "J": 1e12}[unit]
    np.testing.assert_allclose(energy_line.get_ydata() * scale, [report.energy_by_step[str(s)] for s in steps],
                               rtol=1e-9)
    assert sum(report.energy_by_step.values()) == pytest.approx(report.energy_total_pj, rel=1e-9)
    np.testing.assert_allclose(rate_line.get_ydata(), by_hand["rate"].to_numpy(), rtol=1e-12)
    assert 0 < min(rate_line.get_ydata()) and "training" in energy_axes.get_title() and not texts_overlap(figure)


def test_roofline_points_and_ridge(trace_path):
    with open_trace(trace_path) as trace:
        figure = plots.roofline(trace, peak_flops=1e12, bandwidth=1e11)
    check(figure, "Roofline")
    axes = figure.axes[0]
    assert len(axes.collections[0].get_offsets()) > 0
    ridge = [line for line in axes.lines if line.get_linestyle() == "--"][0]
    assert ridge.get_xdata()[0] == pytest.approx(10.0)  # 1e12 / 1e11 FLOP/byte
    # a roofline's y is attainable FLOP/s: each layer on the roof min(peak, bandwidth x intensity)
    assert axes.get_ylabel() == "attainable performance (FLOP/s)"
    for x, y in axes.collections[0].get_offsets():
        assert y == pytest.approx(min(1e12, 1e11 * x))
    with open_trace(trace_path) as trace:
        bare = plots.roofline(trace)  # no machine: no roof, and the title says so
    assert bare.axes[0].get_ylabel() == "work (FLOPs)" and "no roof" in bare.axes[0].get_title()


def test_sweep_plots_follow_the_recost_frame(trace_path):
    with open_trace(trace_path) as trace:
        frame = recost(trace, "compute", sweep={"e_mac_pj": [1.0, 2.0, 4.0], "e_ac_pj": [0.1, 0.9]})
    curves = plots.sweep_curves(frame, "e_mac_pj")
    check(curves, "Total energy vs e_mac_pj")
    assert len(curves.axes[0].lines) == 2  # one curve per e_ac_pj value
    heat = plots.sweep_heatmap(frame, "e_mac_pj", "e_ac_pj")
    check(heat, "two preset parameters")
    assert heat.axes[0].images[0].get_array().shape == (2, 3)


def test_compare_and_saving_formats(trace_path, tmp_path):
    with open_trace(trace_path) as a, open_trace(trace_path) as b:
        figure = plots.compare(a, b, labels=("before", "after"))
    check(figure, "before vs after")
    heights = np.array([p.get_height() for p in figure.axes[0].patches])
    half = len(heights) // 2
    assert np.allclose(heights[:half], heights[half:])  # the same trace twice
    html = plots.save(figure, tmp_path / "c.html").read_text()
    assert html.startswith("<!doctype html>") and "<svg" in html and "DOCTYPE svg" not in html
    assert 'src="http' not in html and 'href="http' not in html and "<link" not in html  # nothing fetched
    with pytest.raises(ValueError, match="choose"):
        plots.save(plots.stage_breakdown(open_trace(trace_path)), tmp_path / "x.bmp")


@pytest.mark.parametrize("kind, extra", [
    ("energy", []), ("stages", ["--preset", "compute-int8-45nm"]), ("spikes", []), ("training", []),
    ("roofline", ["--peak-flops", "1e12", "--bandwidth", "1e11"]),
])
def test_plot_cli(trace_path, tmp_path, kind, extra):
    out = tmp_path / f"{kind}.png"
    result = CliRunner().invoke(main, ["plot", str(trace_path), kind, "--out", str(out), *extra])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_cli_sweep_and_errors(trace_path, tmp_path):
    runner = CliRunner()
    table = tmp_path / "r.parquet"
    assert runner.invoke(main, ["recost", str(trace_path), "--sweep", "e_mac_pj=1:3:3", "--out", str(table)]).exit_code == 0
    ok = runner.invoke(main, ["plot", str(trace_path), "sweep", "--recost", str(table), "--x", "e_mac_pj",
                              "--out", str(tmp_path / "s.svg")])
    assert ok.exit_code == 0, ok.output
    assert pd.read_parquet(table)["e_mac_pj"].nunique() == 3
    missing = runner.invoke(main, ["plot", str(trace_path), "sweep", "--recost", str(table), "--x", "nope",
                                   "--out", str(tmp_path / "s.svg")])
    assert missing.exit_code == 2 and "no swept column 'nope'" in missing.output


def test_neuromc_layers_split_into_compute_and_memory_levels(trace_path):
    with open_trace(trace_path) as trace:
        report = energy(trace, "neuromc")
        figure = plots.energy_by_layer(trace, "neuromc")
    for module, parts in report.energy_by_module_component.items():
        assert sum(parts.values()) == pytest.approx(report.energy_by_module[module], rel=1e-9)
        assert any(p.endswith("_memory_pj") for p in parts) and "mac_pj" in parts
    labels = {t.get_text() for t in figure.axes[0].get_legend().get_texts()}
    assert {"mac", "sram memory"} <= labels
    check(figure, "Energy per layer", "(")
