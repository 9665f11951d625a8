"""The events a neuromorphic chip costs (the chip model, analyze/energy/chip.py), from a trace:
preset-independent, read once.

* Synaptic operations: the paper model's event mode (analyze/energy/paper.py), reused as
  is: per synaptic layer whose input is spikes, the (nonzero spike input, nonzero weight)
  products, NeuroBench's Effective_ACs: each is one spike delivered to one synapse.
* Host work: what a chip cannot do as events, listed with its size, never dropped: a
  synaptic layer whose input is not spikes (the first layer over the data, a later layer over
  a residual sum, a BN output or graded spikes) with its dense MACs (the paper model's "first"
  and "mac" charges, per time step), and the forward normalisation and softmax ops with
  their output elements. Its MACs are costed under a host preset when one is named (its
  e_mac_pj), else reported as uncosted; the elements are listed, uncosted.
* Neuron updates and spikes, per neuron module (analyze/neurons.py) and forward call: its
  first output's numel is the neurons updated (one update per neuron per step), its nnz the
  spikes emitted. A neuron is **active** in a step when its input is nonzero or it spikes;
  the trace holds the input's nnz per call, not per element, so active = max(input nnz,
  spikes) per call: exact when every spiking neuron had input that step (an IF or LIF neuron
  with a fixed threshold: without input its membrane cannot rise to the threshold), a lower
  bound otherwise. Inactive = updates - active.
* Chip time, only with a time per step: each sample runs T steps one after another, so the
  chip runs samples x T x step time (batches x T when the samples are unknown). T is given
  (time_steps) or the most forward calls one neuron module makes in a batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from spiketrace.analyze.counters import _where
from spiketrace.analyze.counters.neurobench.convention import LAYERS
from spiketrace.analyze.energy import paper
from spiketrace.analyze.neurons import is_multi_step, is_neuron, quoted_list
from spiketrace.analyze.presets.units import convert

# forward ops a chip does not do as events, listed with their output elements
HOST_OPS = ("aten.native_batch_norm%", "aten._native_batch_norm_legit%", "aten.batch_norm%",
            "aten.native_layer_norm%", "aten.layer_norm%", "aten.native_group_norm%", "aten._softmax%",
            "aten.softmax%", "aten._log_softmax%")
SYNAPTIC_COLUMNS = ["scope", "index", "kind", "input", "charged", "calls", "dense_mac", "sop", "mac"]
NEURON_COLUMNS = ["module", "class_name", "calls", "updates", "active", "inactive", "spikes", "input_unknown"]


@dataclass
class Activity:
    """Per synaptic layer (SYNAPTIC_COLUMNS: sop the synaptic events, mac the host MACs), per
    neuron module (NEURON_COLUMNS), the host ops (op, calls, elements), the samples and time."""

    synaptic: pd.DataFrame
    neurons: pd.DataFrame
    host_ops: pd.DataFrame
    samples: int | None
    time: dict[str, Any]  # time_steps, time_steps_source, step_time_s, chip_time_s, chip_time_basis
    host: dict[str, Any] | None  # name, model, source, e_mac_pj, provenance of the host preset
    notes: list[str] = field(default_factory=list)
    stages: list[str] = field(default_factory=list)  # the stages whose forward synaptic ops were read


def parse_step_time(value) -> float | None:
    """Seconds from 0.001, '1ms', '1 ms', '250us', '1e-3 s' (a bare number is seconds)."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        text = str(value).strip().replace(" ", "").replace("µs", "us")
        number = text.rstrip("psmun")
        unit = text[len(number):] or "s"
        try:
            seconds = convert(float(number), unit, "s")
        except ValueError:
            raise ValueError(f"step time {value!r}: expected a time such as 1ms, 250us or 0.001 (seconds)") from None
    if not np.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"step time {value!r}: must be a positive time")
    return seconds


def _neurons_sql(where: str) -> str:
    """Every forward call of an in-model module that is a neuron the table knows or a leaf
    (candidates for a spiking module: output_01 decides), with its output and input facts."""
    return f"""
    WITH candidates AS (
        SELECT rank, module_id, path, class_name, mro, {is_neuron('mro', 'chip')} AS known,
               {is_multi_step('mro', 'chip')} OR coalesce(attributes->>'step_mode' = 'm', false) AS multi_step,
               list_has_any(mro, {quoted_list(LAYERS)}) AS synaptic
        FROM modules WHERE in_model AND ({is_neuron('mro', 'chip')} OR is_leaf)),
    post AS (SELECT * FROM module_events WHERE kind = 'forward_post' AND ({where}))
    SELECT c.rank, c.path, c.class_name, c.mro, c.known, c.synaptic, post.step, o.numel, o.nnz, o.is01 AS output_01,
           CASE WHEN c.multi_step AND len(o.shape) > 0 THEN o.shape[1] ELSE 1 END AS steps, i.nnz AS input_nnz
    FROM candidates c
    JOIN post ON post.rank = c.rank AND post.module_id = c.module_id
    JOIN module_events pre ON pre.rank = post.rank AND pre.module_id = post.module_id AND pre.kind = 'forward_pre'
         AND pre.call_index = post.call_index AND pre.thread = post.thread AND pre.seq < post.seq
    LEFT JOIN tensors o ON o.rank = post.rank AND o.tensor_id = post.outputs[1]
    LEFT JOIN tensors i ON i.rank = pre.rank AND i.tensor_id = pre.inputs[1]
    """


def _ignored(frame: pd.DataFrame, names) -> pd.Series:
    names = list(names or ())
    if not names or not len(frame):
        return pd.Series(False, index=frame.index)
    return frame.apply(lambda r: any(n == r["path"] or n in list(r["mro"]) or n == r["class_name"] for n in names),
                       axis=1)


def neuron_calls(trace, where: str, ignore_modules=()) -> tuple[pd.DataFrame, list[str]]:
    """One row per forward call of a neuron module (rank, path, class_name, step, numel, nnz,
    input_nnz, steps): the neurons of analyze/neurons.py, and leaf modules other than synaptic
    layers whose every output is 0/1 (a spiking module the table does not know, named in a note)."""
    calls = trace.con.execute(_neurons_sql(where)).df()
    calls = calls[~_ignored(calls, ignore_modules)]
    spiking = calls.groupby("path")["output_01"].transform(lambda v: bool(v.fillna(False).all())) & ~calls["synaptic"]
    taken = sorted(set(calls.loc[spiking & ~calls["known"], "path"]))
    notes = [f"neurons: {', '.join(taken)} taken as spiking neurons (not in analyze/neurons.py's table; every output "
             "is 0/1)"] if taken else []
    kept = calls[calls["known"] | spiking]
    return kept.drop(columns=["mro", "known", "synaptic", "output_01"]), notes


def neuron_table(calls: pd.DataFrame) -> pd.DataFrame:
    """Per neuron module: calls, updates, active, inactive, spikes, and calls of unknown input nnz."""
    if not len(calls):
        return pd.DataFrame({c: [] for c in NEURON_COLUMNS})
    calls = calls.assign(numel=calls["numel"].astype(float), nnz=calls["nnz"].astype(float).fillna(0.0),
                         unknown=calls["input_nnz"].isna())
    calls["active"] = np.maximum(calls["input_nnz"].astype(float).fillna(calls["numel"]), calls["nnz"])
    table = calls.groupby("path", sort=False).agg(
        class_name=("class_name", "first"), calls=("numel", "size"), updates=("numel", "sum"),
        active=("active", "sum"), spikes=("nnz", "sum"), input_unknown=("unknown", "sum")).reset_index()
    table = table.rename(columns={"path": "module"})
    table["inactive"] = table["updates"] - table["active"]
    return table[NEURON_COLUMNS]


def host_ops(trace, where: str) -> pd.DataFrame:
    like = " OR ".join(f"e.op LIKE '{pattern}'" for pattern in HOST_OPS)
    return trace.con.execute(f"""
        SELECT e.op, count(*) AS calls, coalesce(sum(t.numel), 0)::DOUBLE AS elements
        FROM events e
        LEFT JOIN event_tensors u ON u.rank = e.rank AND u.seq = e.seq AND u.role = 'out' AND u.position = 0
             AND u.item IS NULL
        LEFT JOIN tensor_states t ON t.rank = u.rank AND t.tensor_id = u.tensor_id
        WHERE ({where}) AND NOT e.in_backward AND ({like}) GROUP BY e.op ORDER BY e.op""").df()


def _time(calls: pd.DataFrame, samples, batches: int, time_steps, step_time) -> tuple[dict[str, Any], list[str]]:
    notes = []
    if time_steps is not None:
        source = "given"
    elif len(calls):
        time_steps = int(calls.groupby(["rank", "step", "path"])["steps"].sum().max())
        source = "the most steps one neuron module ran in a batch (its calls; dim 0 of a multi-step neuron's output)"
    else:
        time_steps, source = None, "no neuron module ran"
    seconds = parse_step_time(step_time)
    time = {"time_steps": time_steps, "time_steps_source": source, "step_time_s": seconds,
            "chip_time_s": None, "chip_time_basis": None}
    if seconds is not None and time_steps is not None:
        runs, basis = (samples, "samples") if samples else (batches, "batches (samples unknown)")
        time["chip_time_s"] = runs * time_steps * seconds
        time["chip_time_basis"] = f"{runs} {basis} x {time_steps} time steps x {seconds:g} s, one sample after another"
        if source != "given" and time_steps == 1:
            notes.append("time steps: each neuron module ran once per batch; if a call holds every time step "
                         "(a multi-step neuron), give the time steps (--time-steps T)")
    return time, notes


def _host(name) -> dict[str, Any] | None:
    if name is None:
        return None
    from spiketrace.analyze.energy import load_preset  # the registry, at call time (it imports this model)

    preset = load_preset(name)
    if "e_mac_pj" not in preset.flat():
        raise ValueError(f"host preset {preset.name!r} ({preset.model}) has no e_mac_pj: name a paper or compute preset")
    return {"name": preset.name, "model": preset.model, "source": preset.source,
            "e_mac_pj": float(preset.flat()["e_mac_pj"]), "provenance": dict(preset.provenance)}


def activity(trace, *, stage=None, step=None, rank=None, ignore_modules=(), compat=None, strict=False, recompute=None,
             step_time=None, time_steps: int | None = None, host: str | None = None,
             samples: int | None = None) -> Activity:
    """The chip's events in the selection (module docstring). `step_time` (seconds, or '1ms')
    enables the time-based terms; `host` names the preset that costs the host MACs."""
    if compat is not None:
        raise ValueError("the chip model has no compat mode")
    if time_steps is not None and (isinstance(time_steps, bool) or not isinstance(time_steps, int) or time_steps < 1):
        raise ValueError(f"time_steps must be a whole number of at least 1, got {time_steps!r}")
    events = paper.activity(trace, stage=stage, step=step, rank=rank, ignore_modules=ignore_modules,
                            recompute=recompute, mode="event", first_layer="per-step", non_spike="mac",
                            samples=samples)
    where = _where(stage=stage, step=step, rank=rank, recompute=recompute)
    calls, taken = neuron_calls(trace, where, ignore_modules)
    time, notes = _time(calls, events.samples, int(len(events.batches)), time_steps, step_time)
    neurons = neuron_table(calls)
    unknown = int(neurons["input_unknown"].sum()) if len(neurons) else 0
    if unknown:
        notes.append(f"neuron updates: {unknown} neuron calls have no input nnz in the trace; their every update "
                     "is counted active")
    notes = [*events.notes, *taken, *notes]
    return Activity(events.layers[SYNAPTIC_COLUMNS].copy(), neurons, host_ops(trace, where), events.samples, time,
                    _host(host), notes, [str(s) for s in events.stages["stage"]])
