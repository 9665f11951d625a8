"""Activation functions and their backward ops have FLOP and memory rules by a stated
convention (analyze/counters/activations.py, docs/deviations.md 4d): one FLOP per element
of each tensor the op returns, as ptflops counts ReLU, GELU and SiLU; every operand read and
every result written once. So an ordinary ANN's training step passes `counts --strict`.
SpikingJelly has no rule for them: compat="spikingjelly" refuses them as it does."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from spikingjelly.activation_based.op_counter import DispatchCounterMode, FlopCounter
from torch import nn

from spiketrace.analyze import open_trace
from spiketrace.analyze.cli import main
from spiketrace.analyze.counters import StrictModeError, count
from spiketrace.capture import Recorder


def run(*args):
    return CliRunner().invoke(main, ["counts", *[str(a) for a in args]])


def train_one_step(path, net, x, target, loss=nn.functional.cross_entropy):
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    with Recorder(path, model=net, optimizer=optimizer) as recorder:
        with recorder.stage("forward"):
            out = net(x)
            value = loss(out, target)
        with recorder.stage("backward"):
            value.backward()
        with recorder.stage("optimizer"):
            optimizer.step()
    return path


@pytest.fixture(scope="module")
def conv_relu(tmp_path_factory):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(2 * 4 * 4, 3))
    x = torch.randn(2, 1, 4, 4)  # made outside the recorder: its randn is no op of the step
    return train_one_step(tmp_path_factory.mktemp("conv") / "t", net, x, torch.tensor([0, 2]))


def test_one_flop_per_element_forward_and_backward(tmp_path):
    # x (2, 3) through each activation, then sum().backward(): every forward op returns 6
    # elements, every backward op a 6-element gradient: 6 FLOPs each; PReLU's backward
    # returns the input's gradient and the weight's per element (summed by a separate op): 12.
    # Memory: relu reads x and writes out, 6 + 6 float32 = 48 bytes; threshold_backward reads
    # grad and out and writes grad_input, 3 * 24 = 72 bytes.
    activations = [nn.ReLU(), nn.GELU(), nn.SiLU(), nn.Tanh(), nn.LeakyReLU(), nn.ReLU6(), nn.ELU(),
                   nn.Softplus(), nn.Hardswish(), nn.Mish(), nn.PReLU()]
    x = torch.randn(2, 3, requires_grad=True)
    with Recorder(tmp_path / "t") as recorder:
        for activation in activations:
            with recorder.stage("forward"):
                y = activation(x)
            with recorder.stage("backward"):
                y.sum().backward()
    with open_trace(tmp_path / "t") as trace:
        result = count(trace, ["flop", "memory_access"])
    flops = result.spikingjelly("flop")["Global"]
    six = ["relu", "gelu", "silu", "tanh", "leaky_relu", "hardtanh", "elu", "softplus", "hardswish", "mish",
           "_prelu_kernel", "threshold_backward", "gelu_backward", "silu_backward", "tanh_backward",
           "leaky_relu_backward", "hardtanh_backward", "elu_backward", "softplus_backward", "hardswish_backward",
           "mish_backward"]
    assert {op: flops[f"aten.{op}.default"] for op in six} == dict.fromkeys(six, 6)
    assert flops["aten._prelu_kernel_backward.default"] == 12
    memory = result.spikingjelly("memory_access")["Global"]
    assert memory["aten.relu.default"] == 48 and memory["aten.threshold_backward.default"] == 72
    covered = {f"aten.{op}.default" for op in [*six, "_prelu_kernel_backward"]}
    assert not covered & set(result.unsupported_of("flop")) and not covered & set(result.unsupported_of("memory_access"))


def test_softmax_as_log_softmax(tmp_path):
    # softmax over (2, 3): the subtraction of the max, exp, the sum's add, the division per
    # element: 4 * 6 = 24 FLOPs; its backward out * (grad - sum(grad * out)): 24 too.
    x = torch.randn(2, 3, requires_grad=True)
    with Recorder(tmp_path / "t") as recorder:
        with recorder.stage("forward"):
            y = torch.softmax(x, -1)
        with recorder.stage("backward"):
            (y * torch.arange(6.0).view(2, 3)).sum().backward()
    with open_trace(tmp_path / "t") as trace:
        flops = count(trace, ["flop"]).spikingjelly("flop")["Global"]
    assert flops["aten._softmax.default"] == 24 and flops["aten._softmax_backward_data.default"] == 24


def test_conv_relu_training_step_passes_strict(conv_relu):
    result = run(conv_relu, "--counter", "flop,memory_access", "--strict", "--format", "json")
    assert result.exit_code == 0, result.output
    flop = json.loads(result.stdout)["counters"]["flop"]
    # the ReLU's input is the conv's output: N=2, C_out=2, 4x4 (padding 1 keeps the size):
    # 2 * 2 * 4 * 4 = 64 elements, one FLOP each, forward (relu) and backward (threshold_backward)
    relu = flop["by_scope"]["Sequential.1"]
    assert relu["aten.relu.default"] == 64 and relu["aten.threshold_backward.default"] == 64
    assert flop["unsupported"] == {}


def test_conv_relu_training_step_is_refused_under_spikingjelly_compat(conv_relu):
    result = run(conv_relu, "--counter", "flop", "--strict", "--compat", "spikingjelly", "--format", "json")
    assert result.exit_code == 1 and result.stderr.startswith("error: strict: flop has no rule for")
    unsupported = json.loads(result.stdout)["counters"]["flop"]["unsupported"]
    assert unsupported["aten.relu.default"] == 1 and unsupported["aten.threshold_backward.default"] == 1


def test_an_mlp_training_step_passes_strict_in_every_counter(tmp_path):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    path = train_one_step(tmp_path / "t", net, torch.randn(2, 4), torch.tensor([0, 1]))
    result = run(path, "--strict")
    assert result.exit_code == 0, result.output


def test_compat_refuses_what_spikingjelly_refuses_live(tmp_path):
    # SpikingJelly 2.0.0's FlopCounter run around the recorder on the same training step: the
    # activations and their backward ops are its unsupported ops, with the same calls, and
    # compat gives its counts of every other op
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 3), nn.GELU(), nn.Linear(3, 2), nn.Tanh())
    x, target = torch.randn(2, 4), torch.randn(2, 2)
    flop = FlopCounter()
    with DispatchCounterMode([flop], strict=False) as mode:
        train_one_step(tmp_path / "t", net, x, target, nn.functional.mse_loss)
    expected = {str(op): n for op, n in mode.get_unsupported(flop).items()}
    counts = {scope: {str(op): int(v) for op, v in ops.items()} for scope, ops in flop.get_counts().items()}
    assert {"aten.relu.default", "aten.gelu.default", "aten.tanh.default", "aten.threshold_backward.default",
            "aten.gelu_backward.default", "aten.tanh_backward.default"} <= set(expected)
    with open_trace(tmp_path / "t") as trace:
        compat = count(trace, ["flop"], compat="spikingjelly")
        assert compat.unsupported_of("flop") == expected
        assert compat.spikingjelly("flop") == counts
        with pytest.raises(StrictModeError, match="no rule for"):
            count(trace, ["flop"], compat="spikingjelly", strict=True)
        default = count(trace, ["flop"])
    assert not {"aten.relu.default", "aten.threshold_backward.default"} & set(default.unsupported_of("flop"))
    with pytest.raises(NotImplementedError, match="aten.relu.default not defined by FlopCounter"):
        with DispatchCounterMode([FlopCounter()], strict=True):
            net(x)


def test_a_transformer_layer_training_step_passes_strict_in_flop_and_bytes(tmp_path):
    # nn.TransformerEncoderLayer (d_model 8, 2 heads, feed-forward 16, no dropout) trained one
    # step on (2, 3, 8): its two layer norms' backward, native_layer_norm_backward, has a rule.
    # Per call n = 2 * 3 * 8 = 48 elements in G = 6 rows of D = 8: grad_x 10n = 480, grad_w
    # 4n - D = 184 (x re-normalised 2n, times grad_out n, summed over the rows n - D), grad_b
    # n - D = 40: 704 each, 1408 for the two
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True)
    net = nn.Sequential(layer, nn.Flatten(), nn.Linear(3 * 8, 4))
    path = train_one_step(tmp_path / "t", net, torch.randn(2, 3, 8), torch.tensor([0, 3]))
    result = run(path, "--counter", "flop,memory_access", "--strict", "--format", "json")
    assert result.exit_code == 0, result.output
    flop = json.loads(result.stdout)["counters"]["flop"]
    assert flop["by_scope"]["Global"]["aten.native_layer_norm_backward.default"] == 2 * (480 + 184 + 40)
