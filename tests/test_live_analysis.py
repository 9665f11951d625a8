"""spiketrace.analyze.live: the worker a training loop's callback sends recorded steps to.

The scalars of a step are the CLI's numbers for that step (`counts`/`energy --step N`) and the
spike rates a forward hook counts during the run; the worker, run as the callbacks run it (a
process reading requests while the trace is still being recorded), writes them to every
sink, and each sink read back with its own package's reader holds the answered numbers. A
sink that cannot start is reported once and the others go on; a bad request is answered
with its error and the worker goes on; the worker never imports torch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from spiketrace.analyze import Analysis
from spiketrace.analyze.energy import ModelScopeWarning
from spiketrace.analyze.live import ConfigError, ScalarConfig, step_scalars
from spiketrace.analyze.live.__main__ import read_config
from spiketrace.capture import Recorder, schedule
from spiketrace.capture.session.example import SpikingMLP, example_batch
from tests.sink_readers import read_csv, read_mlflow, read_tensorboard, read_wandb

STEPS = 3
SPIKING_LAYER = "SpikingMLP.sn1"


EVERY_STEP = schedule(active=1)


def record(path: Path, *, steps: int = STEPS, value_statistics: str = "full", after_step=None,
           steps_recorded=EVERY_STEP, on_trace_ready=None) -> dict[int, float]:
    """Record `steps` training steps of the example SNN, each on a batch of its own, those
    `steps_recorded` picks (default: every step, one cycle each, flushed as the step ends, as a
    live callback's schedule does); `after_step(step)` runs while the recorder is still open.
    Returns each step's spike rate of sn1 as a forward hook sees it: the outputs are kept by
    reference and summed after the recording, so that the hook adds no op to the trace."""
    torch.manual_seed(0)
    net = SpikingMLP()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    outputs: dict[int, list[torch.Tensor]] = {step: [] for step in range(steps)}
    current = [0]
    net.sn1.register_forward_hook(lambda module, inputs, output: outputs[current[0]].append(output))
    with Recorder(path, model=net, optimizer=optimizer, value_statistics=value_statistics,
                  schedule=steps_recorded, on_trace_ready=on_trace_ready) as recorder:
        for step in range(steps):
            current[0] = step
            x, y = example_batch(seed=step)
            net.sn1.reset()
            net.sn2.reset()
            with recorder.stage("forward"):
                out = net(x)
            with recorder.suspend():
                loss = torch.nn.functional.mse_loss(out, y)
            with recorder.stage("backward"):
                loss.backward()
            with recorder.stage("optimizer"):
                optimizer.step()
                optimizer.zero_grad()
            recorder.step()
            if after_step is not None:
                after_step(step)
    return {step: float(sum(o.detach().sum() for o in seen)) / sum(o.numel() for o in seen)
            for step, seen in outputs.items()}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, dict[int, float]]:
    path = tmp_path_factory.mktemp("live") / "trace"
    return path, record(path)


def cli(*args) -> dict:
    done = subprocess.run([sys.executable, "-m", "spiketrace.analyze.cli", *map(str, args)],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


# -- the scalars of one step -----------------------------------------------------------------


def test_step_scalars_are_the_cli_numbers_of_that_step(recorded):
    path, hook_rates = recorded
    config = ScalarConfig.from_json({"energy": [{"model": None, "preset": None},
                                                {"model": "compute", "preset": "compute-int8-45nm"}]})
    # the compute model says it does not cost a training step in full; the number is still the CLI's
    with Analysis(path, verify=False) as analysis, pytest.warns(ModelScopeWarning, match="forward-only"):
        scalars = step_scalars(analysis, 1, 0, config)
        first = step_scalars(analysis, 0, None, config)
    assert scalars.skipped == {}
    counts = cli("counts", path, "--step", 1, "--rank", 0, "--format", "json")
    for counter, entry in counts["counters"].items():
        assert scalars[f"spiketrace/{counter}"] == entry["total"]
        assert scalars[f"spiketrace/coverage/{counter}"] == entry["coverage"]
    assert {name for name in scalars if name.count("/") == 1 and name != "spiketrace/energy_pj"} == \
        {f"spiketrace/{counter}" for counter in counts["counters"]}
    default = cli("energy", path, "--step", 1, "--rank", 0, "--format", "json")
    assert scalars["spiketrace/energy_pj"] == pytest.approx(default["energy_total_pj"], rel=1e-9)
    int8 = cli("energy", path, "--step", 1, "--model", "compute", "--preset", "compute-int8-45nm", "--format", "json")
    assert scalars["spiketrace/energy_pj/compute/compute-int8-45nm"] == pytest.approx(int8["energy_total_pj"], rel=1e-9)
    # the spike rate of each step is the hook's ones / elements of that step (and the steps differ)
    assert hook_rates[0] != hook_rates[1]
    assert scalars[f"spiketrace/spike_rate/{SPIKING_LAYER}"] == pytest.approx(hook_rates[1], rel=1e-12)
    assert first[f"spiketrace/spike_rate/{SPIKING_LAYER}"] == pytest.approx(hook_rates[0], rel=1e-12)


def test_a_model_refusing_the_trace_skips_its_scalar_only(tmp_path):
    # NeuroMC (a training trace's default model) needs value statistics at level "full"; the
    # op counters need "synaptic" at most, so they are all there.
    path = tmp_path / "trace"
    record(path, steps=1, value_statistics="synaptic")
    with Analysis(path, verify=False) as analysis:
        scalars = step_scalars(analysis, 0, None, ScalarConfig(prefix="run"))
    assert set(scalars.skipped) == {"run/energy_pj"}
    assert "value_statistics" in scalars.skipped["run/energy_pj"] and "\n" not in scalars.skipped["run/energy_pj"]
    assert {"run/flop", "run/synop", f"run/spike_rate/{SPIKING_LAYER}"} <= set(scalars)


def test_a_config_error_names_its_key():
    with pytest.raises(ConfigError, match=r"counters: unknown counter\(s\) \['flops'\]"):
        read_config('{"counters": ["flops"]}')
    with pytest.raises(ConfigError, match=r"energy\[0\]: unknown energy model 'neuromcc'"):
        read_config('{"energy": [{"model": "neuromcc", "preset": null}]}')
    assert read_config('{"sinks": [], "counters": null}')[0] == ScalarConfig()


# -- the worker ------------------------------------------------------------------------------


class Worker:
    """`python -m spiketrace.analyze.live` as the callbacks run it: one request line in, one answer line out."""

    def __init__(self, config: dict, env: dict | None = None) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "spiketrace.analyze.live", "--config", json.dumps(config)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, env=env)
        self.sent = 0

    def ask(self, trace, steps: dict[int, int] | None, rank=None, **more) -> dict:
        self.sent += 1
        request = {"id": self.sent, "trace": str(trace), "rank": rank,
                   "steps": None if steps is None else {str(k): v for k, v in steps.items()}, **more}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, f"the worker ended: {self.process.stderr.read()}"
        answer = json.loads(line)
        assert answer["id"] == self.sent
        return answer

    def close(self) -> tuple[int, str, str]:
        out, err = self.process.communicate(timeout=120)
        return self.process.returncode, out, err


def sink_specs(root: Path, kinds=("csv", "tensorboard", "mlflow", "wandb")) -> list[dict]:
    specs = {"csv": {"kind": "csv", "path": str(root / "csv" / "scalars.csv")},
             "tensorboard": {"kind": "tensorboard", "log_dir": str(root / "tb")},
             "mlflow": {"kind": "mlflow", "tracking_uri": (root / "mlruns").as_uri(), "experiment": "live",
                        "run_name": "test"},
             "wandb": {"kind": "wandb", "dir": str(root / "wb"), "project": "live", "name": "test", "mode": "offline"}}
    return [specs[kind] for kind in kinds]


def answered(answers: list[dict]) -> dict[int, dict[str, float]]:
    """logged step -> scalars, over every row of the answers."""
    return {row["step"]: row["scalars"] for answer in answers for row in answer["rows"]}


def test_the_worker_logs_each_step_to_every_sink_while_the_trace_is_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # this test reads the file store back
    trace = tmp_path / "trace"
    worker = Worker({"sinks": sink_specs(tmp_path)})
    answers = []

    def send(step: int) -> None:  # as a callback does, once the recorded cycle is flushed
        if step == 0:
            answers.append(worker.ask(trace, {0: 10}))
        elif step == STEPS - 1:
            answers.append(worker.ask(trace, {1: 20, 2: 30}))

    record(trace, after_step=send)
    code, out, err = worker.close()
    assert code == 0 and out == "", err
    assert [a["error"] for a in answers] == [None, None] and [a["sink_failures"] for a in answers] == [[], []]
    assert [[r["recorder_step"] for r in a["rows"]] for a in answers] == [[0], [1, 2]]
    expected = answered(answers)
    assert sorted(expected) == [10, 20, 30] and all(expected[step] for step in expected)
    assert len({scalars[f"spiketrace/spike_rate/{SPIKING_LAYER}"] for scalars in expected.values()}) == 3
    assert read_csv(tmp_path / "csv" / "scalars.csv") == expected
    assert read_mlflow(tmp_path / "mlruns", experiment="live", run_name="test") == expected
    assert read_wandb(tmp_path / "wb" / "wandb") == expected
    # TensorBoard keeps a scalar as a float32
    assert read_tensorboard(tmp_path / "tb") == {step: {name: pytest.approx(value, rel=2 ** -23) for name, value in
                                                        scalars.items()} for step, scalars in expected.items()}


def test_a_sink_whose_package_is_missing_is_reported_once_and_the_others_go_on(recorded, tmp_path):
    path, _ = recorded
    blocked = tmp_path / "blocked" / "mlflow"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('mlflow is blocked for this test')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocked.parent), os.environ.get("PYTHONPATH", "")])}
    worker = Worker({"sinks": sink_specs(tmp_path, ("csv", "mlflow", "tensorboard"))}, env=env)
    answers = [worker.ask(path, {0: 10}), worker.ask(path, {1: 20, 2: 30})]
    code, _, err = worker.close()
    assert code == 0, err
    (failure,) = answers[0]["sink_failures"]
    assert failure["sink"] == "mlflow" and "mlflow is blocked for this test" in failure["error"]
    assert "\n" not in failure["error"] and answers[1]["sink_failures"] == []
    expected = answered(answers)
    assert sorted(expected) == [10, 20, 30]
    assert read_csv(tmp_path / "csv" / "scalars.csv") == expected
    assert set(read_tensorboard(tmp_path / "tb")) == {10, 20, 30}
    assert not (tmp_path / "mlruns").exists()


def test_a_bad_request_is_answered_with_its_error_and_the_worker_goes_on(recorded, tmp_path):
    path, _ = recorded
    missing = tmp_path / "no-such-trace"
    worker = Worker({"sinks": sink_specs(tmp_path, ("csv",)), "counters": ["flop"], "energy": [],
                     "spike_rates": False, "coverage": False})
    bad = worker.ask(missing, {0: 1})
    unknown_step = worker.ask(path, {STEPS: 2})
    good = worker.ask(path, {0: 3})
    code, _, err = worker.close()
    assert code == 0, err
    assert bad["rows"] == [] and str(missing) in bad["error"] and "\n" not in bad["error"]
    assert unknown_step["rows"] == [] and f"step {STEPS}" in unknown_step["error"]
    assert good["error"] is None and list(good["rows"][0]["scalars"]) == ["spiketrace/flop"]
    assert read_csv(tmp_path / "csv" / "scalars.csv") == {3: good["rows"][0]["scalars"]}


def test_steps_null_asks_for_the_steps_not_answered_yet_and_a_kind_names_its_scalars(recorded, tmp_path):
    # what the capture side sends: a Recorder's on_trace_ready knows no steps (null), a
    # framework callback says which recorded steps were validation batches (kinds)
    path, _ = recorded
    worker = Worker({"counters": ["flop"], "energy": [], "spike_rates": False, "coverage": False})
    validation = worker.ask(path, {0: 5}, kinds={"0": "validation"})
    rest, nothing_new = worker.ask(path, None), worker.ask(path, None)
    code, _, err = worker.close()
    assert code == 0, err
    assert [(row["step"], list(row["scalars"])) for row in validation["rows"]] == [(5, ["spiketrace/validation/flop"])]
    assert [(row["step"], row["recorder_step"], list(row["scalars"])) for row in rest["rows"]] == \
        [(step, step, ["spiketrace/flop"]) for step in range(1, STEPS)]
    assert nothing_new["rows"] == [] and nothing_new["error"] is None
    with Analysis(path, verify=False) as analysis:
        assert rest["rows"][0]["scalars"]["spiketrace/flop"] == analysis.counts(["flop"], step=1).totals()["flop"]


NO_TORCH_SCRIPT = textwrap.dedent("""
    import json, sys
    from spiketrace.analyze.live.__main__ import Notes, Worker, read_config
    from spiketrace.analyze.live.sinks import Sinks

    config, specs = read_config(sys.argv[1])
    sinks = Sinks(specs)
    request = json.dumps({"id": 1, "trace": sys.argv[2], "rank": None, "steps": {"0": 0}})
    reply = Worker(config, sinks, Notes(sys.stderr)).answer(request)
    failures = sinks.close()
    print(json.dumps({"reply": reply, "failures": failures,
                      "torch": sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))}))
""")


def test_the_worker_never_imports_torch(recorded, tmp_path):
    path, _ = recorded
    config = json.dumps({"sinks": sink_specs(tmp_path)})
    env = {**os.environ, "MLFLOW_ALLOW_FILE_STORE": "true", "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    done = subprocess.run([sys.executable, "-c", NO_TORCH_SCRIPT, config, str(path)], capture_output=True, text=True,
                          env=env, check=True)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["reply"]["error"] is None and found["reply"]["sink_failures"] == [] and found["failures"] == []
    assert found["reply"]["rows"][0]["scalars"]
    assert found["torch"] == []
