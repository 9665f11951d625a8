"""The `spiketrace` command line: one module per command group, each command a few lines
over the library (spiketrace.analyze.results.Analysis, spiketrace.analyze.present). `main` is the entry point;
a command's module is imported when the command runs (app.COMMANDS).

    app.py             the group, one-line errors and exit codes, shared helpers
    trace_commands.py  info, views, sql, validate
    counts.py          counts
    neurobench.py      neurobench
    energy.py          energy, recost, presets list|show|validate|import-zigzag
    plots.py           plot
    report.py          report, diff
    demo.py            demo
"""

from spiketrace.analyze.cli.app import main

__all__ = ["main"]
