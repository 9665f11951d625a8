"""An energy title says what the selection holds: NeuroMC on an inference-only trace (one forward
stage, record_inference) is "inference: forward", not the training its model could cost."""

from __future__ import annotations

import json

import torch
from click.testing import CliRunner
from spikingjelly.activation_based import neuron
from torch import nn

from spiketrace.analyze import open_trace
from spiketrace.analyze.cli import main
from spiketrace.analyze.energy import scope_label, selection_label
from spiketrace.analyze.present import plots
from spiketrace.analyze.results import Analysis
from spiketrace.capture import record_inference, record_training_step


def inference_trace(path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), neuron.LIFNode())
    return record_inference(path, model, (torch.rand(2, 4) > 0.5).float())


def test_scope_label_names_the_phases_held():
    assert scope_label("neuromc", {"forward": 10}) == "inference: forward"
    assert scope_label("neuromc", {"forward": 10, "backward": 5}) == "training: forward, backward"
    assert scope_label("neuromc", {"forward": 1, "backward": 1, "optimizer": 1}) == \
        "training: forward, backward, optimizer"
    assert scope_label("neuromc", None) == "training: forward, backward, optimizer"  # not known: the model's
    assert scope_label("compute", {"forward": 1, "backward": 1}) == "forward-only"  # one phase: its own label


def test_inference_trace_is_titled_inference(tmp_path):
    trace = inference_trace(tmp_path / "trace")
    runner = CliRunner()
    text = runner.invoke(main, ["energy", str(trace), "--model", "neuromc"])
    assert text.exit_code == 0, text.output
    assert text.stdout.startswith("neuromc energy (inference: forward) under neuromc-like-v1: ")
    document = json.loads(runner.invoke(main, ["energy", str(trace), "--model", "neuromc", "--format", "json"]).stdout)
    assert document["scope"] == "inference: forward"
    with Analysis(trace) as analysis:
        figure = plots.stage_breakdown(analysis, "neuromc")
        assert "neuromc (inference: forward)" in figure.axes[0].get_title()


def test_training_trace_and_a_forward_selection(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), neuron.LIFNode())
    x = (torch.rand(2, 4) > 0.5).float()
    trace = record_training_step(tmp_path / "trace", model, x, target=torch.zeros(2, 3), loss_fn=nn.MSELoss(),
                                 optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    with open_trace(trace) as opened:
        assert selection_label(opened, "neuromc") == "training: forward, backward, optimizer"
    forward = CliRunner().invoke(main, ["energy", str(trace), "--model", "neuromc", "--phase", "forward"])
    assert forward.exit_code == 0, forward.output
    assert forward.stdout.startswith("neuromc energy (inference: forward)")
