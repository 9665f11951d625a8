"""Capture on an older torch, simulated on this one: where a torch lacks an API the capture
uses, it falls back (feature detection), records every op all the same, backward included, and
the manifest's `torch_limitations` names what that torch cannot tell.

The APIs are taken away here as older torch lacks them (scripts/torch_matrix.py runs the
capture tests on those torch themselves), from capture's feature detection where torch itself
still needs them:
- `torch._C._autograd._top_saved_tensors_default_hooks` (torch 2.4 to 2.6): non-reentrant
  checkpoint recomputation is told by a frame of torch.utils.checkpoint's recompute_fn on the
  stack instead, which must flag exactly what the stack of saved-tensor hooks flags;
- both of those: the recomputation is recorded as backward work, and the manifest says so;
- a test that raises (torch 2.6 raised AttributeError for every backward op before detection):
  passed over, the backward kept;
- the global forward hook's `with_kwargs` (torch 2.4): keyword inputs go unrecorded, the rest
  of the trace is the same, and the manifest says so;
- TorchDynamo's newer frame switch (`set_code_exec_strategy`): the older `skip_code` is used.
On whichever torch runs them, with nothing taken away, the recomputed ops must repeat the
checkpointed forward, and the manifest names exactly what that torch lacks.
"""

from __future__ import annotations

import json
from collections import Counter
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from spiketrace.analyze import open_trace
from spiketrace.analyze.present.health import health_lines
from spiketrace.capture import Recorder
from spiketrace.capture.modules import recomputation, tracker
from spiketrace.capture.modules.grad_hooks import FORWARD_HOOK_LIMITS, forward_hook_options
from spiketrace.capture.ops import dynamo_frames
from spiketrace.schemas.tables import TABLES

ORDER = {"events": "seq", "event_tensors": "seq, k", "tensors": "tensor_id", "scopes": "scope_id",
         "modules": "module_id", "module_events": "seq"}


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 3, padding=1, bias=False)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.conv(x))


class Gate(nn.Module):
    """Called with a keyword tensor: what a global forward hook without with_kwargs cannot see."""

    def forward(self, x, *, scale):
        return x * scale


class Net(nn.Module):
    """Two checkpointed regions, one ending in functional ops, one ending inside a module (so a
    non-reentrant recomputation stops early, inside that module's forward), and a keyword call."""

    def __init__(self, reentrant: bool | None) -> None:
        super().__init__()
        self.reentrant = reentrant
        self.stem = nn.Conv2d(1, 2, 3, padding=1)
        self.block, self.block2 = Block(), Block()
        self.gate = Gate()
        self.head = nn.Linear(2 * 4 * 4, 3)

    def first(self, x):
        return torch.sigmoid(self.block(x)) * 2.0

    def forward(self, x):
        x = self.stem(x)
        for region in (self.first, self.block2):
            x = region(x) if self.reentrant is None else checkpoint(region, x, use_reentrant=self.reentrant)
        x = self.gate(x, scale=torch.sigmoid(x))
        return self.head(x.flatten(1))


def capture(path, reentrant: bool | None) -> tuple[dict[str, pd.DataFrame], dict]:
    """A seeded training step of Net, recorded: its tables in order (no storage pointers) and manifest."""
    torch.manual_seed(0)
    net = Net(reentrant)
    x = torch.randn(2, 1, 4, 4)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    with Recorder(path, model=net, optimizer=optimizer) as recorder:
        with recorder.stage("forward"):
            out = net(x)
        with recorder.stage("backward"):
            out.square().mean().backward()
        with recorder.stage("optimizer"):
            optimizer.step()
    with open_trace(path) as trace:
        tables = {name: trace.sql(f"SELECT * EXCLUDE (rank) FROM {name} ORDER BY {order}")
                  .drop(columns=["storage_ptr"], errors="ignore") for name, order in ORDER.items()}
    return tables, json.loads((path / "manifest.json").read_text())


def events_in_scopes(tables) -> pd.DataFrame:
    """The events in order, each with its scope's parents as a tuple."""
    scopes = tables["scopes"][["scope_id", "parents"]].assign(parents=lambda s: s["parents"].map(tuple))
    return tables["events"].merge(scopes, on="scope_id").sort_values("seq").reset_index(drop=True)


def backward_ops(tables) -> list[str]:
    events = tables["events"]
    return list(events[events["in_backward"]]["op"])


def without_recomputation_tests(monkeypatch, *names: str) -> None:
    """Detection as on a torch that lacks what the tests `names` read. Taken away from the
    detection, not from torch: torch's own checkpoint reads the hooks stack (2.14 does)."""
    if any(make() is None for name, make in recomputation.RECOMPUTATION_TESTS if name in names):
        pytest.skip(f"this torch lacks what {names} read already: nothing to take away")
    kept = tuple(test for test in recomputation.RECOMPUTATION_TESTS if test[0] not in names)
    monkeypatch.setattr(recomputation, "RECOMPUTATION_TESTS", kept)


@pytest.mark.parametrize("reentrant", [False, True], ids=["nonreentrant", "reentrant"])
def test_without_the_hooks_stack_reader_recomputation_is_told_by_its_frame(tmp_path, monkeypatch, reentrant):
    if recomputation._top_hooks_test() is None:
        pytest.skip("this torch has no saved-tensor hooks stack reader to compare with")
    expected, manifest = capture(tmp_path / "with", reentrant)
    assert recomputation.method == "saved_tensors_hooks_stack"
    without_recomputation_tests(monkeypatch, "saved_tensors_hooks_stack")
    got, got_manifest = capture(tmp_path / "without", reentrant)
    assert recomputation.method == "checkpoint_frames"
    assert got_manifest["torch_limitations"] == manifest["torch_limitations"] and got_manifest["degraded"] == []
    assert got["events"]["recompute"].any() and got["module_events"]["recompute"].any()
    for name in ORDER:  # the very same trace: recomputed ops, their scopes and module events alike
        pd.testing.assert_frame_equal(got[name], expected[name], obj=name)


BOOKKEEPING = ("aten.detach.default", "aten.view.default")  # alias ops checkpointing adds or drops, by torch version


@pytest.mark.parametrize("reentrant", [False, True], ids=["nonreentrant", "reentrant"])
def test_recomputed_ops_repeat_the_checkpointed_forward_on_this_torch(tmp_path, reentrant):
    # Whichever way this torch lets recomputation be told, nothing taken away; no second mode
    # stacked to compare with (torch 2.8 and older hand a mode below another ops the one above
    # never sees). Checked by what recomputation is: the checkpointed regions' forward ops again.
    tables, manifest = capture(tmp_path / "t", reentrant)
    assert "recomputation" not in [entry["feature"] for entry in manifest["torch_limitations"]]
    events = events_in_scopes(tables)
    work = events[~events["op"].isin(BOOKKEEPING)]
    forward = work[~work["in_backward"]]
    in_blocks = forward["parents"].map(lambda parents: "Net.block" in parents or "Net.block2" in parents)
    first, last = forward[in_blocks].index.min(), forward[in_blocks].index.max()
    regions = forward.loc[first:last]  # both regions' forward ops (the first ends in functional ops)
    recomputed = work[work["recompute"]]
    assert not events[~events["in_backward"]]["recompute"].any()
    assert list(recomputed["op"]).count("aten.convolution.default") == 2  # each region's block again
    repeated = Counter(zip(recomputed["op"], recomputed["parents"]))
    assert repeated and repeated <= Counter(zip(regions["op"], regions["parents"]))  # under their forward's scopes


def test_without_any_recomputation_test_the_backward_is_recorded_and_the_manifest_says_so(tmp_path, monkeypatch):
    expected, _ = capture(tmp_path / "with", reentrant=False)
    without_recomputation_tests(monkeypatch, "saved_tensors_hooks_stack", "checkpoint_frames")
    got, manifest = capture(tmp_path / "without", reentrant=False)
    assert recomputation.method == "none"
    notes = {entry["feature"]: entry["note"] for entry in manifest["torch_limitations"]}
    assert "not told apart" in notes["recomputation"] and manifest["degraded"] == []
    # every op is recorded, backward and recomputation included; only the flag is unknown
    assert list(got["events"]["op"]) == list(expected["events"]["op"])
    assert backward_ops(got) == backward_ops(expected) and len(backward_ops(got)) > 10
    assert not got["events"]["recompute"].any() and expected["events"]["recompute"].any()


def test_a_recomputation_test_that_raises_is_passed_over_and_the_backward_kept(tmp_path, monkeypatch):
    # Before feature detection, torch 2.6 raised AttributeError here for every op of the
    # backward, and each was dropped (a DEGRADED trace of the forward alone).
    expected, _ = capture(tmp_path / "with", reentrant=False)

    def make_raising_test():
        def raising_test() -> bool:
            raise AttributeError("module 'torch._C._autograd' has no attribute '_top_saved_tensors_default_hooks'")

        return raising_test

    tests = (("raising", make_raising_test), *recomputation.RECOMPUTATION_TESTS)
    monkeypatch.setattr(recomputation, "RECOMPUTATION_TESTS", tests)
    got, manifest = capture(tmp_path / "without", reentrant=False)
    assert recomputation.method != "raising" and manifest["degraded"] == []
    pd.testing.assert_frame_equal(got["events"], expected["events"])


def keyword_inputs(tables) -> int:
    """The module events that list keyword tensor inputs (a null or empty list lists none)."""
    return int(tables["module_events"]["kwarg_inputs"].map(lambda ids: hasattr(ids, "__len__") and len(ids) > 0).sum())


def register_forward_hook_of_torch_2_4(hook, *, always_call: bool = False):
    """torch 2.4's register_module_forward_hook: no with_kwargs."""
    return torch.nn.modules.module.register_module_forward_hook(hook, always_call=always_call)


def test_a_forward_hook_without_with_kwargs_records_all_but_keyword_inputs(tmp_path, monkeypatch):
    if "with_kwargs" not in forward_hook_options(tracker.register_module_forward_hook):
        pytest.skip("this torch's forward hook has no with_kwargs to take away")
    expected, _ = capture(tmp_path / "with", reentrant=False)
    monkeypatch.setattr(tracker, "register_module_forward_hook", register_forward_hook_of_torch_2_4)
    got, manifest = capture(tmp_path / "without", reentrant=False)
    assert [entry["feature"] for entry in manifest["torch_limitations"]] == ["forward hook with_kwargs"]
    assert "kwarg_inputs" in manifest["torch_limitations"][0]["note"] and manifest["degraded"] == []
    with open_trace(tmp_path / "without") as trace:  # the analysis says so before any number
        assert health_lines(trace.health()) == [f"warning: {manifest['torch_limitations'][0]['note']}"]
    assert keyword_inputs(expected) == 1  # Gate's scale, seen only with with_kwargs
    assert keyword_inputs(got) == 0
    for name in ORDER:  # the rest is the same trace, its backward and recomputation included
        keep = [c for c in expected[name].columns if c != "kwarg_inputs"]
        pd.testing.assert_frame_equal(got[name][keep], expected[name][keep], obj=name)


def test_a_forward_hook_with_neither_option_still_records_the_backward(tmp_path, monkeypatch):
    expected, _ = capture(tmp_path / "with", reentrant=None)
    monkeypatch.setattr(tracker, "register_module_forward_hook",
                        lambda hook: torch.nn.modules.module.register_module_forward_hook(hook))
    got, manifest = capture(tmp_path / "without", reentrant=None)
    assert [entry["feature"] for entry in manifest["torch_limitations"]] == ["forward hook with_kwargs",
                                                                            "forward hook always_call"]
    assert backward_ops(got) == backward_ops(expected) and manifest["degraded"] == []


def test_the_trace_names_what_this_torch_lacks_and_nothing_else(tmp_path):
    # torch 2.13 lacks nothing; torch 2.4's forward hook lacks with_kwargs (scripts/torch_matrix.py)
    lacking = [f"forward hook {option}" for option in FORWARD_HOOK_LIMITS
               if option not in forward_hook_options(tracker.register_module_forward_hook)]
    _, manifest = capture(tmp_path / "t", reentrant=False)
    assert [entry["feature"] for entry in manifest["torch_limitations"]] == lacking and set(ORDER) <= set(TABLES)
    with open_trace(tmp_path / "t") as trace:
        assert len(health_lines(trace.health())) == len(lacking)
        assert ("torch_limitations" in trace.health()) == bool(lacking)


def fake_eval_frame(**switches) -> SimpleNamespace:
    return SimpleNamespace(set_eval_frame=lambda callback: None, **switches)


def test_dynamo_frame_switches_take_the_spelling_this_torch_has(monkeypatch):
    skipped = []
    older = fake_eval_frame(skip_code=skipped.append)
    monkeypatch.setattr(torch._C, "_dynamo", SimpleNamespace(eval_frame=older))
    set_eval_frame, skip_code = dynamo_frames.frame_switches()
    assert set_eval_frame is older.set_eval_frame and skip_code is older.skip_code and len(skipped) == 1

    def broken(code):
        raise RuntimeError("a switch that does not work")

    monkeypatch.setattr(torch._C, "_dynamo", SimpleNamespace(eval_frame=fake_eval_frame(skip_code=broken)))
    assert dynamo_frames.frame_switches() == (None, None)  # RecordingMode then keeps torch's wrapper
    monkeypatch.setattr(torch._C, "_dynamo", SimpleNamespace(eval_frame=fake_eval_frame()))
    assert dynamo_frames.frame_switches() == (None, None)
    monkeypatch.undo()
    assert None not in dynamo_frames.frame_switches()  # every torch capture supports has one


def test_the_matrix_leaves_out_tests_that_exist():
    """scripts/torch_matrix.py leaves SpikingJelly's tests out by name where SpikingJelly cannot
    run (torch 2.4): a name no test has any more (a test renamed) would leave its test in, and
    the matrix fails on that torch, as it once did."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    script = ast.parse((root / "scripts" / "torch_matrix.py").read_text())
    constants = {target.id: ast.literal_eval(node.value) for node in script.body if isinstance(node, ast.Assign)
                 for target in node.targets if isinstance(target, ast.Name)
                 and target.id in ("QUICK_TESTS", "FULL_TESTS", "WITHOUT_SPIKINGJELLY")}
    names = {node.name for path in [*constants["QUICK_TESTS"], *constants["FULL_TESTS"]]
             for node in ast.walk(ast.parse((root / path).read_text()))
             if isinstance(node, ast.FunctionDef) and node.name.startswith("test")}
    # (NEVER's words match parameter ids, not test names: not checked here)
    stale = [word for word in constants["WITHOUT_SPIKINGJELLY"] if not any(word in name for name in names)]
    assert not stale, stale
