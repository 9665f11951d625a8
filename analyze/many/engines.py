"""Where the work runs: in this process, trace after trace, or on a Dask distributed cluster.

The in-process engine evaluates each trace as a single trace is evaluated: the counters and
the compute model stream it in chunks and NeuroMC maps a large one a piece at a time, so their
memory follows the chunk or piece, not the trace; work that adds up over shards but would hold
a whole trace in memory is evaluated shard after shard: ranks packed up to the work's
shard_events events, a larger rank cut into step ranges (shards.py), each opened on its own.
The dask engine first
reads every trace's facts and shards (its ranks, the model it gets, the step ranges of large
ranks) as one task per trace, then runs one task per shard: per (trace, rank), or (trace, rank,
step range) for a rank of more than shard_events events, each the same in-process evaluation;
a trace's shard results are added on the cluster (a tree of `add` tasks), and only each trace's
small result comes back. Work that does not add up over ranks (energy models outside
RANK_ADDITIVE_MODELS, and a report's JSON document: EnergyWork's `documents`) runs as one task
per whole trace.

Dask is imported only here and only for engine="dask": it is the optional `cluster` extra.
"""

from __future__ import annotations

import contextlib
import logging
import os

from spiketrace.analyze.many.shards import evaluate_shard, evaluate_trace, plan
from spiketrace.analyze.progress import each
from spiketrace.analyze.trace import TraceError

ENGINES = ("in-process", "dask")
FAN_IN = 16  # shard results added per reduce task


class EngineUnavailable(RuntimeError):
    """The engine cannot run here (Dask is not installed)."""


class InProcessEngine:
    """Each trace evaluated here, one after another: whole, or shard after shard when large."""

    def run(self, work, labels: list[str], progress: bool = False) -> list[tuple]:
        shown = each(labels, "traces", "trace", enabled=progress and len(labels) > 1)
        results = [evaluate_trace(work, label) for label in shown]
        work.agreed([facts for facts, _ in results])
        return results


class DaskEngine:
    """Tasks on the workers of a `distributed.Client`."""

    def __init__(self, client) -> None:
        self.client = client

    def run(self, work, labels: list[str], progress: bool = False) -> list[tuple]:
        """(`progress` is the in-process engine's; Dask's dashboard shows a cluster's tasks.)"""
        client = self.client
        planned = client.gather(client.map(_on_worker, [plan] * len(labels), [work] * len(labels), labels, pure=False))
        work = work.agreed([facts for facts, _ in planned])
        per_trace = []
        for facts, shards in planned:
            futures = [client.submit(_shard, work, facts.label, shard, pure=False) for shard in shards]
            per_trace.append(self._added(work.add, futures))
        return [(facts, result) for (facts, _), result in zip(planned, client.gather(per_trace))]

    def _added(self, add, futures: list):
        """One future of `futures`' results added, by a tree of tasks of FAN_IN each."""
        while len(futures) > 1:
            futures = [self.client.submit(add, futures[i:i + FAN_IN], pure=False) for i in range(0, len(futures), FAN_IN)]
        return futures[0]


def _on_worker(task, *args):
    """task(*args), its TraceErrors made fit to travel back to the client: one that is also an
    OSError (TraceNotFoundError) cannot be unpickled there (tblib, which Dask sends exceptions
    with, fails on ValueError and OSError bases before Python 3.14: ionelmc/python-tblib#90) and
    would arrive as a bare Exception; it travels as a TraceError with its message."""
    try:
        return task(*args)
    except TraceError as problem:
        if not isinstance(problem, OSError):
            raise
        message = str(problem)
    raise TraceError(message)  # outside the except block: no unpicklable __context__ attached


def _shard(work, label: str, shard):
    return _on_worker(evaluate_shard, work, label, shard)


def _default_workers() -> int:
    """One worker per two cores: each shard's DuckDB runs two threads."""
    return max(1, (os.cpu_count() or 2) // 2)


@contextlib.contextmanager
def open_engine(engine: str = "in-process", *, client=None, scheduler: str | None = None, workers: int | None = None):
    """The engine to run work on. "dask": on `client`, or on a new Client of the scheduler at
    `scheduler`, or of a LocalCluster of `workers` processes (one thread each); the ones made
    here are closed on leaving."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; choose from {ENGINES}")
    if engine == "in-process":
        if client is not None or scheduler or workers:
            raise ValueError("client=, scheduler= and workers= are for engine='dask'")
        yield InProcessEngine()
        return
    if sum(x is not None for x in (client, scheduler, workers)) > 1:
        raise ValueError("give one of client=, scheduler= and workers= (a scheduler's workers are its own)")
    try:
        import distributed
    except ImportError:
        raise EngineUnavailable("the dask engine needs Dask distributed: pip install -e '.[cluster]'") from None
    if client is not None:
        yield DaskEngine(client)
        return
    with contextlib.ExitStack() as stack:
        if scheduler:
            client = stack.enter_context(distributed.Client(scheduler))
        else:
            # silent: a task's failure reaches the client as its exception, said there in one line
            cluster = stack.enter_context(distributed.LocalCluster(
                n_workers=workers or _default_workers(), threads_per_worker=1, processes=True,
                dashboard_address=None, silence_logs=logging.CRITICAL))
            client = stack.enter_context(distributed.Client(cluster))
        yield DaskEngine(client)
