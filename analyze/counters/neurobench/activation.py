"""NeuroBench 2.3.0's ActivationSparsity and MembraneUpdates from a trace (metrics.py's workload
metrics over activation layers).

Activation layers are found as NeuroBench finds them (find_activation_layers): top-down below
the root, a module of an activation class is taken and its children not searched.

* ActivationSparsity: per batch, zero outputs over outputs of the activation layers (the first
  output of a call); the batches' values weighted by their samples.
* MembraneUpdates: per snnTorch activation layer with a `mem`, its first call of a batch counts
  every element; each later call the elements whose membrane changed (`count_nonzero(mem
  before - mem after)`). The trace holds tensors' nnz, not where their zeros lie, so a change
  is read where a neuron's update decides it (MEMBRANE_RULES): `base`, the op that sums the
  decayed old membrane and the new input, found from the call's input along the rule's chain of
  ops (each reads the one before's output; all of the membrane's size). With a threshold above
  0 a zero membrane does not reset, so an element whose membrane and `base` are zero stays
  zero, and every other element moves when the decay is neither 0 (a nonzero membrane dropped
  under zero input, `base` 0) nor 1 (kept, `base` nonzero) and no state quantisation rounds the
  move away: the changed elements are `base`'s nonzeros.
  - Leaky: `beta * mem + input`, beta in (0, 1); reset by subtraction or none (its reset to zero
    zeroes mem before the add: a reset element under zero input has `base` 0, yet changed).
  - Synaptic: `beta * mem + (alpha * syn + input)`; RLeaky: `(beta * mem + input) +
    recurrent(spk)`; RSynaptic: `beta * mem + ((alpha * syn + input) + recurrent(spk))`; beta in
    (0, 1), any alpha. Any reset: theirs to zero acts after `base` (`base - reset * base`), on a
    membrane above threshold where `base` is nonzero; but only with reset_delay (without it a
    neuron that fires from a zero membrane is set back to zero, unchanged, `base` nonzero).
  - Lapicque: `input * R * (1 / (R C)) * dt + (1 - dt / (R C)) * mem`, any reset. As snnTorch
    builds it (from beta, or R and C) dt / (R C) = ln(1 / beta), so beta in (1/e, 1) puts the
    decay in (0, 1); R, C or time_step changed after construction are not seen.
  Exact but for a float coincidence (`base` 0 on a nonzero membrane by cancellation, or a
  membrane at its fixed point). Other neurons, and these outside their settings, count every
  element; a note says where that is an upper bound (a call whose input had zeros). Alpha stays
  there: its membrane is recomputed, tau * ((alpha * syn_exc + input) + (beta * syn_inh -
  input)), no op reads the old one and the input cancels itself, so a decayed current under a
  larger input can round away; SLSTM's and SConv2dLSTM's is an LSTM cell's output.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from spiketrace.analyze.neurons import NEURONS, quoted_list

SNNTORCH_NEURON = "snntorch._neurons.neurons.SpikingNeuron"


def _numbers(attributes: str, name: str) -> str:
    """SQL over a module's `attributes` column: a numeric attribute (a number, or a list of them
    for a small tensor) as a list of doubles; NULL when absent or stored as a shape only."""
    value = f"json_extract({attributes}, '$.{name}')"
    return (f"CASE WHEN json_type({value}) = 'ARRAY' THEN TRY_CAST({value} AS DOUBLE[]) "
            f"WHEN json_type({value}) IN ('DOUBLE', 'BIGINT', 'UBIGINT') THEN [CAST({value} AS DOUBLE)] END")


class MembraneRule(NamedTuple):
    """How a neuron class's call decides its changed membrane elements (module docstring)."""

    ops: tuple[str, ...]  # from the call's input to `base`: each op reads the one before's output
    resets: tuple[str, ...]  # reset mechanisms under which `base`'s nonzeros are the changed elements
    decay: tuple[float, float]  # the open interval beta must lie in


ADD, MUL, UNIT = "aten.add.Tensor", "aten.mul.Tensor", (0.0, 1.0)
ANY_RESET = ("subtract", "none", "zero")
# snnTorch neuron class (itself, not a subclass, whose forward may differ) -> its rule
MEMBRANE_RULES = {
    "snntorch._neurons.leaky.Leaky": MembraneRule((ADD,), ("subtract", "none"), UNIT),
    "snntorch._neurons.synaptic.Synaptic": MembraneRule((ADD, ADD), ANY_RESET, UNIT),
    "snntorch._neurons.rleaky.RLeaky": MembraneRule((ADD, ADD), ANY_RESET, UNIT),
    "snntorch._neurons.rsynaptic.RSynaptic": MembraneRule((ADD, ADD, ADD), ANY_RESET, UNIT),
    "snntorch._neurons.lapicque.Lapicque": MembraneRule((MUL, MUL, MUL, ADD), ANY_RESET, (math.exp(-1.0), 1.0)),
}


def _decides(rule: MembraneRule, attributes: str) -> str:
    """SQL over a module's `attributes`: the rule's settings hold (its resets, a reset to zero
    only with reset_delay, no state quantisation, beta in the rule's interval, threshold > 0)."""
    beta, threshold = _numbers(attributes, "beta"), _numbers(attributes, "threshold")
    reset, (low, high) = f"json_extract_string({attributes}, '$.reset_mechanism')", rule.decay
    return (f"({reset} IN ({', '.join(repr(r) for r in rule.resets)}) "
            f"AND ({reset} <> 'zero' OR coalesce(CAST(json_extract({attributes}, '$.reset_delay') AS BOOLEAN), true)) "
            f"AND NOT coalesce(CAST(json_extract({attributes}, '$.state_quant') AS BOOLEAN), true) "
            f"AND coalesce(list_min({beta}) > {low!r} AND list_max({beta}) < {high!r}, false) "
            f"AND coalesce(list_min({threshold}) > 0, false))")


def _match(names, mro: str = "mro") -> str:
    """SQL over `mro`: a class named (qualified, or bare as its last dotted part) is in it."""
    qualified = [n for n in names if "." in n]
    bare = [n for n in names if "." not in n]
    return (f"(list_has_any({mro}, {quoted_list(qualified or [''])}) OR "
            f"list_has_any(list_transform({mro}, lambda c: split_part(c, '.', -1)), {quoted_list(bare or [''])}))")


def _rule(mro: str, attributes: str) -> tuple[str, str]:
    """SQL over a module row: (its class's chain of ops to `base`, whether MEMBRANE_RULES'
    settings hold); the class itself, not a subclass, whose forward may differ."""
    ops = " ".join(f"WHEN {mro}[1] = '{name}' THEN {list(rule.ops)!r}::VARCHAR[]" for name, rule in MEMBRANE_RULES.items())
    holds = " ".join(f"WHEN {mro}[1] = '{name}' THEN {_decides(rule, attributes)}"
                     for name, rule in MEMBRANE_RULES.items())
    return f"CASE {ops} END", f"CASE {holds} ELSE false END"


def layers_sql(names) -> str:
    """SQL: the activation layers NeuroBench finds (find_activation_layers): top-down from the
    root's children, a match is taken and its children not searched. Each with its class's
    membrane rule (update_ops, exact_rule)."""
    update_ops, exact_rule = _rule("m.mro", "m.attributes")
    return f"""
    WITH RECURSIVE walk AS (
        SELECT rank, module_id, {_match(names)} AS hit, false AS below FROM modules
        WHERE in_model AND parent_id IN (SELECT module_id FROM modules r WHERE r.in_model AND r.parent_id IS NULL
                                         AND r.rank = modules.rank)
        UNION ALL
        SELECT m.rank, m.module_id, {_match(names, "m.mro")}, w.below OR w.hit
        FROM modules m JOIN walk w ON m.rank = w.rank AND m.parent_id = w.module_id
    )
    SELECT DISTINCT m.rank, m.module_id, m.path, m.class_name,
           list_has_any(m.mro, ['{SNNTORCH_NEURON}']) AS snntorch,
           list_has_any(list_transform(from_json(m.buffers, '[{{"name": "VARCHAR"}}]'), lambda b: b.name)
                        || list_transform(from_json(m.parameters, '[{{"name": "VARCHAR"}}]'), lambda p: p.name), ['mem'])
               AS has_mem,
           {update_ops} AS update_ops, {exact_rule} AS exact_rule
    FROM walk w JOIN modules m ON m.rank = w.rank AND m.module_id = w.module_id WHERE w.hit AND NOT w.below
    """


def calls_sql(layers: str, module_where: str = "true") -> str:
    """SQL: one row per forward call (of the module events `module_where` selects) of an
    activation layer: its step, first output's nnz and numel, its input's id, nnz and numel,
    the call's bounds (pre_seq, seq, thread) and its place among the layer's calls of that step."""
    return f"""
    SELECT l.*, post.step, post.seq, post.thread, pre.seq AS pre_seq, len(post.outputs) AS outputs, o.nnz, o.numel,
           pre.inputs[1] AS input_id, i.nnz AS input_nnz, i.numel AS input_numel,
           row_number() OVER (PARTITION BY l.rank, l.module_id, post.step ORDER BY post.seq) AS nth
    FROM ({layers}) l
    JOIN (SELECT * FROM module_events WHERE {module_where}) post ON post.rank = l.rank AND post.module_id = l.module_id
         AND post.kind = 'forward_post'
    JOIN module_events pre ON pre.rank = post.rank AND pre.module_id = post.module_id AND pre.kind = 'forward_pre'
         AND pre.call_index = post.call_index AND pre.thread = post.thread AND pre.seq < post.seq
    LEFT JOIN tensors o ON o.rank = post.rank AND o.tensor_id = post.outputs[1]
    LEFT JOIN tensors i ON i.rank = pre.rank AND i.tensor_id = pre.inputs[1]
    """


def _updates_sql(calls: str) -> str:
    """SQL: per snnTorch call with a membrane, the elements counted (`counted`) and whether the
    count is exact: a batch's first call all; a later one under a holding rule the nonzeros of
    `base`, the end of its rule's chain of ops (the earliest, when several): the first op of the
    chain reads the call's input, each next one the output of the one before, each gives a
    tensor of the membrane's size; else all."""
    return f"""
    WITH RECURSIVE calls AS (SELECT * FROM ({calls}) WHERE snntorch AND has_mem),
    chain AS (  -- k = 0: the call's input, before its first op; each next step one op further
        SELECT c.rank, c.seq AS call_seq, c.thread, c.numel, c.update_ops, 0 AS k, c.pre_seq AS seq,
               c.input_id AS tensor_id, CAST(NULL AS BIGINT) AS nnz
        FROM calls c WHERE c.nth > 1 AND c.exact_rule
        UNION ALL
        SELECT h.rank, h.call_seq, h.thread, h.numel, h.update_ops, h.k + 1, e.seq, t.tensor_id, t.nnz
        FROM chain h
        JOIN events e ON e.rank = h.rank AND e.thread = h.thread AND e.seq > h.seq AND e.seq < h.call_seq
             AND e.op = h.update_ops[h.k + 1]
        JOIN event_tensors x ON x.rank = e.rank AND x.seq = e.seq AND x.role = 'arg' AND x.item IS NULL
             AND x.tensor_id = h.tensor_id
        JOIN event_tensors u ON u.rank = e.rank AND u.seq = e.seq AND u.role = 'out' AND u.position = 0
        JOIN tensors t ON t.rank = u.rank AND t.tensor_id = u.tensor_id AND t.numel = h.numel
        WHERE h.k < len(h.update_ops)
    ),
    updates AS (
        SELECT rank, call_seq AS seq, arg_min(nnz, seq) AS nnz FROM chain WHERE k = len(update_ops)
        GROUP BY rank, call_seq
    )
    SELECT c.*, CASE WHEN c.nth = 1 THEN c.numel ELSE coalesce(u.nnz, c.numel) END AS counted,
           c.nth = 1 OR u.nnz IS NOT NULL AS exact
    FROM calls c LEFT JOIN updates u ON u.rank = c.rank AND u.seq = c.seq
    """


def activation(con, names, batches, samples, module_where: str = "true") \
        -> tuple[float | None, float | None, list[str], list[str]]:
    """(ActivationSparsity, MembraneUpdates, notes, layer paths) over the module events of
    `module_where`; `batches`: {(rank, step): samples} of each batch."""
    layers = layers_sql(names)
    paths = [p for (p,) in con.execute(f"SELECT path FROM ({layers}) ORDER BY rank, module_id").fetchall()]
    calls = calls_sql(layers, module_where)
    per_step = con.execute(f"""
        SELECT rank, step, sum(numel) AS total, sum(nnz) AS spikes, count(*) FILTER (WHERE nnz IS NULL) AS unknown,
               count(*) FILTER (WHERE outputs > 1 AND NOT snntorch) AS tuples
        FROM ({calls}) GROUP BY ALL ORDER BY rank, step
    """).fetchall()
    notes = []
    if any(unknown for *_, unknown, _ in per_step):
        notes.append("ActivationSparsity: the trace holds no nnz of some activation outputs (value statistics off)")
        sparsity = None
    else:
        sparsity = _sparsity(per_step, batches, notes)
    tuples = sum(t for *_, t in per_step)
    if tuples:
        notes.append(f"ActivationSparsity: {tuples} calls of a non-snnTorch activation layer returned several tensors; "
                     "the first one is counted (NeuroBench 2.3.0 raises on such an output and reports 0.0)")
    counted, bounds = con.execute(f"""
        SELECT sum(counted), count(*) FILTER (WHERE NOT exact AND (input_nnz IS NULL OR input_nnz < input_numel))
        FROM ({_updates_sql(calls)})
    """).fetchone()
    updates = int(counted or 0)
    if bounds:
        notes.append(f"MembraneUpdates: {bounds} snnTorch neuron calls after a batch's first had input with zeros "
                     "(or of unknown nnz) and no rule that tells which membrane elements changed (analyze/counters/"
                     "neurobench/activation.py); every element is counted as changed, an upper bound (an element "
                     "whose input, membrane and spike are zero does not change and NeuroBench does not count it)")
    return sparsity, (updates / samples if samples else (0 if samples == 0 else None)), notes, paths


def _sparsity(per_step, batches, notes) -> float:
    """NeuroBench's accumulation: each batch's sparsity times its samples over the dataset's."""
    sizes = [batches.get((rank, step)) for rank, step, *_ in per_step]
    if any(size is None for size in sizes) or not sizes:
        sizes = [1] * len(per_step)
        if per_step:
            notes.append("ActivationSparsity: some steps' batch size is unknown; the steps are weighted equally")
    dataset = sum(batches.values()) if batches and all(s is not None for s in batches.values()) else sum(sizes)
    value = 0.0
    for (_, _, total, spikes, _, _), size in zip(per_step, sizes):
        result = (int(total) - int(spikes)) / int(total) if total else 0.0
        value += (result * size) / dataset
    return value


def unseen_neurons(con, names) -> list[str]:
    """A note naming the neuron classes of the model that are no activation layer here."""
    rows = con.execute(f"""
        SELECT class_name, count(*) FROM modules
        WHERE in_model AND list_has_any(mro, {quoted_list(NEURONS)}) AND NOT {_match(names)} GROUP BY ALL ORDER BY 1
    """).fetchall()
    if not rows:
        return []
    listed = ", ".join(f"{name} x{n}" for name, n in rows)
    return [f"ActivationSparsity, MembraneUpdates: neurons not taken as activation layers ({listed}); NeuroBench "
            "sees them only through add_activation_module: pass --activation-module CLASS (activation_modules=)"]
