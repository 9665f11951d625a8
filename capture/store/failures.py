"""The capture's own failures: counted per kind into the manifest's `degraded` list, never raised.

A profiler that kills the training job it watches is worse than none. So every place where
torch calls into the capture (the dispatch mode, module and grad hooks, optimizer hooks,
stage markers) and the writer's flushes catch their own exceptions and report them here.
The op or hook still does its real work; only the record of it is lost or partial.

Each kind of failure, (site, what, exception type), is logged once (logger
`spiketrace.capture`, with the trace path) and then only counted, so a failure repeated at
every op neither floods the log nor slows the run down further. The manifest key `degraded`
is this log's `entries` list itself (the writer rewrites the manifest when a new kind
appears, so even a run killed afterwards says it was degraded):

    {"site": "dispatch", "what": "aten.convolution.default",
     "error": "ValueError: expected 2 values, got (0,)", "count": 12, "first_seq": 340}

`logging`, not `warnings`: a user running with `-W error` would otherwise get our warning
raised into their code, which is exactly what this module exists to prevent.

Pure Python (no torch, no pyarrow), so the writer can use it too.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

logger = logging.getLogger("spiketrace.capture")

# Where a failure happened, for the `site` field (the analysis may group by it).
SITES = ("dispatch", "statistics", "module_hook", "grad_hook", "optimizer_hook", "stage", "tracker", "compile", "writer",
         "catalog")


def describe_error(exc: BaseException) -> str:
    """'ExceptionType: message', first line only (tracebacks stay out of the manifest)."""
    message = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {message[0]}" if message else type(exc).__name__


class FailureLog:
    """Failures of one rank's capture, aggregated per (site, what, exception type)."""

    def __init__(self, trace_path: str, on_new_kind: Callable[[], object] | None = None) -> None:
        self.trace_path = trace_path
        self.entries: list[dict] = []  # the manifest's `degraded` list, mutated in place
        self.on_new_kind = on_new_kind
        self._by_key: dict[tuple[str, str, str], dict] = {}
        self._lock = threading.Lock()  # hooks may fail on autograd's threads too

    def __bool__(self) -> bool:
        return bool(self.entries)

    def report(self, site: str, what: str, exc: BaseException, first_seq: int | None = None) -> None:
        """Count one failure; log it if it is the first of its kind. Never raises."""
        try:
            key = (site, str(what), type(exc).__qualname__)
            with self._lock:
                entry = self._by_key.get(key)
                if entry is not None:
                    entry["count"] += 1
                    return
                entry = {"site": site, "what": key[1], "error": describe_error(exc), "count": 1, "first_seq": first_seq}
                self._by_key[key] = entry
                self.entries.append(entry)
            logger.warning(
                "spiketrace: capture into %s is degraded: %s failed at %s (%s); the run goes on, the trace "
                "records what it can; further failures of this kind are only counted (manifest key 'degraded')",
                self.trace_path, key[1], site, entry["error"],
            )
            if self.on_new_kind is not None:
                self.on_new_kind()
        except Exception:  # noqa: BLE001 - reporting a failure must not become one
            pass
