"""`LiveAnalysis`: each recorded cycle analysed in a background process, its scalars logged.

    live = LiveAnalysis(sinks=[TensorBoardSink("runs/tb"), CsvSink("runs/scalars.csv")])
    with Recorder("runs/trace", model=net, optimizer=opt, schedule=schedule(wait=9, active=1),
                  on_trace_ready=live) as rec:
        ...                                   # the training loop, rec.step() after each step
    live.close()                              # waits (bounded) for the last cycle's scalars

When the Recorder has flushed a cycle, the cycle is queued here (the training thread only
appends to a deque). A thread of this process hands the queue, one cycle at a time, to a worker
*process* running the offline analysis (`python -m spiketrace.analyze.live`, which imports no
torch and works on another core): it opens the trace as it is so far, computes each recorded
step's scalars with the same code as `spiketrace counts/energy --step N`, writes them to the
file sinks (CSV, TensorBoard, MLflow file store, W&B offline) and answers with them. The answers
wait in a queue until the training thread calls `poll()` (the framework callbacks do at every
step), which hands them to the sinks that live in the training process (a framework's logger).

Nothing here can stop or slow the training beyond appending to a deque and reading a queue:
- at most `max_pending` cycles wait; a new one beyond that drops the oldest, with a warning;
- a sink that fails (its package missing, a write refused) is warned about once and skipped
  from then on; the manifest's `loop.live_analysis` says what failed (framework callbacks) and
  `summary()` says it for any user;
- a worker that cannot start or dies ends the analysis, with a warning, not the training.

docs/live_analysis.md lists the scalars and the worker's protocol.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable

from spiketrace.capture.live.sinks import sink_spec
from spiketrace.capture.session.process_facts import rank_and_world

log = logging.getLogger("spiketrace")

Deliver = Callable[[int, dict], None]  # (framework step, {scalar name: value})


class LiveAnalysis:
    """Analyses recorded cycles in a worker process and logs their scalars (module docstring).

    `sinks`: where the worker writes (CsvSink, TensorBoardSink, MlflowSink, WandbSink, or their
    dict specs). `deliver`: sinks of the training process, {name: fn(step, scalars)}, called by
    `poll()`. `counters`: the counters logged (None: the analysis's defaults); `energy`: a list of
    (model, preset) pairs, (None, None) being the trace's default model and preset.
    """

    def __init__(self, sinks: Iterable = (), *, deliver: dict[str, Deliver] | None = None,
                 counters: list[str] | None = None, energy: Iterable[tuple] | None = None,
                 spike_rates: bool = True, coverage: bool = True, prefix: str = "spiketrace",
                 max_pending: int = 4, drain_timeout: float = 120.0) -> None:
        if max_pending < 1:
            raise ValueError("max_pending must be at least 1")
        self.sinks = [sink_spec(sink) for sink in sinks]
        self.deliver = dict(deliver or {})
        self.config = {
            "counters": None if counters is None else list(counters),
            "energy": [{"model": m, "preset": p} for m, p in (energy or [(None, None)])],
            "spike_rates": bool(spike_rates), "coverage": bool(coverage), "sinks": self.sinks, "prefix": prefix,
        }
        self.max_pending = max_pending
        self.drain_timeout = drain_timeout
        self.rows: list[dict] = []  # every row delivered: {"step", "recorder_step", "scalars"}
        self._pending: collections.deque = collections.deque()
        self._answers: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Condition()
        self._closing = False
        self._busy = False
        self._thread: threading.Thread | None = None
        self._process: subprocess.Popen | None = None
        self._next_id = 0
        self._counts = {"submitted": 0, "analysed": 0, "dropped": 0}
        self._failures: dict[str, str] = {}  # sink -> first failure (warned once)
        self._errors: list[str] = []

    # -- the training thread -------------------------------------------------------------------
    def __call__(self, path: str) -> None:
        """As a Recorder's `on_trace_ready`: queue the steps of the trace not analysed yet (logged
        at their Recorder step; this process's rank where several run)."""
        rank, world = rank_and_world()
        self.submit(path, rank if world > 1 else None, None)

    def submit(self, trace: str, rank: int | None, steps: dict[int, int | tuple[int, str]] | None) -> None:
        """Queue a cycle: `steps` maps its recorded Recorder steps to the step they are logged
        at, or to (that step, kind of step): a kind other than "train" names its scalars
        `<prefix>/<kind>/...` (None: every step of the trace not analysed yet, at its own number)."""
        logged = None if steps is None else {str(k): v if isinstance(v, int) else int(v[0]) for k, v in steps.items()}
        kinds = {} if steps is None else {str(k): v[1] for k, v in steps.items() if not isinstance(v, int)}
        request = {"trace": os.fspath(trace), "rank": rank, "steps": logged,
                   "kinds": {k: v for k, v in kinds.items() if v != "train"}}
        with self._wake:
            if self._closing:
                return
            self._counts["submitted"] += 1
            if len(self._pending) >= self.max_pending:
                dropped = self._pending.popleft()
                self._counts["dropped"] += 1
                if dropped["steps"] is None:  # its steps are asked for again by the next request
                    log.warning("spiketrace: live analysis is %d cycles behind; the oldest queued cycle is merged "
                                "into the next", self.max_pending)
                else:
                    log.warning("spiketrace: live analysis is %d cycles behind; the oldest queued cycle (steps %s) "
                                "is dropped", self.max_pending, sorted(dropped["steps"].values()))
            self._pending.append(request)
            self._wake.notify()
        self.start()

    def start(self) -> None:
        """Start the worker process now (else at the first cycle): a framework callback starts it
        with the run, so that its start-up is not paid inside a recorded step."""
        with self._wake:
            if self._thread is None and not self._closing:
                self._thread = threading.Thread(target=self._work, name="spiketrace-live-analysis", daemon=True)
                self._thread.start()

    def poll(self) -> list[dict]:
        """Hand the answers that arrived to `deliver`'s sinks; returns their rows."""
        rows = []
        while True:
            try:
                rows += self._answers.get_nowait()
            except queue.Empty:
                break
        for row in rows:
            self.rows.append(row)
            for name, deliver in self.deliver.items():
                if name in self._failures:
                    continue
                try:
                    deliver(row["step"], row["scalars"])
                except Exception as exc:  # noqa: BLE001 - a sink's failure never reaches the training
                    self._fail(name, f"{type(exc).__name__}: {exc}")
        return rows

    def close(self, timeout: float | None = None) -> None:
        """Wait (at most `timeout`, default drain_timeout, seconds) for the queued cycles, stop
        the worker, deliver the last answers."""
        limit = self.drain_timeout if timeout is None else timeout
        if self._process is not None:  # the run is over: what is left of the analysis may have the CPU
            _take_cpu(self._process.pid)
        with self._wake:
            self._wake.wait_for(lambda: not self._pending and not self._busy, timeout=limit)
            self._closing = True
            left = len(self._pending)
            self._pending.clear()
            self._wake.notify_all()
        if left:
            self._counts["dropped"] += left
            log.warning("spiketrace: live analysis did not finish within %.0f s; %d queued cycle(s) left out",
                        limit, left)
        if self._thread is not None:
            self._thread.join(timeout=max(limit, 1.0))
        self.poll()

    def summary(self) -> dict:
        """What the analysis did, for the manifest: cycles, sinks and what failed."""
        return {"cycles": dict(self._counts), "sinks": [s["kind"] for s in self.sinks] + sorted(self.deliver),
                "sink_failures": [{"sink": k, "error": v} for k, v in self._failures.items()],
                "errors": list(self._errors)}

    # -- the analysis thread ----------------------------------------------------------------------
    def _work(self) -> None:
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "spiketrace.analyze.live", "--config", json.dumps(self.config)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        except OSError as exc:
            self._error(f"the analysis process did not start: {exc}")
            self._abandon()
            return
        _yield_cpu(self._process.pid)
        try:
            while self._serve_one():
                pass
        finally:
            self._stop_process()

    def _serve_one(self) -> bool:
        with self._wake:
            self._wake.wait_for(lambda: self._pending or self._closing)
            if not self._pending:
                return False
            request = {"id": self._next_id, **self._pending.popleft()}
            self._next_id += 1
            self._busy = True
        try:
            answer = self._ask(request)
        finally:
            with self._wake:
                self._busy = False
                self._wake.notify_all()
        if answer is None:
            self._abandon()
            return False
        for failure in answer.get("sink_failures") or ():
            self._fail(failure.get("sink", "?"), failure.get("error", "?"))
        if answer.get("error"):
            self._error(answer["error"])
        self._counts["analysed"] += 1
        self._answers.put(answer.get("rows") or [])
        return True

    def _ask(self, request: dict) -> dict | None:
        process = self._process
        assert process is not None and process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(json.dumps(request) + "\n")
            process.stdin.flush()
            line = process.stdout.readline()
        except OSError as exc:
            self._error(f"the analysis process went away: {exc}")
            return None
        if not line:
            self._error(f"the analysis process ended (exit code {process.poll()})")
            return None
        try:
            return json.loads(line)
        except ValueError:
            self._error(f"the analysis process answered something else than JSON: {line[:200]!r}")
            return None

    def _abandon(self) -> None:
        """The worker is gone: what waits is left out; later cycles are not analysed."""
        with self._wake:
            self._counts["dropped"] += len(self._pending)
            self._pending.clear()
            self._closing = True
            self._wake.notify_all()

    def _stop_process(self) -> None:
        process = self._process
        if process is None:
            return
        try:
            if process.stdin is not None:
                process.stdin.close()  # EOF: the worker closes its sinks and exits
            process.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            process.kill()

    def _fail(self, sink: str, error: str) -> None:
        if sink not in self._failures:
            self._failures[sink] = error
            log.warning("spiketrace: live analysis sink %s is skipped from now on: %s", sink, error)

    def _error(self, error: str) -> None:
        if len(self._errors) < 20:
            self._errors.append(error)
        if len(self._errors) == 1:
            log.warning("spiketrace: live analysis: %s", error)


def _yield_cpu(pid: int) -> None:
    """The training comes first: the worker runs only on CPU time nothing else wants (Linux's
    SCHED_IDLE), or at the lowest priority where that policy is missing."""
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
        return
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, pid, 19)


def _take_cpu(pid: int) -> None:
    """Back to the ordinary policy (allowed from SCHED_IDLE unprivileged, within RLIMIT_NICE)."""
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(pid, os.SCHED_OTHER, os.sched_param(0))
