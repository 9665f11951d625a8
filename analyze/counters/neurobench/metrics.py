"""NeuroBench 2.3.0's static and workload metrics, offline from a trace:

    from spiketrace.analyze.counters import neurobench_metrics
    neurobench_metrics("runs/nb")   # {"Footprint": ..., "ConnectionSparsity": ..., "ParameterCount": ...,
                                    #  "SynapticOperations": {"Effective_MACs", "Effective_ACs", "Dense"},
                                    #  "ActivationSparsity": ..., "MembraneUpdates": ...}

the dictionary `Benchmark(...).run()` returns for the model the Recorder was bound to, one
recorder step per batch. Each rule, from NeuroBench's source (neurobench/metrics/):

* Footprint: bytes of the model's parameters and buffers as the Recorder saw them when it was
  bound (NeuroBench measures before any batch: bind the Recorder to a model not yet run, or
  snnTorch's membrane buffers are counted at their grown size); a parameter two modules share
  once, as model.parameters() yields it.
* ParameterCount: the model's parameters' elements, a shared one once.
* ConnectionSparsity: zero weights over weights of the leaf Linear/Conv1-3d (their `weight`)
  and recurrent layers and cells (every parameter) below the root, from each parameter's nnz,
  in float32 rounded to 4 decimals as NeuroBench's torch division does (a shared weight in
  each layer that holds it, as NeuroBench walks the layers).
* SynapticOperations: the NeuroBench convention's totals (convention.py, cells.py)
  and Dense (dense.py), per sample.
* ActivationSparsity and MembraneUpdates (activation.py): over the activation layers, nn.ReLU
  and nn.Sigmoid, snnTorch's SpikingNeuron under wrapper "SNNTorchModel" (the default), and the
  classes of `activation_modules` (NeuroBench's add_activation_module).

The workload metrics and the samples read the selected work (stage, phase, step, rank,
recompute: count()'s filters); the static ones the bound model as built.

What a metric assumed, or could not read, is in the result's `notes`, never a silent number.
"""

from __future__ import annotations

import warnings

import numpy as np

from spiketrace.analyze.counters.filters import where_sql
from spiketrace.analyze.counters.neurobench import activation as neurobench_activation
from spiketrace.analyze.counters.neurobench import batches as neurobench_batches
from spiketrace.analyze.counters.neurobench import cells as neurobench_cells
from spiketrace.analyze.counters.neurobench import convention as neurobench
from spiketrace.analyze.counters.neurobench import dense as neurobench_dense
from spiketrace.analyze.counters.neurobench.activation import SNNTORCH_NEURON
from spiketrace.analyze.counters.sql import MACROS
from spiketrace.analyze.neurons import quoted_list
from spiketrace.analyze.trace import accepts_path

ACTIVATIONS = ("torch.nn.modules.activation.ReLU", "torch.nn.modules.activation.Sigmoid")  # SUPPORTED_ACTIVATIONS
WRAPPERS = {"SNNTorchModel": (SNNTORCH_NEURON,), "TorchModel": ()}  # what each wrapper adds
STATELESS = ("torch.nn.modules.linear.Linear", "torch.nn.modules.conv.Conv1d", "torch.nn.modules.conv.Conv2d",
             "torch.nn.modules.conv.Conv3d")
RECURRENT = ("torch.nn.modules.rnn.RNNBase", neurobench_cells.CELL_BASE)
ELEMENT_SIZES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "complex128": 16, "complex64": 8,
                 "complex32": 4, "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "uint16": 2,
                 "uint32": 4, "uint64": 8, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "qint8": 1,
                 "quint8": 1, "qint32": 4}
KEYS = ("Footprint", "ConnectionSparsity", "ParameterCount", "SynapticOperations", "ActivationSparsity",
        "MembraneUpdates")


class NeuroBenchResults(dict):
    """Benchmark.run()'s dictionary, plus `notes` (what was assumed or missing), `samples`
    (what the per-sample metrics divide by), `totals` (SynapticOperations' MAC, AC,
    total_synops and total_samples) and `activation_layers` (paths)."""

    def __init__(self, values, *, notes, samples, totals, activation_layers):
        super().__init__(values)
        self.notes, self.samples, self.totals, self.activation_layers = notes, samples, totals, activation_layers


def _first_rank(con, rank=None) -> int:
    """The rank whose bound model the static metrics measure: the lowest (of `rank`, when given)."""
    chosen = "" if rank is None else f"WHERE rank IN ({', '.join(str(int(r)) for r in _values(rank))})"
    return con.execute(f"SELECT coalesce(min(rank), 0) FROM modules {chosen}").fetchone()[0]


def _values(selected) -> list:
    return list(selected) if isinstance(selected, (list, tuple, set)) else [selected]


_TENSOR_LIST = "'[{\"name\": \"VARCHAR\", \"numel\": \"BIGINT\", \"dtype\": \"VARCHAR\"}]'"


def _model_tensors(rank: int) -> str:
    """SQL: one row per parameter and buffer of the bound model's modules (rank `rank`), with
    `holds`: the parameter it is. A parameter two modules share (tied weights) is one tensor,
    which the capture names after the first module holding it (model.named_parameters()); the
    other module's own name for it is never read. So a parameter whose name no op read, of a
    module whose calls read a parameter named outside the module with its numel and dtype,
    holds that one; every other parameter, and a buffer, holds itself."""
    return f"""
    WITH own AS (
        SELECT *, path || '.' || name AS qualified FROM (
            SELECT rank, module_id, path, mro, is_leaf, parent_id, 'parameter' AS kind,
                   unnest(from_json(parameters, {_TENSOR_LIST}), recursive := true)
            FROM modules WHERE in_model AND rank = {rank}
            UNION ALL
            SELECT rank, module_id, path, mro, is_leaf, parent_id, 'buffer' AS kind,
                   unnest(from_json(buffers, {_TENSOR_LIST}), recursive := true)
            FROM modules WHERE in_model AND rank = {rank})
    ), named AS (
        SELECT DISTINCT parameter FROM tensors WHERE is_parameter AND rank = {rank}
    ), unread AS (
        SELECT * FROM own WHERE kind = 'parameter' AND qualified NOT IN (SELECT parameter FROM named)
    ), reads AS (
        SELECT DISTINCT p.module_id, t.parameter, t.numel, t.dtype
        FROM module_events p
        JOIN module_events q ON q.rank = p.rank AND q.module_id = p.module_id AND q.call_index = p.call_index
             AND q.kind = 'forward_post' AND q.thread = p.thread AND q.seq > p.seq
        JOIN events e ON e.rank = p.rank AND e.thread = p.thread AND e.seq > p.seq AND e.seq < q.seq
        JOIN event_tensors u ON u.rank = e.rank AND u.seq = e.seq AND u.role = 'arg'
        JOIN tensors t ON t.rank = u.rank AND t.tensor_id = u.tensor_id AND t.is_parameter
        WHERE p.rank = {rank} AND p.kind = 'forward_pre' AND p.module_id IN (SELECT module_id FROM unread)
    ), shared AS (
        SELECT o.module_id, o.name, min(r.parameter) AS holds
        FROM unread o JOIN reads r ON r.module_id = o.module_id AND r.numel = o.numel AND r.dtype = o.dtype
             AND NOT starts_with(r.parameter, o.path || '.')
        GROUP BY o.module_id, o.name
    )
    SELECT o.*, coalesce(s.holds, o.qualified) AS holds
    FROM own o LEFT JOIN shared s ON o.kind = 'parameter' AND s.module_id = o.module_id AND s.name = o.name
    """


def footprint(con, rank=None) -> tuple[int | None, int | None, list[str]]:
    """(Footprint, ParameterCount, notes) of the bound model (of rank `rank`, else the lowest);
    a shared parameter counted once, as model.parameters() yields it."""
    rank = _first_rank(con, rank)
    if not con.execute(f"SELECT count(*) FROM modules WHERE in_model AND rank = {rank}").fetchone()[0]:
        return None, None, ["Footprint, ParameterCount, ConnectionSparsity: the trace has no bound model "
                            "(Recorder(model=...)): nothing to measure"]
    rows = con.execute(f"""
        SELECT kind, dtype, sum(numel) FROM (
            SELECT DISTINCT ON (kind, holds) kind, dtype, numel
            FROM ({_model_tensors(rank)})
        ) GROUP BY ALL
    """).fetchall()
    unknown = sorted({dtype for _, dtype, _ in rows if dtype not in ELEMENT_SIZES})
    size = sum(ELEMENT_SIZES.get(dtype, 0) * int(n) for _, dtype, n in rows)
    parameters = sum(int(n) for kind, _, n in rows if kind == "parameter")
    notes = [f"Footprint: element size of dtype {', '.join(unknown)} unknown; left out"] if unknown else []
    return (size if not unknown else None), parameters, notes


def connection_sparsity(con, rank=None) -> tuple[float | None, list[str]]:
    """ConnectionSparsity, and notes on weights whose zeros the trace does not hold. A weight
    two layers share counts in each, as NeuroBench walks the layers."""
    rank = _first_rank(con, rank)
    rows = con.execute(f"""
        WITH weights AS (
            SELECT qualified AS parameter, holds, numel FROM ({_model_tensors(rank)})
            WHERE kind = 'parameter' AND is_leaf AND parent_id IS NOT NULL
              AND ((list_has_any(mro, {quoted_list(STATELESS)}) AND name = 'weight')
                   OR list_has_any(mro, {quoted_list(RECURRENT)}))
        ), states AS (
            SELECT parameter, arg_min(nnz, first_seq) AS nnz FROM tensors
            WHERE is_parameter AND rank = {rank} GROUP BY parameter
        )
        SELECT w.parameter, w.numel, s.nnz FROM weights w LEFT JOIN states s ON s.parameter = w.holds
        ORDER BY w.parameter
    """).fetchall()
    missing = [name for name, _, nnz in rows if nnz is None]
    if missing:
        return None, [f"ConnectionSparsity: the trace holds no nnz of {len(missing)} weights ({', '.join(missing[:3])}"
                      f"{', ...' if len(missing) > 3 else ''}): never read by a recorded op, or value statistics off"]
    weights = sum(int(numel) for _, numel, _ in rows)
    if not weights:  # NeuroBench divides 0 by 0: its static metric reports None
        return None, ["ConnectionSparsity: no Linear, Conv or recurrent weights below the root (NeuroBench: None)"]
    zeros = sum(int(numel) - int(nnz) for _, numel, nnz in rows)
    return round(float(np.float32(zeros) / np.float32(weights)), 4), []


def _synaptic(trace, samples, where: str) -> tuple[dict, dict, list[str]]:
    con = trace.con
    for macro in MACROS:
        con.execute(macro)
    versions = {r: m.get("schema_version", "1.0") for r, m in trace.manifests.items()}
    with warnings.catch_warnings():  # its samples note is neurobench_metrics' own
        warnings.simplefilter("ignore")
        result = neurobench.count(con, ["synop", "mac"], where=where, module_where=where, trace_versions=versions)
    events = neurobench._events_sql(where, (), ())
    dense, notes = neurobench_dense.total(con, events)
    cells = con.execute(f"SELECT coalesce(sum(dense), 0) FROM ({neurobench_cells.calls_sql(events, ())})").fetchone()[0]
    totals = result.totals()
    counts = {"MAC": totals.get("mac", 0), "AC": totals.get("synop", 0), "total_synops": int(dense + cells),
              "total_samples": samples}
    values: dict[str, float | None]
    if samples is None:
        values = {"Effective_MACs": None, "Effective_ACs": None, "Dense": None}
    elif samples == 0:
        values = {"Effective_MACs": 0, "Effective_ACs": 0, "Dense": 0}
    else:
        values = {"Effective_MACs": counts["MAC"] / samples, "Effective_ACs": counts["AC"] / samples,
                  "Dense": counts["total_synops"] / samples}
    return values, counts, [*result.frame.attrs.get("notes", []), *notes]


@accepts_path
def neurobench_metrics(trace, *, samples: int | None = None, activation_modules=(), wrapper: str = "SNNTorchModel",
                       stage=None, phase=None, step=None, rank=None, recompute=None) -> NeuroBenchResults:
    """NeuroBench's Footprint, ConnectionSparsity, ParameterCount, SynapticOperations,
    ActivationSparsity and MembraneUpdates of the bound model's run in `trace` (each recorder
    step a batch). `samples`: what the per-sample metrics divide by (default: NeuroBench's,
    each batch's batch dimension, summed: counters/neurobench/batches.py). `activation_modules`:
    classes (qualified or bare names) NeuroBench was given with add_activation_module.
    `wrapper`: "SNNTorchModel" (snnTorch neurons are activation layers) or "TorchModel".
    `stage`, `phase`, `step`, `rank` (a value or a list each) and `recompute` select the work
    the workload metrics and the samples read, as count()'s filters do; the static metrics are
    the bound model's as built (of the lowest rank selected)."""
    if wrapper not in WRAPPERS:
        raise ValueError(f"wrapper must be one of {sorted(WRAPPERS)}, got {wrapper!r}")
    con = trace.con
    where = where_sql(stage=stage, phase=phase, step=step, rank=rank, recompute=recompute)
    notes: list[str] = []
    batches = {(r, s): size for r, s, size, _ in neurobench_batches.batch_sizes(con, where)}
    inferred, sample_notes = neurobench_batches.sample_count(con, where)
    if samples is None:
        samples = inferred
        notes += sample_notes
        for note in sample_notes:
            warnings.warn(note, stacklevel=3)
        if samples is None:
            notes.append("samples: no forward call of a bound model with a positional input to take the batch "
                          "from; the per-sample metrics are unknown: give samples (--samples N)")
    size, parameters, static_notes = footprint(con, rank)
    sparsity, sparsity_notes = connection_sparsity(con, rank) if parameters is not None else (None, [])
    synaptic, totals, synaptic_notes = _synaptic(trace, samples, where)
    names = [*ACTIVATIONS, *WRAPPERS[wrapper], *activation_modules]
    sparsity_of_activations, updates, activation_notes, layers = neurobench_activation.activation(
        con, names, batches, samples, where)
    notes += [*static_notes, *sparsity_notes, *synaptic_notes, *activation_notes,
              *neurobench_activation.unseen_neurons(con, names)]
    values = dict(zip(KEYS, (size, sparsity, parameters, synaptic, sparsity_of_activations, updates)))
    return NeuroBenchResults(values, notes=notes, samples=samples, totals=totals, activation_layers=layers)
