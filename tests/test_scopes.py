"""Module scopes per op equal SpikingJelly's ActiveModuleTracker on the same run.

SpikingJelly's own tracker runs beside the recorder in one run; a probe dispatch mode
snapshots its `parents` and `active_modules` at every op. The trace must hold the same
snapshot for the same op, forward, backward, optimizer step and the stale state after
backward included. Both stacking orders of the two modes are run: with ours innermost, any
op our statistics dispatched would reach the probe, so this also proves they do not leak.
"""

from __future__ import annotations

import pytest
import torch
from spikingjelly.activation_based.op_counter.base import ActiveModuleTracker
from torch.overrides import resolve_name
from torch.utils._python_dispatch import TorchDispatchMode

from spiketrace.analyze import open_trace
from spiketrace.capture import Recorder
from tests.zoo import CASE_IDS, CASES, OPTIMIZERS, build, reset


class TrackerProbe(TorchDispatchMode):
    def __init__(self, tracker: ActiveModuleTracker) -> None:
        super().__init__()
        self.tracker = tracker
        self.rows: list[tuple[str, tuple, frozenset]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.rows.append(
            (resolve_name(func), tuple(sorted(self.tracker.parents)), frozenset(self.tracker.active_modules))
        )
        return out


def training_run(recorder: Recorder, model, x, case, optimizer) -> None:
    for _step in range(2):  # the second step starts with the stale tracker state of the first
        with recorder.stage("forward", phase="forward"):
            out = model(x)
        loss = case.loss_fn(out, case.target(out))  # unlabeled, not suspended: SJ counts it too
        with recorder.stage("backward", phase="backward"):
            loss.backward()
        with recorder.stage("optimizer", phase="optimizer"):
            optimizer.step()
            optimizer.zero_grad()
        reset(model)


def recorded_scopes(path, catalog_ids: dict[int, int]):
    with open_trace(path) as trace:
        frame = trace.sql(
            """SELECT e.op, s.parents, s.active_modules
               FROM events e JOIN scopes s USING (scope_id, rank) ORDER BY e.seq"""
        )
    return [
        (op, tuple(parents), frozenset(int(m) for m in active))
        for op, parents, active in zip(frame["op"], frame["parents"], frame["active_modules"])
    ]


@pytest.mark.parametrize("probe_inside", [True, False], ids=["probe-inside", "probe-outside"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_scopes_equal_spikingjelly_tracker(tmp_path, case, probe_inside):
    model, x = build(case)
    optimizer = OPTIMIZERS["sgd_momentum"](model.parameters())
    tracker = ActiveModuleTracker()
    probe = TrackerProbe(tracker)
    recorder = Recorder(tmp_path / "trace", model=model, optimizer=optimizer)
    if probe_inside:
        with recorder, tracker, probe:
            training_run(recorder, model, x, case, optimizer)
    else:
        with tracker, probe, recorder:
            training_run(recorder, model, x, case, optimizer)

    ids = recorder.catalog.ids
    expected = [(op, parents, frozenset(ids[id(m)] for m in active)) for op, parents, active in probe.rows]
    recorded = recorded_scopes(tmp_path / "trace", ids)
    assert len(recorded) == len(expected)
    mismatches = [(i, r, e) for i, (r, e) in enumerate(zip(recorded, expected)) if r != e]
    assert not mismatches, mismatches[:3]
    # The quirk the trace must keep: modules stay active after backward (spec 1.6).
    optimizer_scopes = {r[2] for r, e in zip(recorded, expected) if r[1] == ("Global",) and r[2]}
    assert optimizer_scopes, "expected stale active modules after backward"


def test_forward_only_scopes(tmp_path):
    case = CASES[0]
    model, x = build(case)
    tracker = ActiveModuleTracker()
    probe = TrackerProbe(tracker)
    recorder = Recorder(tmp_path / "trace", model=model)
    with recorder, tracker, probe, torch.no_grad(), recorder.stage("forward"):
        model(x)
    ids = recorder.catalog.ids
    expected = [(op, parents, frozenset(ids[id(m)] for m in active)) for op, parents, active in probe.rows]
    assert recorded_scopes(tmp_path / "trace", ids) == expected


def test_backward_events_carry_their_forward_calls_index(tmp_path):
    """A module called twice: each backward pair belongs to one forward call, the later call's
    gradients arriving first."""
    import torch
    from torch import nn

    from spiketrace.analyze import open_trace
    from spiketrace.capture import Recorder

    shared = nn.Linear(3, 3)
    model = nn.Sequential(shared, nn.Tanh(), shared)
    with Recorder(tmp_path / "trace", model=model):
        model(torch.rand(2, 3, requires_grad=True)).sum().backward()
    with open_trace(tmp_path / "trace") as trace:
        rows = trace.sql("""SELECT kind, call_index FROM module_events e JOIN modules m USING (rank, module_id)
                            WHERE m.path = 'Sequential.0' ORDER BY seq""")
    assert list(zip(rows["kind"], rows["call_index"])) == [
        ("forward_pre", 0), ("forward_post", 0), ("forward_pre", 1), ("forward_post", 1),
        ("backward_pre", 1), ("backward_post", 1), ("backward_pre", 0), ("backward_post", 0),
    ]


def test_loss_module_underflow_is_recorded_where_spikingjelly_aborts(tmp_path):
    """A loss module: SpikingJelly's tracker raises "active_modules stack underflow" at its
    inputs' grad hook (autograd never runs the loss output's own hook). Beside it, the
    recorder's scopes equal SpikingJelly's for every op up to that point, and the trace marks
    the spot; the recorder itself never raises (see tests/real_jobs for the full run)."""
    from spikingjelly.activation_based import functional, layer, neuron
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(layer.Linear(6, 5), neuron.LIFNode(), layer.Linear(5, 3))
    functional.set_step_mode(model, "m")
    criterion = nn.CrossEntropyLoss()
    x = torch.rand(4, 2, 6)
    tracker = ActiveModuleTracker()
    probe = TrackerProbe(tracker)
    recorder = Recorder(tmp_path / "trace", model=model)
    with recorder, tracker, probe:  # ours first, so its grad hook fires before SpikingJelly's
        loss = criterion(model(x).mean(0), torch.tensor([0, 2]))
        with pytest.raises(RuntimeError, match="active_modules stack underflow"):
            loss.backward()
    ids = recorder.catalog.ids
    expected = [(op, parents, frozenset(ids[id(m)] for m in active)) for op, parents, active in probe.rows]
    recorded = recorded_scopes(tmp_path / "trace", ids)
    assert recorded == expected
    with open_trace(tmp_path / "trace") as trace:
        [underflow] = trace.manifest["tracker_underflows"]
        last_seq = int(trace.sql("SELECT max(seq) AS s FROM events")["s"].iloc[0])
    assert underflow["module_id"] == ids[id(criterion)] and underflow["count"] == 1
    assert underflow["first_seq"] == last_seq + 1  # SpikingJelly stopped right there, ops included



def _backward_variant_run(recorder, model, x, variant):
    """One step whose backward skips nodes, runs twice, or starts at a leaf input's grad."""
    with recorder.stage("forward", phase="forward"):
        out = model(x).sum()
    with recorder.stage("backward", phase="backward"):
        if variant == "inputs_of_the_last_layer":  # the engine runs only the last layer's nodes
            out.backward(inputs=[model[-1].weight])
        elif variant == "inputs_of_the_leaf_input":  # the input's grad captured, not accumulated
            out.backward(inputs=[x])
        elif variant == "retain_graph_twice":  # two graph tasks over one graph
            out.backward(retain_graph=True)
            out.backward()
        else:
            out.backward()


def _variant_trace(tmp_path, monkeypatch, variant, single_tensor_hooks, probe=None, merged_holds=True):
    from torch import nn

    from spiketrace.capture.modules import tracker as capture_tracker

    monkeypatch.setattr(capture_tracker, "SINGLE_TENSOR_HOOKS", single_tensor_hooks)
    monkeypatch.setattr(capture_tracker, "MERGED_HOLDS", merged_holds)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
    x = torch.rand(4, 6, requires_grad=variant in ("leaf_input", "inputs_of_the_leaf_input"))
    path = tmp_path / f"trace-{single_tensor_hooks}-{merged_holds}"
    recorder = Recorder(path, model=model)
    if probe is None:
        with recorder:
            _backward_variant_run(recorder, model, x, variant)
    else:
        with recorder, probe.tracker, probe:
            _backward_variant_run(recorder, model, x, variant)
    with open_trace(path) as trace:
        hooks = trace.sql("SELECT seq, kind, module_id, call_index FROM module_events ORDER BY seq")
    return recorder, recorded_scopes(path, recorder.catalog.ids), hooks.values.tolist()


@pytest.mark.parametrize("single_tensor_hooks", [True, False], ids=["own-hook", "multi-grad-hook"])
@pytest.mark.parametrize("variant", ["inputs_of_the_last_layer", "retain_graph_twice"])
def test_scopes_equal_spikingjelly_when_backward_skips_nodes_or_runs_twice(tmp_path, monkeypatch, variant,
                                                                            single_tensor_hooks):
    # A module's one input or output is held by its own tensor hook (capture/modules/tracker.py
    # SINGLE_TENSOR_HOOKS) instead of torch's multi-grad hook, which SpikingJelly's tracker
    # uses: both must give SpikingJelly's scopes where the two could part: a backward whose
    # `inputs` leave earlier modules' nodes unrun (a multi-grad hook never fires there) and
    # two graph tasks over one graph.
    probe = TrackerProbe(ActiveModuleTracker())
    recorder, recorded, hooks = _variant_trace(tmp_path, monkeypatch, variant, single_tensor_hooks, probe)
    ids = recorder.catalog.ids
    expected = [(op, parents, frozenset(ids[id(m)] for m in active)) for op, parents, active in probe.rows]
    assert recorded == expected
    # 4 modules (the Sequential and its 3 layers) entered once each way in forward; backward_pre
    # per graph task for each module whose output grad is computed: all four twice, or only
    # the Sequential and its last layer (they share the output) when only that layer's
    # weight is asked for.
    backward_pre = sum(kind == "backward_pre" for _, kind, _, _ in hooks)
    assert backward_pre == {"inputs_of_the_last_layer": 2, "retain_graph_twice": 8}[variant]


@pytest.mark.parametrize("variant", ["inputs_of_the_last_layer", "retain_graph_twice", "leaf_input",
                                     "inputs_of_the_leaf_input"])
def test_a_single_tensor_hook_records_what_the_multi_grad_hook_records(tmp_path, monkeypatch, variant):
    # The leaf input too: held through its grad accumulator (torch's _get_grad_fn_or_grad_acc,
    # whose view_as the trace records either way).
    own = _variant_trace(tmp_path, monkeypatch, variant, True)
    multi = _variant_trace(tmp_path, monkeypatch, variant, False)
    assert own[1:] == multi[1:]


@pytest.mark.parametrize("variant", ["whole", "inputs_of_the_last_layer", "retain_graph_twice", "leaf_input"])
def test_holds_on_one_tensor_share_its_hook_and_record_what_one_hook_each_records(tmp_path, monkeypatch, variant):
    # Sequential(Linear, Tanh, Linear): a hold on each output (3 layers and the Sequential) and
    # on each input that requires grad (Tanh's and the last Linear's; the leaf input's, twice,
    # where it requires grad). Tanh's input is the first Linear's output, the last Linear's
    # input Tanh's output, the Sequential's output the last Linear's: 3 holds join a hook
    # already there. A leaf input's two holds never share one (each finds its grad accumulator
    # through a view_as the trace records). Joined or not, the same events, scopes and hooks.
    from spiketrace.capture.modules.tracker import ScopeTracker

    hooks = []
    one = ScopeTracker._hook_one
    monkeypatch.setattr(ScopeTracker, "_hook_one", lambda self, *a: hooks.append(1) or one(self, *a))
    joined = _variant_trace(tmp_path, monkeypatch, variant, True)
    hooks_joined, hooks[:] = len(hooks), []
    separate = _variant_trace(tmp_path, monkeypatch, variant, True, merged_holds=False)
    assert joined[1:] == separate[1:]
    holds = 8 if variant == "leaf_input" else 6
    assert (hooks_joined, len(hooks)) == (holds - 3, holds)


def test_hook_tensors_come_in_tree_flatten_order_whatever_the_container():
    # capture/modules/tracker.py _tensors skips torch's pytree for a tensor, an empty dict and a plain
    # tuple or list of tensors and None; every other container goes through tree_flatten.
    # Either way: the tensors tree_flatten finds, the very objects, in its order.
    import collections

    from torch.utils._pytree import tree_flatten

    from spiketrace.capture.modules.tracker import _tensors

    t, p = torch.zeros(2), torch.nn.Parameter(torch.ones(1))
    pair = collections.namedtuple("pair", "a b")
    for value in [t, p, (), [], {}, (t,), (t, None, p), [t, p], (t, 3), (t, (p,)), {"a": t}, pair(t, p), None, 3,
                  ([t], t), {"x": None}, [None, t]]:
        want = [a for a in tree_flatten(value)[0] if isinstance(a, torch.Tensor)]
        got = _tensors(value)
        assert len(got) == len(want) and all(a is b for a, b in zip(got, want)), value
