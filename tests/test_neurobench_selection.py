"""neurobench_metrics (and `spiketrace neurobench`) over part of a trace, and a model whose layers
share a weight, each checked against NeuroBench 2.3.0 run live.

Selection: a recording holds batches NeuroBench never saw (a calibration stage, a second rank);
--stage, --step and --rank select the batches, as they select the work `counts` counts, and the
metrics must equal NeuroBench's over exactly those batches. Shared weights: NeuroBench's
Footprint and ParameterCount sum model.parameters(), which yields a tied weight once; its
ConnectionSparsity walks the layers, so counts it in each.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from spiketrace.analyze.cli import main
from spiketrace.analyze.counters import neurobench_metrics
from spiketrace.capture import Recorder
from tests.neurobench_models import LeakyConv, benchmark_all

pytest.importorskip("neurobench")


def batch(samples: int, seed: int) -> torch.Tensor:
    return torch.rand(samples, 3, 1, 6, 6, generator=torch.Generator().manual_seed(seed))  # [B, T, 1, 6, 6]


CALIBRATION, EVAL_0, EVAL_1, OTHER_RANK = batch(3, 1), batch(2, 2), batch(1, 3), batch(2, 4)


def fresh(build):
    torch.manual_seed(0)
    return build()


def run_neurobench(net: nn.Module, batches, wrapper: str = "SNNTorchModel") -> dict:
    """Benchmark.run over `batches` (a list of data tensors), every metric of ours."""
    from neurobench.models import SNNTorchModel, TorchModel
    from torch.utils.data import DataLoader, TensorDataset

    model = SNNTorchModel(net) if wrapper == "SNNTorchModel" else TorchModel(net)
    ends = torch.tensor([len(b) for b in batches]).cumsum(0).tolist()
    data = torch.cat(batches)
    loader = DataLoader(TensorDataset(data, torch.zeros(len(data))),
                        batch_sampler=[list(range(end - len(b), end)) for b, end in zip(batches, ends)])
    results, printed = benchmark_all(model, loader)
    assert "Error" not in printed, printed
    return results


def assert_same(ours, theirs, where: str = "") -> None:
    if isinstance(theirs, dict):
        assert set(ours) == set(theirs), where
        for key in theirs:
            assert_same(ours[key], theirs[key], f"{where}.{key}")
    else:
        assert ours == theirs or math.isclose(ours, theirs, rel_tol=1e-9), f"{where}: ours {ours}, NeuroBench {theirs}"


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    """Rank 0: step 0 a calibration stage then an eval stage, step 1 an eval stage; rank 1: one
    eval step of its own data. Each stage is one batch through NeuroBench's SNNTorchModel."""
    from neurobench.models import SNNTorchModel

    path = tmp_path_factory.mktemp("selection") / "t"
    plan = {0: [[("calibrate", CALIBRATION), ("eval", EVAL_0)], [("eval", EVAL_1)]], 1: [[("eval", OTHER_RANK)]]}
    for rank, steps in plan.items():
        net = fresh(LeakyConv)
        model = SNNTorchModel(net)
        with Recorder(path, model=net, rank=rank, world_size=2) as recorder:
            for stages in steps:
                for stage, data in stages:
                    with torch.no_grad(), recorder.stage(stage, phase="forward"):
                        model(data)
                recorder.step()
    return path


SELECTIONS = {  # the filters, and the batches NeuroBench is given
    "stage": ({"stage": "eval", "rank": 0}, [EVAL_0, EVAL_1]),
    "step": ({"step": 1}, [EVAL_1]),
    "rank": ({"rank": 1}, [OTHER_RANK]),
}


@pytest.mark.parametrize("name", list(SELECTIONS))
def test_the_selected_batches_equal_neurobench_over_them(recording, name):
    options, batches = SELECTIONS[name]
    theirs = run_neurobench(fresh(LeakyConv), batches)
    ours = neurobench_metrics(recording, **options)
    assert ours.samples == sum(len(b) for b in batches)
    assert_same(dict(ours), theirs, name)


def test_the_command_selects_as_the_function_does(recording):
    runner = CliRunner()
    out = runner.invoke(main, ["neurobench", str(recording), "--stage", "eval", "--rank", "0", "--format", "json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == json.loads(json.dumps(dict(neurobench_metrics(recording, stage="eval", rank=0))))
    table = runner.invoke(main, ["neurobench", str(recording), "--step", "1"])
    assert table.exit_code == 0 and "selection: step 1" in table.stdout and "samples: 1" in table.stdout
    refused = runner.invoke(main, ["neurobench", str(recording), "--module", "LeakyConv.fc"])
    assert refused.exit_code == 2 and "whole model's" in refused.stderr
    unknown = runner.invoke(main, ["neurobench", str(recording), "--step", "7"])
    assert unknown.exit_code == 2 and "--step 7" in unknown.stderr


class Tied(nn.Module):
    """Two Linear layers sharing one weight (a third of it zero), a ReLU between them."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = nn.Linear(4, 4), nn.Linear(4, 4)
        self.second.weight = self.first.weight
        with torch.no_grad():
            self.first.weight.view(-1)[::3] = 0.0
        self.act = nn.ReLU()

    def forward(self, x):
        return self.second(self.act(self.first(x)))


def test_a_shared_weight_is_counted_as_neurobench_counts_it(tmp_path):
    data = [torch.rand(2, 4, generator=torch.Generator().manual_seed(5))]
    theirs = run_neurobench(fresh(Tied), data, wrapper="TorchModel")
    net = fresh(Tied)
    with Recorder(tmp_path / "t", model=net) as recorder:
        with torch.no_grad(), recorder.stage("forward", phase="forward"):
            net(data[0])
        recorder.step()
    ours = neurobench_metrics(tmp_path / "t", wrapper="TorchModel")
    # by hand: parameters 16 (the weight, once) + 4 + 4 (the biases) = 24, float32: 96 bytes;
    # ConnectionSparsity over both layers' weights: zeros 6 of 16 in each, 12 / 32 = 0.375
    assert (ours["ParameterCount"], ours["Footprint"], ours["ConnectionSparsity"]) == (24, 96, 0.375)
    assert_same(dict(ours), theirs)
