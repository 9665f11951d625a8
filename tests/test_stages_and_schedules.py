"""Stage names mean the phase users mean by them; schedules record what they say, leave torch
alone in between, and report each recorded cycle to `on_trace_ready`."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

from spiketrace.capture import Recorder, RecorderError, schedule
from spiketrace.capture.session.schedules import NONE, RECORD, RECORD_AND_SAVE, WARMUP, step_action
from spiketrace.capture.session.stages import PHASE_WORDS, infer_phase
from tests.real_jobs.tracefiles import manifests, table

# --- stage names --------------------------------------------------------------------------------

NAMES = {
    "forward": ["forward", "fwd", "FWD", "fw", "inference", "eval", "eval_step", "predict", "validation",
                "ForwardPass", "b1_t0_forward_without_bp_bn", "t2_fwd"],
    "backward": ["backward", "bwd", "backprop", "grad", "gradients", "bp", "loss_backward", "lossbackward",
                 "b0_t1_bwd_without_bp_bn", "BackwardPass"],
    "optimizer": ["optimizer", "opt", "optim", "step", "sgd_step", "update", "weight_update", "optimizer_update",
                  "adam", "AdamW_step", "zero_grad"],
}


@pytest.mark.parametrize("phase,name", [(phase, name) for phase, names in NAMES.items() for name in names])
def test_common_stage_names_get_their_phase(tmp_path, phase, name):
    assert infer_phase(name) == phase
    with Recorder(tmp_path / "t") as recorder, recorder.stage(name):
        torch.ones(2).neg()
    [begin, _] = table(tmp_path / "t", "stage_markers").to_pylist()
    assert (begin["name"], begin["phase"], begin["phase_source"]) == (name, phase, "inferred")
    assert set(table(tmp_path / "t", "events").column("phase").to_pylist()) == {phase}


@pytest.mark.parametrize("name", ["loss", "x", "train_step", "forward_backward", "fwd_bwd", "stage1"])
def test_a_name_without_its_phase_is_refused_unless_phase_is_given(tmp_path, name):
    with Recorder(tmp_path / "t") as recorder:
        with pytest.raises(RecorderError, match=r"cannot tell the phase.*phase=.*fwd.*bwd.*sgd") as refused:
            with recorder.stage(name):
                pass
        for word in PHASE_WORDS["backward"]:
            assert word in str(refused.value)  # the error lists the words it knows
        assert recorder.current_stage is None
        with recorder.stage(name, phase="backward"):
            torch.ones(2).neg()
    markers = table(tmp_path / "t", "stage_markers").to_pylist()
    assert [(m["name"], m["phase"], m["phase_source"]) for m in markers] == [(name, "backward", "explicit")] * 2


# --- schedules ----------------------------------------------------------------------------------

def test_schedule_has_torch_profiler_actions():
    rule = schedule(skip_first=1, wait=1, warmup=1, active=2, repeat=2)
    actions = [step_action(rule, step) for step in range(11)]
    assert actions == [NONE, NONE, WARMUP, RECORD, RECORD_AND_SAVE, NONE, WARMUP, RECORD, RECORD_AND_SAVE, NONE, NONE]
    assert [rule(step) for step in range(5)] == [False, False, False, True, True]
    profiler = torch.profiler.schedule(skip_first=1, wait=1, warmup=1, active=2, repeat=2)
    assert [step_action(profiler, step) for step in range(11)] == actions  # torch's own is taken as well
    assert [step_action(lambda s: s % 3 == 0, s) for s in range(4)] == [RECORD, NONE, NONE, RECORD]
    with pytest.raises(ValueError, match="active >= 1"):
        schedule(active=0)


def _in_torch() -> tuple[int, int]:
    """(dispatch modes, global forward hooks) torch holds right now."""
    hooks = torch.nn.modules.module
    return len(_get_current_dispatch_mode_stack()), len(hooks._global_forward_pre_hooks) + len(hooks._global_forward_hooks)


def test_unrecorded_steps_leave_torch_alone_and_write_nothing(tmp_path):
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    rule = schedule(skip_first=2, wait=1, warmup=1, active=2, repeat=2)
    ready, state = [], []
    with Recorder(tmp_path / "t", model=model, optimizer=optimizer, schedule=rule, on_trace_ready=ready.append) as rec:
        for step in range(12):
            state.append(_in_torch())
            with rec.stage("forward"):
                loss = model(torch.ones(3, 4)).sum()
            with rec.stage("backward"):
                loss.backward()
            with rec.stage("optimizer"):
                optimizer.step()
                optimizer.zero_grad()
            rec.step()
            if step in (5, 9):  # each cycle's last recorded step: flushed and reported
                assert ready == [str(tmp_path / "t")] * (1 if step == 5 else 2)
                assert manifests(tmp_path / "t")[0]["counts"]["events"] > 0
    assert _in_torch() == (0, 0)
    recorded = {step for step in range(12) if rule(step)}
    assert recorded == {4, 5, 8, 9}
    for step, (modes, hooks) in enumerate(state):
        if step_action(rule, step) == NONE:
            assert (modes, hooks) == (0, 0), step
        else:  # warm-up and recorded steps run the machinery
            assert modes == 1 and hooks == 2, step
    assert len(ready) == 2  # the last cycle was reported already: nothing more at close
    manifest = manifests(tmp_path / "t")[0]
    assert manifest["steps_recorded"] == 4 and manifest["settings"]["schedule"]["warmup"] == 1
    for name in ("events", "module_events", "stage_markers", "optimizer_steps"):
        assert set(table(tmp_path / "t", name).column("step").to_pylist()) == recorded, name
    assert len(table(tmp_path / "t", "stage_markers")) == 4 * 3 * 2


def test_on_trace_ready_is_called_at_close_without_a_schedule_or_for_an_open_cycle(tmp_path):
    ready = []
    with Recorder(tmp_path / "a", on_trace_ready=ready.append) as rec:
        torch.ones(2).neg()
        assert ready == []
        rec.step()
        assert ready == []
    assert ready == [str(tmp_path / "a")] and manifests(tmp_path / "a")[0]["status"] == "complete"
    ready.clear()
    with Recorder(tmp_path / "b", schedule=schedule(active=5), on_trace_ready=ready.append) as rec:
        for _ in range(2):  # closed in the middle of the first cycle
            torch.ones(2).neg()
            rec.step()
    assert ready == [str(tmp_path / "b")]
