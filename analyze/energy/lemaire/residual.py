"""Qualia's residual Add (its SResNet special case), for the Lemaire "qualia" convention.

Qualia needs a residual written as its `Add` layer (a Python `+` fails its graph tracer) and
treats it specially (EnergyEstimationMetric._process_model, qualia-plugin-snn 2.6.0):
* an Add whose inputs are all binary has a "binary" output whose spike count is the tensor
  sum (a 2 counts as two spikes), and each direct successor whose inputs are then all binary
  has its input marked binary with the tensor sum as its spike count, so the next Conv/Linear
  is costed as a spiking layer on those spikes, not as a 'Hybrid' one. An Add fed by such an
  Add is binary too (chains of residual blocks).
* a formal Add (Qualia's core `Add`, not a SpikingJelly StepModule) is costed once per
  inference with Qualia's formal-layer formulas (below); a StepModule Add costs nothing.

An Add is recognised as Qualia tells its layers apart: by class name (`Add`, `QuantizedAdd`,
from Qualia or the user's own) and by whether a StepModule is in its MRO. The trace has no
tensor sums, but an Add of binary tensors sums their nonzeros: the sum of its output is the
sum, over its inputs, of each input's nnz (binary) or of the output sum of the Add that made it.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

ADD_CLASS_NAMES = ("Add", "QuantizedAdd")
STEP_MODULE_SUFFIX = ".StepModule"

# One row per positional tensor input of every forward call of an Add of the model.
ADD_INPUTS_SQL = f"""
WITH calls AS (
    SELECT pre.rank, m.path AS module, pre.call_index, pre.seq AS pre_seq, post.outputs[1] AS out_id,
           list_bool_or(list_transform(m.mro, lambda c: ends_with(c, '{STEP_MODULE_SUFFIX}'))) AS step_module,
           coalesce(m.attributes->>'step_mode', 's') AS step_mode, pre.inputs
    FROM (SELECT * FROM module_events WHERE kind = 'forward_pre' AND {{where}}) pre
    JOIN module_events post ON post.rank = pre.rank AND post.module_id = pre.module_id
     AND post.call_index = pre.call_index AND post.kind = 'forward_post'
    JOIN modules m ON m.rank = pre.rank AND m.module_id = pre.module_id AND m.in_model
    WHERE string_split(m.class_name, '.')[-1] IN {ADD_CLASS_NAMES} AND len(pre.inputs) >= 2  -- a qualified name's last part
),
inputs AS MATERIALIZED (SELECT *, unnest(inputs) AS x_id, unnest(range(len(inputs))) AS position FROM calls),
-- the states the inputs name, found by a semi join: a join of tensor_states itself makes DuckDB
-- build a hash table of every state of the trace, however few Adds it holds (none, even)
used AS (SELECT t.rank, t.tensor_id, t.is01, t.nnz, t.shape FROM tensor_states t
         SEMI JOIN (SELECT rank, x_id AS tensor_id FROM inputs UNION ALL SELECT rank, out_id FROM inputs) w
           ON w.rank = t.rank AND w.tensor_id = t.tensor_id)
SELECT i.rank, i.module, i.call_index, i.pre_seq, i.out_id, i.step_module, i.step_mode, i.position, i.x_id,
       coalesce(x.is01, false) AS is01, coalesce(x.nnz, 0) AS nnz, x.shape AS x_shape, o.shape AS o_shape
FROM inputs i
LEFT JOIN used x ON x.rank = i.rank AND x.tensor_id = i.x_id
LEFT JOIN used o ON o.rank = i.rank AND o.tensor_id = i.out_id
ORDER BY i.pre_seq, i.position
"""

OUTPUT_COLUMNS = ["rank", "out_id", "out_sum"]


def add_inputs(trace, where: str) -> pd.DataFrame:
    return trace.sql(ADD_INPUTS_SQL.replace("{where}", where))


def binary_add_outputs(inputs: pd.DataFrame) -> pd.DataFrame:
    """(rank, out_id, out_sum) of every call of an Add Qualia treats as binary: all its inputs,
    in every call, are binary or outputs of such an Add. Adds are resolved in the order of
    their first call, so the Adds feeding one are resolved before it (a loop over Add
    modules, not over calls)."""
    sums = pd.Series(dtype=float, index=pd.MultiIndex.from_arrays([[], []], names=["rank", "out_id"]))
    found = []
    for _, rows in inputs.groupby("module", sort=False):  # sorted by first call in ADD_INPUTS_SQL
        produced = sums.reindex(pd.MultiIndex.from_arrays([rows["rank"], rows["x_id"]])).to_numpy()
        binary = rows["is01"].to_numpy(dtype=bool)
        if not (binary | ~np.isnan(produced)).all():
            continue
        value = np.where(binary, rows["nnz"].to_numpy(dtype=float), produced)
        per_call = rows.assign(out_sum=value).groupby(["rank", "out_id"])["out_sum"].sum()
        sums = pd.concat([sums, per_call])
        found.append(per_call.reset_index())
    return pd.concat(found, ignore_index=True) if found else pd.DataFrame(columns=OUTPUT_COLUMNS)


def _per_sample(shape, step_mode: str) -> list[int]:
    return [int(d) for d in shape[(2 if step_mode == "m" else 1):]]


def formal_add_terms(inputs: pd.DataFrame) -> list[tuple[int, str, list]]:
    """(first seq, module, terms) of each formal Add, Qualia's `_*_add_fnn` formulas from the
    per-sample shapes of its first call (channels last in Qualia, which changes no sum or
    product, and its last dim is our first):
      ops add   min_i sum(shape_i) * (inputs - 1)    (Qualia sums the dims where it means their product)
      addr add  min_i sum(shape_i)
      reads     sum_i sum(shape_i), at the memory of the first input's elements
      writes    the output's channels, at the memory of the output's elements"""
    terms = []
    formal = inputs[~inputs["step_module"].astype(bool)]
    for module, rows in formal.groupby("module", sort=False):
        first = rows[rows["pre_seq"] == rows["pre_seq"].min()].sort_values("position")
        mode = first["step_mode"].iloc[0]
        shapes = [_per_sample(s, mode) for s in first["x_shape"]]
        out = _per_sample(first["o_shape"].iloc[0], mode)
        sums = [sum(s) for s in shapes]
        terms.append((int(first["pre_seq"].iloc[0]), module, [
            ("ops", "add", float(min(sums) * (len(sums) - 1)), None),
            ("addr", "add", float(min(sums)), None),
            ("mem_io", "read", float(sum(sums)), float(math.prod(shapes[0]))),
            ("mem_io", "write", float(out[0] if out else 1), float(math.prod(out))),
        ]))
    return terms
