"""Optimizer fragments from the trace's optimizer_steps rows (one per parameter per step()),
as SpikingJelly's `record_optimizer_step` builds them (spec 3.3.2).

The rows are taken before the update, when SpikingJelly looks: a momentum buffer exists
from the second step on. Parameters without a gradient are skipped. kt counts the elements
of 0/1-D parameters (biases, BN affine), fyfxkc those of the others.
* Adam / AdamW: one fragment per step() call.
* SGD: one fragment per bucket (momentum > 0, weight_decay > 0, momentum buffer present,
  kt or fyfxkc), in first-seen order. Nesterov, dampening and maximize are not modelled.

Each fragment is split into one part per owning module. Every optimizer formula is linear
in kt and fyfxkc with no constant term, so the parts add up to the fragment exactly and
give each module its share of the update energy.
"""

from __future__ import annotations

import pandas as pd

# The stage a step() ran in: stages never nest (the Recorder refuses it), so it is the last
# stage begun before the step (an ASOF join, sort-based), if it had not ended by then.
OPTIMIZER_SQL = """
SELECT o.rank, o.seq, o.step, o.optimizer_class, o.group_index, o.param_index, o.ndim, o.numel, o.has_grad,
       coalesce(json_extract(o.hyperparameters, '$.momentum')::DOUBLE, 0) > 0 AS has_momentum,
       coalesce(json_extract(o.hyperparameters, '$.weight_decay')::DOUBLE, 0) > 0 AS has_weight_decay,
       coalesce(json_extract(o.hyperparameters, '$.nesterov')::BOOLEAN, false) AS nesterov,
       coalesce(json_extract(o.hyperparameters, '$.dampening')::DOUBLE, 0) AS dampening,
       coalesce(json_extract(o.hyperparameters, '$.maximize')::BOOLEAN, false) AS maximize,
       list_contains(o.state_keys, 'momentum_buffer') AS has_buffer,
       coalesce(CASE WHEN o.seq < coalesce(s.end_seq, 9223372036854775807) THEN s.name END, 'unlabeled') AS stage,
       coalesce(m.path, o.parameter, 'optimizer') AS module
FROM optimizer_steps o
ASOF LEFT JOIN stages s ON s.rank = o.rank AND s.begin_seq < o.seq
LEFT JOIN modules m ON m.rank = o.rank AND m.module_id = o.module_id
"""

ADAM_CLASSES = {"Adam": "adam", "AdamW": "adamw"}


def _sgd_problem(rows: pd.DataFrame) -> pd.Series:
    """SpikingJelly's _validate_sgd_group message for each row's group, or None."""
    problem = pd.Series(None, index=rows.index, dtype=object)
    problem = problem.where(~rows["maximize"], "NeuroMC runtime SGD modeling currently supports only maximize=False.")
    problem = problem.where(rows["dampening"] == 0, "NeuroMC runtime SGD modeling currently supports only dampening=0.")
    return problem.where(~rows["nesterov"], "NeuroMC runtime SGD modeling currently supports only nesterov=False.")


def _fragments(parts: pd.DataFrame, op_name) -> pd.DataFrame:
    kt, fyfxkc = parts["kt"].astype("int64"), parts["fyfxkc"].astype("int64")
    frame = parts[["rank", "step", "seq", "sub", "stage", "module"]].copy()
    frame["phase"], frame["op_name"], frame["core_type"], frame["process_key"] = "optimizer", op_name, "bp_grad_opt", "with_opt"
    for dim, value in (("B", 1), ("T", 1), ("C", 1), ("K", kt), ("OY", 1), ("OX", 1), ("FY", 1), ("FX", fyfxkc), ("G", 1)):
        frame[dim] = value  # K and FX are not clamped to 1 (SpikingJelly overwrites them after clamping)
    frame["input_precision_bits"] = frame["weight_precision_bits"] = frame["output_precision_bits"] = 32
    frame["input_numel"], frame["weight_numel"], frame["output_numel"] = kt, fyfxkc, kt + fyfxkc
    frame["mac_count"], frame["conv_type"], frame["b_type"], frame["t_type"], frame["source"] = 0, "--", 0, 0, "optimizer"
    for flag in ("has_momentum", "has_weight_decay", "has_momentum_buffer"):
        frame[f"optimizer_{flag}"] = parts[flag].astype(bool) if flag in parts else False
    return frame


def optimizer_fragments(trace, *, compat: bool) -> tuple[pd.DataFrame, pd.DataFrame, set[str], str | None]:
    """(fragments, uncosted rows, problems, other) of every recorded optimizer step(): problems
    are SpikingJelly's messages for the SGD settings it refuses, other the class of the first
    optimizer it has no model for (None: none)."""
    rows = trace.sql(OPTIMIZER_SQL)
    frames, uncosted, other_class = [], [], None
    problems: set[str] = set()
    if not len(rows):
        return pd.DataFrame(), pd.DataFrame(), problems, other_class
    rows["kt"] = rows["numel"].where(rows["ndim"] <= 1, 0)
    rows["fyfxkc"] = rows["numel"].where(rows["ndim"] > 1, 0)
    with_grad = rows[rows["has_grad"]]

    adam = rows["optimizer_class"].isin(ADAM_CLASSES)
    if adam.any():
        calls = rows[adam].groupby(["rank", "seq"], as_index=False).agg(
            step=("step", "first"), stage=("stage", "first"), optimizer_class=("optimizer_class", "first"))
        parts = with_grad[with_grad["optimizer_class"].isin(ADAM_CLASSES)].groupby(
            ["rank", "seq", "module"], as_index=False, sort=False)[["kt", "fyfxkc"]].sum()
        # every call has a fragment, even one whose parameters all lack gradients
        parts = calls.merge(parts, on=["rank", "seq"], how="left").fillna({"kt": 0, "fyfxkc": 0, "module": "optimizer"})
        frames.append(_fragments(parts.assign(sub=0), parts["optimizer_class"].map(ADAM_CLASSES)))

    sgd = with_grad[with_grad["optimizer_class"] == "SGD"].copy()
    if len(sgd):
        sgd["problem"] = _sgd_problem(sgd)
        bad = sgd[sgd["problem"].notna()]
        if len(bad):
            problems = set(bad["problem"])
            # SpikingJelly refuses the whole step; by default only the offending groups go uncosted
            bad_calls = set(zip(bad["rank"], bad["seq"]))
            drop = pd.Series([k in bad_calls for k in zip(sgd["rank"], sgd["seq"])], index=sgd.index) if compat \
                else sgd["problem"].notna()
            uncosted.append(sgd[drop].assign(name="SGD", reason=sgd.loc[drop, "problem"].fillna(
                "the step holds a group SpikingJelly refuses")))
            sgd = sgd[~drop]
        sgd["bucket_buffer"] = sgd["has_momentum"] & sgd["has_buffer"]
        sgd["bucket_kt"] = sgd["ndim"] <= 1
        keys = ["rank", "seq", "has_momentum", "has_weight_decay", "bucket_buffer", "bucket_kt"]
        sgd = sgd.sort_values(["rank", "seq", "group_index", "param_index"])
        sgd["sub"] = sgd.groupby(keys, sort=False).ngroup()
        sgd["sub"] -= sgd.groupby(["rank", "seq"])["sub"].transform("min")
        parts = sgd.groupby([*keys, "sub", "module"], as_index=False, sort=False).agg(
            step=("step", "first"), stage=("stage", "first"), kt=("kt", "sum"), fyfxkc=("fyfxkc", "sum"))
        parts = parts[(parts["kt"] + parts["fyfxkc"]) > 0].rename(columns={"bucket_buffer": "has_momentum_buffer"})
        frames.append(_fragments(parts, "sgd"))

    other = rows[~adam & (rows["optimizer_class"] != "SGD")]
    if len(other):
        other_class = other.sort_values(["rank", "seq"], kind="stable")["optimizer_class"].iloc[0]
        uncosted.append(other.assign(name=other["optimizer_class"], reason="no NeuroMC optimizer model"))
    uncosted_frame = pd.concat(uncosted, ignore_index=True) if uncosted else pd.DataFrame()
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return frame, uncosted_frame, problems, other_class


def optimizer_refusals(problems: set[str], other_class: str | None) -> list[str]:
    """SpikingJelly's refusals of the recorded optimizer steps, in its order."""
    refusals = sorted(problems)
    if other_class is not None:
        refusals.append("NeuroMC runtime optimizer modeling only supports Adam/AdamW and common SGD (nesterov=False, "
                        f"dampening=0, maximize=False); got {other_class}.")
    return refusals
