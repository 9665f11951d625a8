"""NeuroBench 2.3.0's static and workload metrics, offline from a trace:

    from spiketrace.analyze.counters import neurobench_metrics
    neurobench_metrics("runs/nb")   # {"Footprint": ..., "ConnectionSparsity": ..., "ParameterCount": ...,
                                    #  "SynapticOperations": {"Effective_MACs", "Effective_ACs", "Dense"},
                                    #  "ActivationSparsity": ..., "MembraneUpdates": ...}

the dictionary `Benchmark(...).run()` returns for the model the Recorder was bound to, one
recorder step per batch. Each rule, from NeuroBench's source (neurobench/metrics/):

* Footprint: bytes of the model's parameters and buffers as the Recorder saw them when it was
  bound (NeuroBench measures before any batch: bind the Recorder to a model not yet run, or
  snnTorch's membrane buffers are counted at their grown size).
* ParameterCount: the model's parameters' elements.
* ConnectionSparsity: zero weights over weights of the leaf Linear/Conv1-3d (their `weight`)
  and recurrent layers and cells (every parameter) below the root, from each parameter's nnz,
  in float32 rounded to 4 decimals as NeuroBench's torch division does.
* SynapticOperations: the NeuroBench convention's totals (convention.py, cells.py)
  and Dense (dense.py), per sample.
* ActivationSparsity: per batch, zero outputs over outputs of the activation layers (the
  first output of a call; found top-down below the root, an activation layer's children not
  searched); the batches' values weighted by their samples. Activation layers are nn.ReLU and
  nn.Sigmoid, snnTorch's SpikingNeuron under wrapper "SNNTorchModel" (the default), and the
  classes of `activation_modules` (NeuroBench's add_activation_module).
* MembraneUpdates: per snnTorch activation layer with a `mem`, its first call of a batch counts
  every element, each later call the elements whose membrane changed. The trace holds the
  membrane's nnz, not its change, so every element is taken to change; `notes` says where a
  call's input had zeros (an element with zero input, membrane and spike does not change:
  the number is then an upper bound).

What a metric assumed, or could not read, is in the result's `notes`, never a silent number.
"""

from __future__ import annotations

import warnings

import numpy as np

from spiketrace.analyze.counters.neurobench import cells as neurobench_cells
from spiketrace.analyze.counters.neurobench import convention as neurobench
from spiketrace.analyze.counters.neurobench import dense as neurobench_dense
from spiketrace.analyze.counters.sql import MACROS
from spiketrace.analyze.neurons import NEURONS, quoted_list
from spiketrace.analyze.trace import accepts_path

SNNTORCH_NEURON = "snntorch._neurons.neurons.SpikingNeuron"
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


def _match(names, mro: str = "mro") -> str:
    """SQL over `mro`: a class named (qualified, or bare as its last dotted part) is in it."""
    qualified = [n for n in names if "." in n]
    bare = [n for n in names if "." not in n]
    return (f"(list_has_any({mro}, {quoted_list(qualified or [''])}) OR "
            f"list_has_any(list_transform({mro}, lambda c: split_part(c, '.', -1)), {quoted_list(bare or [''])}))")


def _first_rank(con) -> int:
    return con.execute("SELECT coalesce(min(rank), 0) FROM modules").fetchone()[0]


def _model_tensors(con, rank: int) -> str:
    """SQL: one row per parameter and buffer of the bound model's modules (rank `rank`)."""
    shape = "'[{\"name\": \"VARCHAR\", \"numel\": \"BIGINT\", \"dtype\": \"VARCHAR\"}]'"
    return f"""
    SELECT module_id, path, mro, is_leaf, parent_id, kind, t.name, t.numel, t.dtype FROM (
        SELECT *, 'parameter' AS kind, unnest(from_json(parameters, {shape})) AS t FROM modules
        WHERE in_model AND rank = {rank}
        UNION ALL
        SELECT *, 'buffer' AS kind, unnest(from_json(buffers, {shape})) AS t FROM modules WHERE in_model AND rank = {rank})
    """


def footprint(con) -> tuple[int | None, int | None, list[str]]:
    """(Footprint, ParameterCount, notes) of the bound model."""
    rank = _first_rank(con)
    rows = con.execute(f"SELECT kind, dtype, sum(numel) FROM ({_model_tensors(con, rank)}) GROUP BY ALL").fetchall()
    if not con.execute(f"SELECT count(*) FROM modules WHERE in_model AND rank = {rank}").fetchone()[0]:
        return None, None, ["Footprint, ParameterCount, ConnectionSparsity: the trace has no bound model "
                            "(Recorder(model=...)): nothing to measure"]
    unknown = sorted({dtype for _, dtype, _ in rows if dtype not in ELEMENT_SIZES})
    size = sum(ELEMENT_SIZES.get(dtype, 0) * int(n) for _, dtype, n in rows)
    parameters = sum(int(n) for kind, _, n in rows if kind == "parameter")
    notes = [f"Footprint: element size of dtype {', '.join(unknown)} unknown; left out"] if unknown else []
    return (size if not unknown else None), parameters, notes


def connection_sparsity(con) -> tuple[float | None, list[str]]:
    """ConnectionSparsity, and notes on weights whose zeros the trace does not hold."""
    rank = _first_rank(con)
    rows = con.execute(f"""
        WITH weights AS (
            SELECT path || '.' || name AS parameter, numel FROM ({_model_tensors(con, rank)})
            WHERE kind = 'parameter' AND is_leaf AND parent_id IS NOT NULL
              AND ((list_has_any(mro, {quoted_list(STATELESS)}) AND name = 'weight')
                   OR list_has_any(mro, {quoted_list(RECURRENT)}))
        ), states AS (
            SELECT parameter, arg_min(nnz, first_seq) AS nnz FROM tensors
            WHERE is_parameter AND rank = {rank} GROUP BY parameter
        )
        SELECT w.parameter, w.numel, s.nnz FROM weights w LEFT JOIN states s USING (parameter) ORDER BY w.parameter
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


def _layers_sql(names) -> str:
    """SQL: the activation layers NeuroBench finds (find_activation_layers): top-down from the
    root's children, a match is taken and its children not searched."""
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
               AS has_mem
    FROM walk w JOIN modules m ON m.rank = w.rank AND m.module_id = w.module_id WHERE w.hit AND NOT w.below
    """


def _calls_sql(layers: str) -> str:
    """SQL: one row per forward call of an activation layer: its step, first output's nnz and
    numel, its input's nnz and numel, and its place among the layer's calls of that step."""
    return f"""
    SELECT l.*, post.step, post.seq, len(post.outputs) AS outputs, o.nnz, o.numel, i.nnz AS input_nnz,
           i.numel AS input_numel,
           row_number() OVER (PARTITION BY l.rank, l.module_id, post.step ORDER BY post.seq) AS nth
    FROM ({layers}) l
    JOIN module_events post ON post.rank = l.rank AND post.module_id = l.module_id AND post.kind = 'forward_post'
    JOIN module_events pre ON pre.rank = post.rank AND pre.module_id = post.module_id AND pre.kind = 'forward_pre'
         AND pre.call_index = post.call_index AND pre.thread = post.thread AND pre.seq < post.seq
    LEFT JOIN tensors o ON o.rank = post.rank AND o.tensor_id = post.outputs[1]
    LEFT JOIN tensors i ON i.rank = pre.rank AND i.tensor_id = pre.inputs[1]
    """


def _activation(con, names, batches, samples) -> tuple[float | None, float | None, list[str], list[str]]:
    """(ActivationSparsity, MembraneUpdates, notes, layer paths)."""
    layers = _layers_sql(names)
    paths = [p for (p,) in con.execute(f"SELECT path FROM ({layers}) ORDER BY rank, module_id").fetchall()]
    calls = _calls_sql(layers)
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
    membrane = con.execute(f"""
        SELECT sum(numel), count(*) FILTER (WHERE nth > 1 AND (input_nnz IS NULL OR input_nnz < input_numel))
        FROM ({calls}) WHERE snntorch AND has_mem
    """).fetchone()
    updates = int(membrane[0] or 0)
    if membrane[1]:
        notes.append(f"MembraneUpdates: {membrane[1]} snnTorch neuron calls after a batch's first had input with zeros "
                     "(or of unknown nnz); every membrane element is counted as changed, an upper bound (an element "
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


def _synaptic(trace, samples) -> tuple[dict, dict, list[str]]:
    con = trace.con
    for macro in MACROS:
        con.execute(macro)
    versions = {r: m.get("schema_version", "1.0") for r, m in trace.manifests.items()}
    with warnings.catch_warnings():  # its samples note is neurobench_metrics' own
        warnings.simplefilter("ignore")
        result = neurobench.count(con, ["synop", "mac"], trace_versions=versions)
    events = neurobench._events_sql("true", (), ())
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
def neurobench_metrics(trace, *, samples: int | None = None, activation_modules=(),
                       wrapper: str = "SNNTorchModel") -> NeuroBenchResults:
    """NeuroBench's Footprint, ConnectionSparsity, ParameterCount, SynapticOperations,
    ActivationSparsity and MembraneUpdates of the bound model's run in `trace` (each recorder
    step a batch). `samples`: what the per-sample metrics divide by (default: NeuroBench's
    rule, dim 0 of the model's first input per step, summed). `activation_modules`: classes
    (qualified or bare names) NeuroBench was given with add_activation_module. `wrapper`:
    "SNNTorchModel" (snnTorch neurons are activation layers) or "TorchModel"."""
    if wrapper not in WRAPPERS:
        raise ValueError(f"wrapper must be one of {sorted(WRAPPERS)}, got {wrapper!r}")
    con = trace.con
    notes: list[str] = []
    shapes = neurobench.first_inputs(con)
    batches = {(rank, step): (shape[0] if shape else None) for rank, step, shape in shapes}
    inferred, sample_notes = neurobench.sample_count(con)
    if samples is None:
        samples = inferred
        notes += sample_notes
        for note in sample_notes:
            warnings.warn(note, stacklevel=3)
        if samples is None:
            notes.append("samples: no forward call of a bound model with a positional input to take the batch "
                          "from; the per-sample metrics are unknown: give samples (--samples N)")
    size, parameters, static_notes = footprint(con)
    sparsity, sparsity_notes = connection_sparsity(con) if parameters is not None else (None, [])
    synaptic, totals, synaptic_notes = _synaptic(trace, samples)
    names = [*ACTIVATIONS, *WRAPPERS[wrapper], *activation_modules]
    activation, updates, activation_notes, layers = _activation(con, names, batches, samples)
    notes += [*static_notes, *sparsity_notes, *synaptic_notes, *activation_notes, *_unseen_neurons(con, names)]
    values = dict(zip(KEYS, (size, sparsity, parameters, synaptic, activation, updates)))
    return NeuroBenchResults(values, notes=notes, samples=samples, totals=totals, activation_layers=layers)


def _unseen_neurons(con, names) -> list[str]:
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
