"""spiketrace analyze: read a captured trace offline with DuckDB. Needs no torch.

    from analyze import counts, open_trace
    with open_trace("run.trace") as trace:
        trace.sql("SELECT op, count(*) FROM events GROUP BY op")
        counts(trace, ["flop", "ac"], stage="forward")
"""

from analyze.counters import count, counts
from analyze.trace import Trace, TraceError, open_trace

__all__ = ["Trace", "TraceError", "count", "counts", "open_trace"]
