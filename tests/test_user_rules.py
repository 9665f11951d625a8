"""Rules users add (analyze/counters/user_rules.py): for their own ops, for uncovered aten
ops, overriding shipped ones; applied to traces captured before the rule existed."""

from __future__ import annotations

import subprocess

import pytest
import torch

from spiketrace.analyze import open_trace
from spiketrace.analyze.counters import count, load_rules, register_rule
from spiketrace.analyze.counters.user_rules import RuleError, clear_rules
from spiketrace.capture import Recorder

LIBRARY = torch.library.Library("spiketrace_test", "DEF")
LIBRARY.define("scale3(Tensor x) -> Tensor")
LIBRARY.impl("scale3", lambda x: x * 3, "CompositeExplicitAutograd")


@pytest.fixture(autouse=True)
def no_rules_left():
    clear_rules()
    yield
    clear_rules()


@pytest.fixture
def trace_path(tmp_path):
    x = torch.ones(2, 5)
    with Recorder(tmp_path / "t") as recorder, recorder.stage("forward"):
        torch.ops.spiketrace_test.scale3(x)
        torch.sin(x)  # no shipped FLOP rule
        torch.neg(x)
    return tmp_path / "t"


def test_a_custom_op_is_counted_by_a_registered_rule(trace_path):
    with open_trace(trace_path) as trace:  # captured before the rule existed
        before = count(trace, ["flop"])
        assert "spiketrace_test.scale3.default" in before.unsupported_of("flop")
        name = register_rule("spiketrace_test::scale3", "flop", "o0_numel")  # one product per element
        after = count(trace, ["flop"])
    assert name == "spiketrace_test.scale3.default"
    assert after.spikingjelly("flop")["Global"][name] == 10  # 2 x 5 elements
    assert name not in after.unsupported_of("flop")


def test_overriding_a_shipped_rule_warns_and_applies(trace_path):
    with pytest.warns(UserWarning, match="overrides the shipped one"):
        register_rule("aten.neg.default", "memory_access", "7")
    with open_trace(trace_path) as trace:
        assert count(trace, ["memory_access"]).spikingjelly("memory_access")["Global"]["aten.neg.default"] == 7


def test_bad_rules_name_the_counter_and_op():
    with pytest.raises(RuleError, match="no per-op counter 'flops'"):
        register_rule("aten.tanh.default", "flops", "o0_numel")
    with pytest.raises(RuleError, match="must be a SQL expression"):
        register_rule("aten.tanh.default", "flop", 3)


def test_a_rules_file_on_the_command_line(trace_path, tmp_path):
    rules = tmp_path / "rules.toml"
    rules.write_text('[flop]\n"aten.sin.default" = "5 * o0_numel"\n"spiketrace_test::scale3" = "o0_numel"\n')
    done = subprocess.run(["spiketrace", "counts", str(trace_path), "--counter", "flop", "--rules", str(rules),
                           "--strict", "--format", "json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr  # every op now has a rule: --strict passes
    import json

    flop = json.loads(done.stdout)["counters"]["flop"]
    assert flop["by_scope"]["Global"] == {"aten.sin.default": 50, "spiketrace_test.scale3.default": 10,
                                          "aten.neg.default": 10}
    assert load_rules(rules) == [("flop", "aten.sin.default"), ("flop", "spiketrace_test.scale3.default")]
    broken = tmp_path / "broken.toml"
    broken.write_text("[flop\n")
    bad = subprocess.run(["spiketrace", "counts", str(trace_path), "--rules", str(broken)], capture_output=True,
                         text=True, timeout=300)
    assert bad.returncode == 2 and str(broken) in bad.stderr and bad.stderr.count("\n") == 1


def test_spikingjellys_function_mode_rule_is_written_for_the_aten_op(tmp_path):
    """SpikingJelly's test "FunctionCounterMode with a torch.add rule gives 1" (docs/deviations.md,
    counter modes): torch.add, Tensor.add and `y + y` are one aten op below torch functions, so the
    rule is keyed on aten.add.Tensor and counts each of the three calls once."""
    y = torch.ones(2, 3)
    with Recorder(tmp_path / "t") as recorder, recorder.stage("forward"):
        torch.add(y, y)
        y.add(y)
        y + y
    with pytest.warns(UserWarning, match="overrides the shipped one"):
        register_rule("aten.add.Tensor", "ac", "1")
    with open_trace(tmp_path / "t") as trace:
        assert count(trace, ["ac"]).spikingjelly("ac")["Global"]["aten.add.Tensor"] == 3
