"""`spiketrace counts --format json` gives every counter asked for (or implied by the default
set or the convention) a total, 0 included (docs/counts_json.md): a counter that counted
nothing is present with total 0, never left out, in every --by and with several traces."""

import json

import pytest
from click.testing import CliRunner

from spiketrace.analyze.cli import main

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from spiketrace.capture import record_inference  # noqa: E402

PER_OP_COUNTERS = ["flop", "memory_access", "mac", "ac", "synop"]  # count()'s default set
VIEWS = ["scope", "op", "stage", "module-type", "trace"]


def ones_linear(inputs: int, outputs: int, bias: bool = True) -> nn.Linear:
    layer = nn.Linear(inputs, outputs, bias=bias)
    with torch.no_grad():
        layer.weight.fill_(1.0)
        if bias:
            layer.bias.zero_()
    return layer


@pytest.fixture(scope="module")
def ann(tmp_path_factory):
    # x = [[2, 2, 2, 2]] is neither 0/1 nor -1/0/1: every call is a MAC call for NeuroBench.
    # Linear(4, 3) of ones: sum_k nnz(x[:, k]) * nnz(w[:, k]) = 4 * 3 = 12 pairs; its output is
    # 8 everywhere, ReLU keeps it, Linear(3, 2) of ones: 3 * 2 = 6 pairs. mac 18, synop 0.
    net = nn.Sequential(ones_linear(4, 3), nn.ReLU(), ones_linear(3, 2))
    return record_inference(tmp_path_factory.mktemp("ann") / "t", net, torch.full((1, 4), 2.0))


@pytest.fixture(scope="module")
def spiking(tmp_path_factory):
    # x = [[1, 0, 1, 0]] is a spike vector: ACs. Linear(4, 3) of ones, no bias: 2 nonzero
    # inputs * 3 outputs = 6 pairs. synop 6, mac 0.
    net = nn.Sequential(ones_linear(4, 3, bias=False))
    return record_inference(tmp_path_factory.mktemp("snn") / "t", net, torch.tensor([[1.0, 0.0, 1.0, 0.0]]))


def counts_json(*args) -> dict:
    result = CliRunner().invoke(main, ["counts", *[str(a) for a in args], "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("view", VIEWS)
def test_neurobench_synop_of_an_ann_is_zero_not_missing(ann, view):
    counters = counts_json(ann, "--convention", "neurobench", "--by", view)["counters"]
    assert list(counters) == ["synop", "mac"]
    assert counters["synop"]["total"] == 0 and counters["mac"]["total"] == 18


@pytest.mark.parametrize("view", VIEWS)
def test_neurobench_mac_of_a_spiking_net_is_zero_not_missing(spiking, view):
    counters = counts_json(spiking, "--convention", "neurobench", "--by", view)["counters"]
    assert list(counters) == ["synop", "mac"]
    assert counters["mac"]["total"] == 0 and counters["synop"]["total"] == 6


@pytest.mark.parametrize("view", VIEWS)
def test_every_default_counter_is_present_when_the_selection_gives_it_nothing(ann, view):
    # only the ReLU selected: no per-op counter but flop and memory_access meets an op it has a
    # rule or a gap for; mac, ac and synop count nothing and are present all the same, at 0
    counters = counts_json(ann, "--ops", "aten.relu", "--by", view)["counters"]
    assert list(counters) == PER_OP_COUNTERS
    assert all(counters[name]["total"] == 0 for name in ("mac", "ac", "synop"))


def test_several_traces_keep_the_zero_totals(ann, spiking):
    document = counts_json(ann, spiking, "--convention", "neurobench")
    assert {name: entry["total"] for name, entry in document["counters"].items()} == {"synop": 6, "mac": 18}
    assert [entry["totals"] for entry in document["traces"]] == [{"synop": 0, "mac": 18}, {"synop": 6, "mac": 0}]
