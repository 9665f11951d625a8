"""Reading a trace: its manifests, parsed by their schema (manifest.py, manifest_model.py), its
committed parts, checked on open (parts.py), validate's checks of rows (part_rows.py) and
across tables (integrity.py), one DuckDB view per table plus the named SQL views (views.py,
sql_views/), spill directories (spill.py), and the opened `Trace` (reader.py)."""

from spiketrace.analyze.trace.manifest import COMPLETE, TraceError, TraceNotFoundError, TraceVersionError
from spiketrace.analyze.trace.parts import Part
from spiketrace.analyze.trace.reader import (
    MARKERS_QUERY,
    OP_COUNTS_QUERY,
    PROFILER_MARKER_PREFIX,
    STAGES_QUERY,
    Trace,
    TraceChangedError,
    accepts_path,
    open_trace,
)

__all__ = ["COMPLETE", "MARKERS_QUERY", "OP_COUNTS_QUERY", "PROFILER_MARKER_PREFIX",
           "STAGES_QUERY", "Part", "Trace", "TraceChangedError", "TraceError",
           "TraceNotFoundError", "TraceVersionError", "accepts_path", "open_trace"]
