"""spiketrace.capture.lightning.SpiketraceCallback in real Lightning fits: the traces equal a
hand-placed Recorder's on the same steps from the same weights, and the scalars logged to
Lightning's loggers and the file sinks equal `spiketrace counts/energy` on the same step."""

from __future__ import annotations

import copy
import csv
import json
import logging
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch

from spiketrace.analyze import open_trace
from spiketrace.capture import schedule
from spiketrace.capture.lightning import SpiketraceCallback
from spiketrace.capture.live import CsvSink
from tests.loop_models import SpikingClassifier, dataset, hand_recorded_fit, loader

COUNTERS = ["flop", "mac", "ac", "synop", "memory_access"]


def _trainer(tmp_path, callback, epochs=2, **options):
    options.setdefault("logger", L.pytorch.loggers.CSVLogger(tmp_path / "logs", name="run"))
    return L.Trainer(max_epochs=epochs, callbacks=[callback], accelerator="cpu", devices=1,
                     enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                     num_sanity_val_steps=0, **options)


def stage_totals(path, step=None) -> dict:
    """{(stage, counter): total} of a trace (or of one of its steps), by the offline counters."""
    from spiketrace.analyze import count

    with open_trace(path) as trace:
        result = count(trace, COUNTERS, by=("stage",), step=step)
        frame = result.frame[result.frame["scope"] == "Global"]
        return {(row.stage, row.counter): int(row.value) for row in frame.itertuples()}


def recorded_training_steps(path) -> list[int]:
    with open_trace(path) as trace:
        return [f["step"] for f in trace.manifest["step_facts"] if f["kind"] == "train"]


def _fit_both(tmp_path, recorded: set[int], *, accumulate=1, manual=False, precision=None, epochs=2):
    torch.manual_seed(0)
    module = SpikingClassifier(manual=manual)
    twin = copy.deepcopy(module)  # the same weights, for the hand-placed run
    batches = loader(dataset())
    callback = SpiketraceCallback(tmp_path / "traces", schedule=lambda step: step in recorded, log=False)
    options = {"accumulate_grad_batches": accumulate} if accumulate > 1 else {}
    if precision:
        options["precision"] = precision
    _trainer(tmp_path, callback, epochs=epochs, **options).fit(module, batches)
    hand_recorded_fit(tmp_path / "hand", twin, list(batches), recorded, epochs, accumulate=accumulate,
                      autocast=precision == "bf16-mixed")
    return callback, module, twin


@pytest.mark.parametrize("case", [
    {},                                   # automatic optimization
    {"accumulate": 2},                    # gradient accumulation: batches 0, 2 do not step
    {"manual": True},                     # manual optimization: the user's backward and step
    {"precision": "bf16-mixed"},          # autocast to bf16 on CPU
], ids=["automatic", "accumulate", "manual", "bf16"])
def test_fit_trace_equals_a_hand_placed_recorder(tmp_path, case):
    recorded = {0, 1, 5}
    callback, module, twin = _fit_both(tmp_path, recorded, **case)
    assert callback.traces == [str(tmp_path / "traces" / "fit")]
    # The callback changed nothing of the run: the same weights as a fit without it.
    torch.manual_seed(0)
    plain = SpikingClassifier(manual=case.get("manual", False))
    options = {"accumulate_grad_batches": case["accumulate"]} if "accumulate" in case else {}
    L.Trainer(max_epochs=2, accelerator="cpu", devices=1, enable_progress_bar=False, enable_model_summary=False,
              enable_checkpointing=False, logger=False, precision=case.get("precision"), **options).fit(
        plain, loader(dataset()))
    for a, b in zip(module.parameters(), plain.parameters()):
        assert torch.equal(a, b)
    fit, hand = tmp_path / "traces" / "fit", tmp_path / "hand"
    assert subprocess.run([sys.executable, "-m", "spiketrace.analyze.cli", "validate", str(fit)],
                          capture_output=True).returncode == 0
    assert stage_totals(fit) == stage_totals(hand)
    # step by step, in order
    for ours, theirs in zip(recorded_training_steps(fit), sorted(recorded), strict=True):
        assert stage_totals(fit, ours) == stage_totals(hand, theirs)
    with open_trace(fit) as trace:
        stages = set(trace.sql("SELECT DISTINCT stage FROM events")["stage"])
        optimizer_rows = trace.sql("SELECT count(*) AS n, bool_and(has_grad) AS grads FROM optimizer_steps")
    steps_with_update = 3 if case.get("accumulate") != 2 else 2  # steps 1 and 5 (of 0, 1, 5) end a pair
    assert stages == {"forward", "backward", "optimizer"}
    assert int(optimizer_rows["n"][0]) == 4 * steps_with_update  # 4 parameters per update
    assert bool(optimizer_rows["grads"][0])  # taken after the closure's backward


def test_validation_and_test_recorded_as_inference(tmp_path):
    torch.manual_seed(0)
    module = SpikingClassifier()
    batches = loader(dataset())
    callback = SpiketraceCallback(tmp_path / "traces", schedule=lambda step: step == 0, inference=True,
                                  inference_schedule=lambda index: index < 2, log=False)
    trainer = L.Trainer(max_epochs=1, callbacks=[callback], accelerator="cpu", devices=1, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, num_sanity_val_steps=2, logger=False)
    trainer.fit(module, batches, batches)
    trainer.test(module, batches)
    fit, test = (tmp_path / "traces" / name for name in ("fit", "test"))
    assert callback.traces == [str(fit), str(test)]
    with open_trace(fit) as trace:
        kinds = [(f["kind"], f["index"]) for f in trace.manifest["step_facts"]]
        stages = trace.sql("SELECT stage, any_value(phase) AS phase FROM events GROUP BY stage ORDER BY stage")
    # the sanity check's two batches are never recorded; validation counts its own batches
    assert kinds == [("train", 0), ("validation", 0), ("validation", 1)]
    assert dict(zip(stages["stage"], stages["phase"])) == {
        "backward": "backward", "forward": "forward", "optimizer": "optimizer", "validation": "forward"}
    # one validation batch costs what the same forward costs by hand, under no_grad
    torch.manual_seed(0)
    with torch.no_grad():
        from spiketrace.capture import Recorder

        hand = tmp_path / "hand"
        twin = SpikingClassifier()
        twin.load_state_dict(module.state_dict())
        with Recorder(hand, model=twin) as rec, rec.stage("test", phase="forward"):
            twin.loss_of(next(iter(batches)))
    with open_trace(test) as trace:
        first = trace.manifest["step_facts"][0]["step"]
    assert {k[1]: v for k, v in stage_totals(test, first).items()} == \
        {k[1]: v for k, v in stage_totals(hand).items()}


def test_logged_scalars_equal_the_cli_on_the_same_step(tmp_path):
    torch.manual_seed(0)
    module = SpikingClassifier()
    callback = SpiketraceCallback(tmp_path / "traces", schedule=schedule(skip_first=1, wait=2, active=1, skip_first_wait=1),
                                  sinks=[CsvSink(tmp_path / "scalars.csv")])
    _trainer(tmp_path, callback).fit(module, loader(dataset()))
    fit = tmp_path / "traces" / "fit"
    with open_trace(fit) as trace:
        facts = [f for f in trace.manifest["step_facts"] if f["kind"] == "train"]
        summary = trace.manifest["loop"]["live_analysis"]
        assert trace.manifest["unrecorded_threads"] == []  # the analysis's own thread runs no torch op
    assert [f["index"] for f in facts] == [1, 4, 7]
    assert summary["cycles"] == {"submitted": 3, "analysed": 3, "dropped": 0} and not summary["sink_failures"]
    # Lightning's CSVLogger's metrics.csv (the trainer's own logger), and our CSV sink
    logged = {}
    with open(next((tmp_path / "logs").rglob("metrics.csv"))) as f:
        for row in csv.DictReader(f):
            for name, value in row.items():
                if name.startswith("spiketrace/") and value:
                    logged[(int(row["step"]), name)] = float(value)
    with open(tmp_path / "scalars.csv") as f:
        sink = {(int(r["step"]), r["name"]): float(r["value"]) for r in csv.DictReader(f)}
    assert sink == logged
    for fact in facts:
        counts = json.loads(subprocess.run(
            [sys.executable, "-m", "spiketrace.analyze.cli", "counts", str(fit), "--step", str(fact["step"]),
             "--format", "json"], capture_output=True, text=True, check=True).stdout)
        energy = json.loads(subprocess.run(
            [sys.executable, "-m", "spiketrace.analyze.cli", "energy", str(fit), "--step", str(fact["step"]),
             "--format", "json"], capture_output=True, text=True, check=True).stdout)
        step = fact["global_step"]
        for counter, entry in counts["counters"].items():
            assert logged[(step, f"spiketrace/{counter}")] == float(entry["total"])
        assert logged[(step, "spiketrace/energy_pj")] == pytest.approx(energy_total(energy), rel=1e-9)


def energy_total(document: dict) -> float:
    """The total picojoules of `spiketrace energy --format json` (docs/energy_json.md)."""
    for key in ("total_pj", "energy_total_pj"):
        if key in document:
            return float(document[key])
    return float(document["totals"]["pj"])


def test_a_run_without_the_sink_package_runs_unchanged(tmp_path, monkeypatch, caplog):
    """A training script that asks for a sink whose package is missing trains as it would
    without the callback; the sink is skipped with one warning, recorded in the manifest."""
    blocker = tmp_path / "blocked"
    (blocker / "tensorboard").mkdir(parents=True)
    (blocker / "tensorboard" / "__init__.py").write_text("raise ImportError('tensorboard is not installed')\n")
    monkeypatch.setenv("PYTHONPATH", f"{blocker}:{Path(__file__).resolve().parents[1]}")
    from spiketrace.capture.live import TensorBoardSink

    torch.manual_seed(0)
    module = SpikingClassifier()
    plain = copy.deepcopy(module)
    callback = SpiketraceCallback(tmp_path / "traces", schedule=lambda step: step in (0, 2),
                                  sinks=[TensorBoardSink(tmp_path / "tb"), CsvSink(tmp_path / "scalars.csv")])
    with caplog.at_level(logging.WARNING, logger="spiketrace"):
        _trainer(tmp_path, callback, logger=False).fit(module, loader(dataset()))
    _trainer(tmp_path, SpiketraceCallback(log=False, schedule=lambda step: False), logger=False).fit(
        plain, loader(dataset()))
    for a, b in zip(module.parameters(), plain.parameters()):
        assert torch.equal(a, b)
    warnings = [r.getMessage() for r in caplog.records if "tensorboard" in r.getMessage()]
    assert len(warnings) == 1, warnings
    with open_trace(tmp_path / "traces" / "fit") as trace:
        failures = trace.manifest["loop"]["live_analysis"]["sink_failures"]
    assert [f["sink"] for f in failures] == ["tensorboard"]
    with open(tmp_path / "scalars.csv") as f:
        assert {int(r["step"]) for r in csv.DictReader(f)} == {0, 2}
