"""spiketrace analyze: read a captured trace offline with DuckDB. Needs no torch.

    from analyze import open_trace
    with open_trace("run.trace") as trace:
        trace.sql("SELECT op, count(*) FROM events GROUP BY op")
"""

from analyze.trace import Trace, TraceError, open_trace

__all__ = ["Trace", "TraceError", "open_trace"]
