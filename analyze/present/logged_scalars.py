"""The scalars a live analysis logged, drawn per step: read back from its CSV sink
(spiketrace.capture.live.CsvSink: step, recorder_step, name, value), one panel per scalar.

    from spiketrace.analyze.present import logged_scalars, plots
    plots.save(logged_scalars.figure("runs/scalars.csv"), "logged.png")
"""

from __future__ import annotations

import os

import pandas as pd

from spiketrace.analyze.present.plots import PlotFigure
from spiketrace.analyze.present.units import energy_scale

COLUMNS = ("step", "recorder_step", "name", "value")
DEFAULT_NAMES = ("spiketrace/energy_pj", "spiketrace/synop")


def read(path: str | os.PathLike) -> pd.DataFrame:
    """The CSV sink's rows as a step x name table; ValueError naming the file if it is not one."""
    frame = pd.read_csv(path)
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: not a spiketrace CSV sink (no column {missing[0]!r})")
    return frame.pivot_table(index="step", columns="name", values="value", aggfunc="last").sort_index()


def figure(path: str | os.PathLike, names: tuple[str, ...] | None = None):
    """One panel per scalar in `names` that was logged (default: every training energy and the
    synaptic operations), against the training step; the spike rates of every layer share one
    more panel."""
    table = read(path)
    if names is None:
        names = (*sorted(c for c in table.columns if c.startswith("spiketrace/energy_pj")), *DEFAULT_NAMES[1:])
    shown = [n for n in names if n in table.columns]
    rates = [c for c in table.columns if "/spike_rate/" in c and "/validation/" not in c]
    panels = len(shown) + bool(rates)
    if not panels:
        raise ValueError(f"{path}: none of {list(names)} nor a spike rate was logged")
    fig = PlotFigure(figsize=(7.5, 2.1 * panels), layout="constrained")
    axes = list(fig.subplots(panels, 1, sharex=True, squeeze=False)[:, 0])
    for ax, name in zip(axes, shown):
        values = table[name].dropna()
        if "energy_pj" in name:
            scale, unit = energy_scale(values)
            ax.plot(values.index, values / scale, marker="o")
            ax.set_ylabel(f"energy ({unit})")
        else:
            ax.plot(values.index, values, marker="o")
            ax.set_ylabel(name.split("/", 1)[-1])
        ax.set_title(name, fontsize=9, loc="left")
    if rates:
        ax = axes[len(shown)]
        for name in rates:
            ax.plot(table.index, table[name], marker=".", label=name.split("/spike_rate/")[-1])
        ax.set_ylabel("spike rate")
        ax.set_title("spike rate per layer", fontsize=9, loc="left")
        ax.legend(fontsize=7)
    axes[-1].set_xlabel("training step (the framework's global step)")
    return fig
