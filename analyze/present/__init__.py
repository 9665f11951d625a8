"""Showing results: text tables and JSON, plots, the HTML report, diffs, results as DuckDB
tables. Modules here take computed results and never run an engine (docs/design.md)."""
