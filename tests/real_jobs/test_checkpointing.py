"""Activation checkpointing (torch.utils.checkpoint, reentrant and not): the ops recomputed
during backward carry `recompute` (exactly those: a probe mode beside the recorder says which
ran inside the checkpointed function during backward) and the scopes of the forward they
repeat, not of the backward that triggered them; the backward's own ops keep eager's scopes;
and training stays bit-identical to the uncaptured run."""

from __future__ import annotations

import json

import pytest

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
