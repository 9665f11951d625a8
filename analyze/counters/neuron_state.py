"""Neuron state traffic, as SpikingJelly 2.0.0's NeuronStateCounter counts it.

Unlike the other counters this one is a state machine over the op stream: whether an op
touches neuron state depends on which storages are state *at that op* — the tensors in the
active neurons' `_memories` (from the trace's neuron_memories snapshots) plus the outputs
of earlier state-writing ops that are still alive (tensor_frees gives their lifetimes). So
the replay walks, in order, only the events in which a neuron is active; everything else is
gathered and attributed in DuckDB. Per event, the op's kind comes from the OP_KINDS table.

The counter returns three views, like SpikingJelly's: the per-op totals (get_counts(); every
op is recorded, 0 outside neurons, as `has_rule` is always true there), the fine metrics
(get_metric_counts()) and their projection (get_projection_counts()).

Default vs compat="spikingjelly" (docs/deviations.md 5 and 1):
* the first materialisation of a float state (full_like/zeros_like) counts for every neuron
  whose memories hold no tensor yet; SpikingJelly tracks it only when no state storage at
  all is alive, so after the first neuron of a forward the others count 0;
* only neurons really running are active; SpikingJelly also uses those its tracker left
  active after backward;
* snnTorch and Norse neurons (analyze/neurons.py) are neurons too; SpikingJelly recognises
  BaseNode subclasses only. They keep no `_memories`: their memories at a call are the state
  tensors it was handed (every tensor input after the first, e.g. snnTorch's `mem`, Norse's
  `state`), and the ops that create a state when none was handed (Norse's `zeros`/`clone`,
  snnTorch's `zeros_like`) register it, as a SpikingJelly neuron's first `full_like` does.
  From there the replay is SpikingJelly's: a state-writing op's output is state while alive,
  but for one rule: in their ops a spike gate must have the output's size and a dimension
  (their thresholds and rest potentials are 0-dim tensors, "binary" at 1.0 or 0.0).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from spiketrace.analyze import neurons as neuron_models
from spiketrace.analyze.counters.engine import ignored_scopes_sql

MODEL = "neuron_state"

METRICS = (
    "state_reads", "state_writes", "state_adds", "state_muls", "state_comps", "state_nonlinear_ops",
    "state_reset_ops", "state_select_ops", "spike_triggered_ops", "timestep_dense_ops",
)
REGISTERED_METRIC = "neuron_logical_steps"  # only SpikingJelly's CUDA neuron ops report it
PROJECTION = ("read_potential", "write_potential", "state_mac_like", "potential_buffer_bytes", "state_acc_like")

# op -> (metric its output numel adds to, whether it writes state)
_ADD = ("state_adds", True)
_MUL = ("state_muls", True)
_COMP = ("state_comps", False)
OP_KINDS: dict[str, tuple[str | None, bool]] = {
    **{f"aten.{n}": _ADD for n in (
        "add.Tensor", "add_.Tensor", "add.Scalar", "add_.Scalar", "sub.Tensor", "sub_.Tensor",
        "sub.Scalar", "sub_.Scalar", "rsub.Tensor", "rsub.Scalar")},
    **{f"aten.{n}": _MUL for n in (
        "mul.Tensor", "mul_.Tensor", "mul.Scalar", "mul_.Scalar", "div.Tensor", "div_.Tensor",
        "div.Scalar", "div_.Scalar")},
    **{f"aten.{c}.{v}": _COMP for c in ("eq", "ne", "lt", "le", "gt", "ge") for v in ("Tensor", "Scalar")},
    **{f"aten.{n}.default": ("state_nonlinear_ops", False) for n in ("sigmoid", "rsqrt", "sqrt", "exp", "tanh")},
    **{f"aten.{n}_.default": ("state_nonlinear_ops", True) for n in ("sigmoid", "sqrt", "exp", "tanh")},
    **{f"aten.where.{v}": ("state_select_ops", True) for v in ("self", "ScalarOther", "ScalarSelf")},
    **{f"aten.{n}.default": (None, True) for n in ("clone", "copy_", "_to_copy")},
}
# Views and aliases move no state.
IGNORED_PREFIXES = (
    "aten.detach", "aten.view", "aten.alias", "aten._unsafe_view", "aten.as_strided", "aten.expand",
    "aten.slice", "aten.select.int", "aten.select_copy", "aten.unsqueeze", "aten.squeeze",
    "aten.transpose", "aten.permute", "aten.lift_fresh",
)
MATERIALISATIONS = frozenset(neuron_models.SPIKINGJELLY_MATERIALISATIONS)
# SpikingJelly's fused CUDA neuron ops: the argument positions that hold state.
REGISTERED_NEURON_OPS = {
    "sj_if": (1,), "sj_lif": (1,), "sj_plif": (1,), "sj_qif": (1,), "sj_eif": (1,),
    "sj_izhikevich": (1, 2), "sj_ilif": (1,), "sj_activation_aware_if": (1,), "sj_stbif": (1, 2),
}
_NEVER_FREED = math.inf


class MissingStatisticsError(ValueError):
    """The trace lacks the value statistics (nnz / is01) the counter needs for some tensor."""


def _storage_key_sql(alias: str) -> str:
    # SpikingJelly's _storage_key; meta tensors have no storage, it uses object identity.
    return (f"CASE WHEN {alias}.is_meta THEN 'meta:' || {alias}.uid "
            f"ELSE {alias}.device || '|' || {alias}.dtype || '|' || {alias}.storage_ptr END")


def _neuron_events_sql(where_ignored: str, compat: str | None) -> str:
    running = "" if compat == "spikingjelly" else "AND list_contains(s.parents, coalesce(m.tracker_name, m.path))"
    return f"""
        WITH active AS (
            SELECT s.rank, s.scope_id, list(a.module_id ORDER BY a.module_id) AS neurons
            FROM scopes s, UNNEST(s.active_modules) AS a(module_id)
            JOIN modules m ON m.rank = s.rank AND m.module_id = a.module_id
            WHERE {neuron_models.is_neuron("m.mro", MODEL, compat)} {running}
            GROUP BY s.rank, s.scope_id
        )
        SELECT e.rank, e.seq, e.op, a.neurons
        FROM events e JOIN active a ON a.rank = e.rank AND a.scope_id = e.scope_id
        WHERE NOT EXISTS (SELECT 1 FROM ({where_ignored}) i WHERE i.rank = e.rank AND i.scope_id = e.scope_id)
        ORDER BY e.rank, e.seq
    """


def _uses_sql(events_table: str) -> str:
    return f"""
        SELECT u.rank, u.seq, u.role, u.position, {_storage_key_sql('t')} AS key,
               t.numel, t.element_size, t.nnz, t.is01, t.is_meta, t.dtype = 'bool' AS is_bool,
               t.device, t.shape[1] AS dim0, coalesce(t.freed_seq, -1) AS freed_seq, len(t.shape) AS ndim
        FROM event_tensors u JOIN {events_table} e ON e.rank = u.rank AND e.seq = u.seq
        JOIN tensors t ON t.rank = u.rank AND t.tensor_id = u.tensor_id
        ORDER BY u.rank, u.seq, u.k
    """


_SNAPSHOTS_SQL = f"""
    SELECT nm.rank, nm.seq, nm.module_id, nm.name, CASE WHEN nm.kind = 'tensor' THEN {_storage_key_sql('t')} END AS key,
           1 AS ord
    FROM neuron_memories nm LEFT JOIN tensor_states t ON t.rank = nm.rank AND t.tensor_id = nm.tensor_id
"""
CALL_START = "$call"  # a snapshot row that empties the neuron's memories (a foreign neuron's call starts)


def _foreign_snapshots_sql(compat: str | None) -> str:
    """Memory snapshots of snnTorch/Norse neurons: at each forward call, the tensors it was handed
    after its input (an empty placeholder, snnTorch's zeros(0), holds no state)."""
    table = neuron_models.table_sql(MODEL, compat)
    return f"""
    WITH calls AS (
        SELECT pre.rank, pre.seq, pre.module_id, pre.inputs[2:] || coalesce(post.kwarg_inputs, []) AS handed
        FROM module_events pre
        JOIN ({table}) n ON n.rank = pre.rank AND n.module_id = pre.module_id AND n.framework <> 'spikingjelly'
        LEFT JOIN module_events post ON post.rank = pre.rank AND post.module_id = pre.module_id
         AND post.call_index = pre.call_index AND post.kind = 'forward_post'
        WHERE pre.kind = 'forward_pre'
    ),
    handed AS (SELECT rank, seq, module_id, unnest(handed) AS tensor_id, generate_subscripts(handed, 1) AS i FROM calls)
    SELECT rank, seq, module_id, '{CALL_START}' AS name, NULL AS key, 0 AS ord FROM calls
    UNION ALL
    SELECT h.rank, h.seq, h.module_id, 'state' || h.i, {_storage_key_sql('t')}, 1
    FROM handed h JOIN tensor_states t ON t.rank = h.rank AND t.tensor_id = h.tensor_id
    WHERE t.numel > 0
    """


def _snapshots_sql(compat: str | None) -> str:
    return f"SELECT * FROM (({_SNAPSHOTS_SQL}) UNION ALL ({_foreign_snapshots_sql(compat)})) ORDER BY rank, seq, ord"


class _Replay:
    """SpikingJelly's NeuronStateCounter.count over one rank's neuron events, in order."""

    def __init__(self, snapshots: pd.DataFrame, compat: str | None, zero_ratio_threshold: float, sparse: bool,
                 materialisations: dict[int, frozenset] | None = None, foreign: frozenset = frozenset()):
        self.snapshot_seq = snapshots["seq"].to_numpy()
        self.snapshot_rows = list(zip(snapshots["module_id"], snapshots["name"], snapshots["key"]))
        self.next_snapshot = 0
        self.memories: dict[int, dict[str, str | None]] = {}
        self.refs: list[tuple[float, str]] = []  # (freed_seq, storage key) of functional state
        self.compat = compat
        self.threshold = zero_ratio_threshold
        self.sparse = sparse
        self.materialisations = materialisations or {}  # module_id -> the ops creating its state
        self.foreign = foreign  # module ids of snnTorch/Norse neurons

    def _advance_memories(self, seq: int) -> None:
        # A snapshot at seq s holds for the record s onwards (taken right after it).
        end = int(np.searchsorted(self.snapshot_seq, seq, side="right"))
        for module_id, name, key in self.snapshot_rows[self.next_snapshot:end]:
            if name == CALL_START:
                self.memories[int(module_id)] = {}
                continue
            self.memories.setdefault(int(module_id), {})[name] = None if key is None or key != key else key
        self.next_snapshot = end

    def _is_driver(self, use) -> bool:
        numel, nnz, is01, is_meta, is_bool = use[2], use[4], use[5], use[6], use[7]
        if numel == 0 or is_meta:
            return False
        if is_bool:
            return True
        if nnz is None or is01 is None:
            raise MissingStatisticsError(
                "neuron_state needs nnz/is01 of the inputs of neuron ops; this trace was captured without "
                "value statistics"
            )
        return bool(is01) or 1.0 - float(nnz) / float(numel) >= self.threshold

    def count(self, seq: int, op: str, neurons, uses) -> tuple[dict, int] | None:
        """(metrics, buffer bytes) of one op, or None when it touches no state.

        `uses`: (role, position, numel, element_size, nnz, is01, is_meta, is_bool, key, device,
        dim0, freed_seq, ndim) per tensor of the op."""
        namespace = op.split(".", 1)[0]
        positions = REGISTERED_NEURON_OPS.get(namespace)
        args = {u[1]: u for u in uses if u[0] == "arg"}
        first = args.get(0)
        if positions is not None and op.endswith(".forward.default") and first and first[9].startswith("cuda"):
            state_bytes = sum(args[p][2] * args[p][3] for p in positions if p in args)
            metrics = dict.fromkeys(METRICS, 0)
            metrics.update(state_reads=state_bytes * first[10], state_writes=state_bytes * first[10])
            metrics[REGISTERED_METRIC] = first[2]
            return metrics, state_bytes
        self._advance_memories(seq)
        memory_keys = {k for m in neurons for k in self.memories.get(m, {}).values() if k is not None}
        self.refs = [r for r in self.refs if r[0] > seq]
        keys = memory_keys | {key for _, key in self.refs}
        # compat: SpikingJelly materialises only when no state storage is alive at all
        unmaterialised = not (keys if self.compat == "spikingjelly" else memory_keys)
        if unmaterialised and any(op in self.materialisations.get(m, MATERIALISATIONS) for m in neurons):
            first_out = next((u for u in uses if u[0] == "out"), None)
            if first_out is not None:
                self.refs.append((first_out[11], first_out[8]))
                keys = keys | {first_out[8]}
        if not keys or op.startswith(IGNORED_PREFIXES):
            return None
        inputs = [u for u in uses if u[0] != "out"]
        outputs = [u for u in uses if u[0] == "out"]
        copy_into_state = op == "aten.copy_.default" and first is not None and first[8] in keys
        if copy_into_state and first is not None:
            sources = [u for u in inputs if u[8] in keys and u is not first]
            targets = [first]
        else:
            sources = [u for u in inputs if u[8] in keys]
            targets = []
        if not sources and not targets:
            return None
        written = targets if copy_into_state else outputs
        out_numel = sum(u[2] for u in outputs)
        drivers = [u for u in inputs if u[8] not in keys and self.sparse and self._is_driver(u)]
        if drivers and self.foreign.intersection(neurons):
            # a driver gates the elements it meets: spikes. snnTorch's threshold and Norse's v_leak,
            # v_reset (0-dim tensors, 1.0 and 0.0 by default, so "binary") are parameters broadcast
            # over every element: a foreign neuron's op takes only drivers of its output's size
            # and rank (SpikingJelly's neurons keep such scalars as Python floats)
            drivers = [u for u in drivers if u[12] > 0 and u[2] >= max((o[2] for o in outputs), default=0)]
        active = max((u[4] for u in drivers), default=0)
        buffer = max(u[2] * u[3] for u in sources + targets)
        if copy_into_state:
            reads = sum(u[2] * u[3] for u in sources)
            out_bytes = sum(u[2] * u[3] for u in targets)
        elif drivers:
            reads = sum(min(active, u[2]) * u[3] for u in sources)
            out_bytes = sum(min(active, u[2]) * u[3] for u in written)
        else:
            reads = sum(u[2] * u[3] for u in sources)
            out_bytes = sum(u[2] * u[3] for u in outputs)
        metrics = dict.fromkeys(METRICS, 0)
        metrics["state_reads"] = reads
        metric, writes = OP_KINDS.get(op, (None, False))
        if metric is not None:
            metrics[metric] += out_numel
        if writes and written:
            metrics["state_writes"] += out_bytes
            self.refs.extend((u[11], u[8]) for u in written)
            gated = "state_reset_ops" if drivers else "timestep_dense_ops"
            metrics[gated] += out_numel
            if drivers:
                metrics["spike_triggered_ops"] += out_numel
        if not any(metrics.values()):
            return None
        return metrics, buffer


def _projection(metrics: dict, buffer: int) -> dict:
    return {
        "read_potential": metrics["state_reads"],
        "write_potential": metrics["state_writes"],
        "state_mac_like": metrics["state_muls"],
        "potential_buffer_bytes": buffer,
        "state_acc_like": metrics["state_adds"] + metrics["state_comps"]
        + metrics["state_nonlinear_ops"] + metrics["state_select_ops"],
    }


def replay(con, ignore_modules=(), compat: str | None = None, zero_ratio_threshold: float = 0.5,
           sparse_memory_estimation: bool = True):
    """Per-event results: an Arrow-able DataFrame with rank, seq, value, the metrics (null
    neuron_logical_steps outside the CUDA path) and the projection, for every event whose
    metrics are not all zero."""
    ignored = ignored_scopes_sql(list(ignore_modules), compat)
    events = con.execute(_neuron_events_sql(ignored, compat)).df()
    con.register("neuron_event_keys", events[["rank", "seq"]])
    uses = con.execute(_uses_sql("neuron_event_keys")).df()
    con.unregister("neuron_event_keys")
    snapshots = con.execute(_snapshots_sql(compat)).df()
    creating = neuron_models.materialisations(con, MODEL, compat)
    foreign = _foreign_ids(con, compat)
    rows = []
    for rank in events["rank"].unique():
        rank_events = events[events["rank"] == rank]
        rank_uses = uses[uses["rank"] == rank]
        state = _Replay(snapshots[snapshots["rank"] == rank], compat, zero_ratio_threshold, sparse_memory_estimation,
                        {m: ops for (r, m), ops in creating.items() if r == rank},
                        frozenset(m for r, m in foreign if r == rank))
        use_seq = rank_uses["seq"].to_numpy()
        freed = rank_uses["freed_seq"].to_numpy().astype(float)
        freed[freed < 0] = _NEVER_FREED
        tuples = list(zip(
            rank_uses["role"], rank_uses["position"].fillna(-1).astype(int), rank_uses["numel"].astype(int),
            rank_uses["element_size"].astype(int), _optional_ints(rank_uses["nnz"]), _optional(rank_uses["is01"]),
            rank_uses["is_meta"], rank_uses["is_bool"], rank_uses["key"], rank_uses["device"],
            rank_uses["dim0"].fillna(0).astype(int), freed, rank_uses["ndim"].fillna(0).astype(int),
        ))
        seqs = rank_events["seq"].to_numpy()
        starts = np.searchsorted(use_seq, seqs, side="left")
        ends = np.searchsorted(use_seq, seqs, side="right")
        for seq, op, neurons, lo, hi in zip(seqs, rank_events["op"], rank_events["neurons"], starts, ends):
            result = state.count(int(seq), op, [int(n) for n in neurons], tuples[lo:hi])
            if result is None:
                continue
            metrics, buffer = result
            rows.append({"rank": int(rank), "seq": int(seq), "value": sum(metrics.values()),
                         REGISTERED_METRIC: None, **metrics, **_projection(metrics, buffer)})
    columns = ["rank", "seq", "value", *METRICS, REGISTERED_METRIC, *PROJECTION]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.astype({c: "int64" for c in columns if c != REGISTERED_METRIC}).astype({REGISTERED_METRIC: "Int64"})


def _foreign_ids(con, compat: str | None) -> set[tuple[int, int]]:
    rows = con.execute(f"SELECT rank, module_id FROM ({neuron_models.table_sql(MODEL, compat)}) "
                       "WHERE framework <> 'spikingjelly'").fetchall()
    return {(int(r), int(m)) for r, m in rows}


def _optional(series: pd.Series) -> list:
    return [None if v is None or v is pd.NA or (isinstance(v, float) and v != v) else bool(v) for v in series]


def _optional_ints(series: pd.Series) -> list:
    return [None if v is None or v is pd.NA or (isinstance(v, float) and v != v) else int(v) for v in series]


def neuron_state(con, *, where: str = "true", group_by: tuple[str, ...] = (), ignore_modules=(),
                 compat: str | None = None, zero_ratio_threshold: float = 0.5,
                 sparse_memory_estimation: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(counts, details) of the events matching `where`, state replayed over the whole trace.

    counts: scope, op, value (+ group_by columns), every selected op at every parent scope;
    details: family ('metrics' or 'projection'), scope, metric, value, as SpikingJelly's
    get_metric_counts() / get_projection_counts() (potential_buffer_bytes is a max)."""
    per_event = replay(con, ignore_modules, compat, zero_ratio_threshold, sparse_memory_estimation)
    con.register("neuron_state_values", per_event)
    ignored = ignored_scopes_sql(list(ignore_modules), compat)
    groups = "".join(f", e.{g}" for g in group_by)
    selected = f"""
        SELECT e.* FROM events e
        WHERE ({where}) AND NOT EXISTS (SELECT 1 FROM ({ignored}) i WHERE i.rank = e.rank AND i.scope_id = e.scope_id)
    """
    counts = con.execute(f"""
        SELECT p.scope, e.op{groups}, CAST(coalesce(sum(v.value), 0) AS BIGINT) AS value
        FROM ({selected}) e LEFT JOIN neuron_state_values v ON v.rank = e.rank AND v.seq = e.seq
        JOIN scopes s ON s.rank = e.rank AND s.scope_id = e.scope_id, UNNEST(s.parents) AS p(scope)
        GROUP BY ALL ORDER BY ALL
    """).df()
    sums = ", ".join(f"sum(v.{m}) AS {m}" for m in (*METRICS, REGISTERED_METRIC))
    projections = ", ".join(
        f"{'max' if p == 'potential_buffer_bytes' else 'sum'}(v.{p}) AS {p}" for p in PROJECTION
    )
    details = con.execute(f"""
        SELECT p.scope, {sums}, {projections}
        FROM ({selected}) e JOIN neuron_state_values v ON v.rank = e.rank AND v.seq = e.seq
        JOIN scopes s ON s.rank = e.rank AND s.scope_id = e.scope_id, UNNEST(s.parents) AS p(scope)
        GROUP BY p.scope ORDER BY p.scope
    """).df()
    con.unregister("neuron_state_values")
    long = []
    for family, names in (("metrics", (*METRICS, REGISTERED_METRIC)), ("projection", PROJECTION)):
        melted = details.melt(id_vars="scope", value_vars=list(names), var_name="metric", value_name="value")
        long.append(melted.dropna(subset=["value"]).assign(family=family))
    details = pd.concat(long, ignore_index=True)[["family", "scope", "metric", "value"]]
    # by family, scope, then the metric's place in METRICS / PROJECTION (melt's order, kept by a stable sort)
    details = details.sort_values(["family", "scope"], kind="stable", ignore_index=True)
    return counts, details.astype({"value": "int64"})
