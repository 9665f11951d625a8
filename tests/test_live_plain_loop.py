"""spiketrace.capture.live.LiveAnalysis in a hand-written loop: as a Recorder's on_trace_ready
it analyses each flushed cycle in a worker process and writes the scalars to the file sinks,
equal to `spiketrace counts --step N`; its queue is bounded, the oldest cycle dropped with a
warning; a sink that fails is skipped once, never raised into the loop."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest

from spiketrace.capture import schedule
from spiketrace.capture.live import CsvSink, LiveAnalysis, TensorBoardSink
from tests.sink_readers import read_csv, read_tensorboard
from tests.test_live_analysis import record as record_steps

EVERY_SECOND_STEP = schedule(wait=1, active=1)


def train(path, steps: int, live, record=EVERY_SECOND_STEP) -> None:
    """The example SNN trained `steps` steps, those `record` picks recorded, `live` told of each cycle."""
    record_steps(path, steps=steps, steps_recorded=record, on_trace_ready=live)


def test_a_plain_loop_logs_each_recorded_step(tmp_path):
    live = LiveAnalysis([CsvSink(tmp_path / "scalars.csv"), TensorBoardSink(tmp_path / "tb")], energy=[(None, None)])
    train(tmp_path / "trace", 6, live)
    live.close()
    assert live.summary()["cycles"] == {"submitted": 3, "analysed": 3, "dropped": 0}
    logged = read_csv(tmp_path / "scalars.csv")
    assert sorted(logged) == [1, 3, 5]  # schedule(wait=1, active=1): every second step, at its own number
    assert read_tensorboard(tmp_path / "tb").keys() == logged.keys()
    for step, scalars in logged.items():
        counts = json.loads(subprocess.run(
            [sys.executable, "-m", "spiketrace.analyze.cli", "counts", str(tmp_path / "trace"), "--step", str(step),
             "--format", "json"], capture_output=True, text=True, check=True).stdout)
        assert {c: scalars[f"spiketrace/{c}"] for c in counts["counters"]} == \
            {c: float(e["total"]) for c, e in counts["counters"].items()}
    assert [row["step"] for row in live.rows] == [1, 3, 5]


def test_the_queue_is_bounded_and_drops_the_oldest_with_a_warning(tmp_path, caplog):
    """Every step recorded, a cycle each, faster than a worker analyses them (it starts and
    opens the trace for each): at most one waits; the others are dropped, oldest first."""
    live = LiveAnalysis([CsvSink(tmp_path / "scalars.csv")], max_pending=1)
    with caplog.at_level(logging.WARNING, logger="spiketrace"):
        train(tmp_path / "trace", 12, live, record=None)
        live.close()
    cycles = live.summary()["cycles"]
    assert cycles["submitted"] == 1  # without a schedule the Recorder reports once, at close
    live = LiveAnalysis([CsvSink(tmp_path / "each.csv")], max_pending=1)
    with caplog.at_level(logging.WARNING, logger="spiketrace"):
        train(tmp_path / "each", 12, live, record=schedule(active=1))
        live.close()
    cycles = live.summary()["cycles"]
    assert cycles["submitted"] == 13  # 12 cycles, and at close the step begun after the last (empty)
    assert cycles["dropped"] > 0 and cycles["analysed"] + cycles["dropped"] == 13
    assert any("merged into the next" in r.getMessage() for r in caplog.records)
    # A plain loop's request asks for every step not answered yet ("steps": null), so a later
    # request takes up the steps of one dropped: no step is lost, only analysed later.
    assert sorted(read_csv(tmp_path / "each.csv")) == list(range(12))


def test_a_failing_sink_never_reaches_the_loop(tmp_path, caplog):
    (tmp_path / "taken").write_text("a file where the CSV sink wants a folder")
    live = LiveAnalysis([CsvSink(tmp_path / "taken" / "scalars.csv"), TensorBoardSink(tmp_path / "tb")])
    with caplog.at_level(logging.WARNING, logger="spiketrace"):
        train(tmp_path / "trace", 4, live)
        live.close()
    failures = live.summary()["sink_failures"]
    assert [f["sink"] for f in failures] == ["csv"]
    assert sum("csv" in r.getMessage() for r in caplog.records) == 1
    assert sorted(read_tensorboard(tmp_path / "tb")) == [1, 3]


def test_the_logged_scalars_figure_draws_each_scalar_logged(tmp_path):
    from spiketrace.analyze.present import logged_scalars

    sink = tmp_path / "scalars.csv"
    sink.write_text("step,recorder_step,name,value\n"
                    "1,0,spiketrace/energy_pj,1000.0\n1,0,spiketrace/synop,10\n1,0,spiketrace/spike_rate/L.sn,0.1\n"
                    "5,1,spiketrace/energy_pj,3000.0\n5,1,spiketrace/synop,30\n5,1,spiketrace/spike_rate/L.sn,0.3\n")
    figure = logged_scalars.figure(sink)
    titles = [axes.get_title(loc="left") for axes in figure.axes]
    assert titles == ["spiketrace/energy_pj", "spiketrace/synop", "spike rate per layer"]
    # the energy panel in nJ (1000 and 3000 pJ), at the logged steps
    x, y = figure.axes[0].lines[0].get_data()
    assert list(x) == [1, 5] and list(y) == [1.0, 3.0] and figure.axes[0].get_ylabel() == "energy (nJ)"
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="other.csv: not a spiketrace CSV sink"):
        logged_scalars.figure(tmp_path / "other.csv")
