"""Activation checkpointing (torch.utils.checkpoint, reentrant and not): the ops recomputed
during backward carry `recompute` (exactly those: a probe mode beside the recorder says which
ran inside the checkpointed function during backward) and the scopes of the forward they
repeat, not of the backward that triggered them; the backward's own ops keep eager's scopes;
and training stays bit-identical to the uncaptured run. The analysis counts and costs that
recomputation (by default: it ran), or leaves it out so that the numbers equal training
without checkpointing, or shows it alone."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from spiketrace.analyze import Analysis
from spiketrace.analyze.cli import main
from spiketrace.analyze.counters import ALL_COUNTERS, COUNTERS, count
from tests.real_jobs.tracefiles import manifests, reference_problems, run_job, table

BOOKKEEPING = ("aten.detach.default", "aten.view.default")  # alias ops checkpointing adds or drops


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    out = tmp_path_factory.mktemp("checkpointing")
    done = run_job("checkpointed_training.py", out)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, json.loads((out / "result.json").read_text())


def events(root) -> list[tuple]:
    """(op, parents, in_backward, recompute) per event, in order."""
    parents = {s["scope_id"]: tuple(s["parents"]) for s in table(root, "scopes").to_pylist()}
    rows = sorted(table(root, "events").to_pylist(), key=lambda e: e["seq"])
    return [(e["op"], parents[e["scope_id"]], e["in_backward"], e["recompute"]) for e in rows]


def without_bookkeeping(rows):
    return [row[:2] for row in rows if row[0] not in BOOKKEEPING]


@pytest.mark.parametrize("variant", ["nonreentrant", "reentrant"])
def test_recomputed_ops_are_flagged_and_scoped_as_their_forward(job, variant):
    out, result = job
    root = out / variant
    manifest = manifests(root)[0]
    assert manifest["status"] == "complete" and manifest["degraded"] == [] and not reference_problems(root)
    assert result[variant]["identical"] and not manifest["compiled"]
    rows = events(root)
    assert [row[3] for row in rows] == [bool(r) for r in result[variant]["recomputed"]]  # exactly the recomputed ops
    for region, block in ((1, "Net.block"), (2, "Net.block2")):
        recomputed = without_bookkeeping([row for row, r in zip(rows, result[variant]["recomputed"]) if r == region])
        forward = without_bookkeeping([row for row, r in zip(rows, result[variant]["checkpointed"]) if r == region])
        assert "aten.convolution.default" in {op for op, _ in recomputed}
        assert recomputed == forward[: len(recomputed)]  # the forward repeated, under its own scopes
        for op, parents in recomputed:
            assert set(parents) <= {"Global", "Net", block, f"{block}.conv", f"{block}.bn", f"{block}.relu"}, (op, parents)

    # The backward's own ops carry eager's scopes: nothing recomputed stays in scope after it.
    eager = [row for row in events(out / "eager") if row[2]]
    backward = [row for row in rows if row[2] and not row[3]]
    if variant == "nonreentrant":  # the same backward, in the same order (saved tensors are unpacked by detaching)
        assert without_bookkeeping(backward) == without_bookkeeping(eager)
    else:
        # The reentrant backward differentiates its recomputed graph in a nested backward whose
        # root is the checkpoint's output, so (as for a loss module, the root of the outer
        # backward) the module returning it is never re-entered: SpikingJelly's tracker does
        # the same. Each op keeps eager's scopes but may lack that one: never one too many.
        def by_op(rows):
            grouped: dict[str, list] = {}
            for op, parents in without_bookkeeping(rows):
                grouped.setdefault(op, []).append(set(parents))
            return grouped

        ours, theirs = by_op(backward), by_op(eager)
        assert {op: len(p) for op, p in ours.items()} == {op: len(p) for op, p in theirs.items()}
        for op in ours:
            assert all(a <= b for a, b in zip(ours[op], theirs[op])), (op, ours[op], theirs[op])

    module_events = table(root, "module_events").to_pylist()
    again = [(m["kind"], m["tracker_name"]) for m in module_events if m["recompute"]]
    assert again == [(kind, f"{block}{child}") for block in ("Net.block2", "Net.block") for kind, child in (
        ("forward_pre", ""), ("forward_pre", ".conv"), ("forward_post", ".conv"), ("forward_pre", ".bn"),
        ("forward_post", ".bn"), ("forward_pre", ".relu"), ("forward_post", ".relu"), ("forward_post", ""))]


def test_eager_run_has_no_recomputation(job):
    out, result = job
    assert result["eager"]["identical"]
    assert not any(row[3] for row in events(out / "eager"))
    assert not any(m["recompute"] for m in table(out / "eager", "module_events").to_pylist())


# -- the analysis: recomputation included, excluded or alone (analyze/counters recompute=) -------


def counted(root, counters=ALL_COUNTERS, **options) -> dict:
    """{(counter, scope, op): value} over the whole trace, values that are not 0 (a bookkeeping
    op checkpointing adds or drops, a detach, is listed at 0 by the counters that cover it)."""
    frame = count(root, list(counters), **options).frame
    sums = frame.groupby(["counter", "scope", "op"])["value"].sum()
    return {key: int(value) for key, value in sums.items() if value}


@pytest.mark.parametrize("variant", ["nonreentrant", "reentrant"])
def test_counts_without_recomputation_equal_training_without_checkpointing(job, variant):
    out, _ = job
    eager, excluded = counted(out / "eager"), counted(out / variant, recompute="exclude")
    if variant == "nonreentrant":  # every counter, scope and op: the same integers
        assert excluded == eager
    else:  # the same work; the reentrant backward lacks one scope for some ops (see above)
        def whole(counts):
            return {key: value for key, value in counts.items() if key[1] == "Global"}

        assert whole(excluded) == whole(eager)
    included, recomputed = counted(out / variant), counted(out / variant, recompute="only")
    assert recomputed and included != excluded
    assert {k: included.get(k, 0) - excluded.get(k, 0) for k in included | excluded} == \
        {k: recomputed.get(k, 0) for k in included | excluded}
    # The recomputed forward, by hand: each block's Conv2d(4, 4, 3, padding=1, bias=False) on a
    # 3x4x6x6 input gives 3*4*6*6 = 432 outputs of 4*3*3 = 36 MACs; both blocks are recomputed.
    assert recomputed["mac", "Global", "aten.convolution.default"] == 2 * 432 * 36 == 31104
    assert recomputed["flop", "Global", "aten.convolution.default"] == 2 * 31104
    # Its module-level memory term: a non-binary input reads the fp32 weight once per MAC.
    assert recomputed["neuromorphic_memory_access", "Global", "weight_read_bytes"] == 2 * 432 * 36 * 4
    # and scope by scope it is each block's forward of the run without checkpointing
    for block in ("Net.block", "Net.block2"):
        forward = counted(out / "eager", COUNTERS, stage="forward", module=block)
        assert counted(out / variant, COUNTERS, recompute="only", module=block) == forward


@pytest.mark.filterwarnings("ignore:the compute model is forward-only")  # its scope, said elsewhere
def test_energy_models_include_recomputation_unless_told(job):
    out, _ = job
    root = out / "nonreentrant"
    with Analysis(root) as analysis, Analysis(out / "eager") as eager:
        for model in ("compute", "neuromc"):
            parts = {choice: analysis.energy(model, recompute=choice).energy_total_pj
                     for choice in ("include", "exclude", "only")}
            assert analysis.energy(model).energy_total_pj == parts["include"]  # the default: it ran
            assert parts["exclude"] == pytest.approx(eager.energy(model).energy_total_pj, rel=1e-12)
            assert parts["only"] > 0
            assert parts["include"] == pytest.approx(parts["exclude"] + parts["only"], rel=1e-12)
        # NeuroMC under compat leaves recomputation out, as SpikingJelly's profiler does
        compat = analysis.energy("neuromc", compat="spikingjelly").energy_total_pj
        assert compat == analysis.energy("neuromc", compat="spikingjelly", recompute="exclude").energy_total_pj
        assert compat == pytest.approx(eager.energy("neuromc", compat="spikingjelly").energy_total_pj, rel=1e-12)


def test_cli_says_what_it_does_with_recomputation(job):
    out, _ = job
    runner = CliRunner()
    shown = runner.invoke(main, ["counts", str(out / "nonreentrant"), "--counter", "mac", "--format", "json",
                                 "--recompute", "exclude"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["counters"]["mac"]["total"] == sum(
        v for (c, scope, _), v in counted(out / "eager", ["mac"]).items() if scope == "Global")
    assert "22 ops recomputed by activation checkpointing are left out" in shown.stderr
    energy = runner.invoke(main, ["energy", str(out / "nonreentrant"), "--model", "compute"])
    assert energy.exit_code == 0 and "recomputed by activation checkpointing are included" in energy.stderr
    quiet = runner.invoke(main, ["counts", str(out / "eager"), "--counter", "mac"])
    assert "recomputed" not in quiet.stderr
