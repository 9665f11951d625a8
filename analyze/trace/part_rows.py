"""`validate`'s checks of each committed part's rows: checksum, every column decoded, and the
plausibility rules declared beside the schemas (schemas/plausibility.py).

Each problem is one line naming the file, and the column and row where there is one. The
cost is linear: each part is hashed once, decoded once column by column (pyarrow, with the
Parquet page checksums the writer adds, so a damaged page names its column), and scanned once
by DuckDB for all of its table's rules together.
"""

from __future__ import annotations

import re
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from spiketrace.analyze.trace.manifest import first_line
from spiketrace.analyze.trace.parts import Part
from spiketrace.analyze.trace.views import sql_string
from spiketrace.schemas.plausibility import ORDERED, RULES, Rule
from spiketrace.schemas.safe_files import checksum_of_file
from spiketrace.schemas.tables import TABLES


def checksum_problem(part: Part) -> str | None:
    if part.checksum is None:
        return None
    try:
        found = checksum_of_file(part.path)
    except FileNotFoundError:
        raise  # removed since the trace was opened: the reader says the trace changed
    except OSError as exc:
        return f"{part.path}: unreadable ({first_line(exc)})"
    return None if found == part.checksum else f"{part.path}: checksum mismatch: changed after it was committed (damaged)"


def decode_problems(part: Part) -> list[str]:
    """Read every column of every row group: what cannot be decoded, one line per column."""
    try:
        parquet = pq.ParquetFile(part.path, page_checksum_verification=True)
    except FileNotFoundError:
        raise
    except (OSError, pa.ArrowException) as exc:
        return [f"{part.path}: not a readable Parquet file ({first_line(exc)})"]
    problems = []
    for group in range(parquet.num_row_groups):
        for name in parquet.schema_arrow.names:
            try:
                parquet.read_row_group(group, columns=[name])
            except (OSError, pa.ArrowException) as exc:
                problems.append(f"{part.path}: column {name}, row group {group}: cannot be decoded ({first_line(exc)})")
    return problems


def _columns_of(rule: Rule) -> set[str]:
    """The columns of its table a rule reads (the other words are SQL functions and keywords)."""
    return set(re.findall(r"[a-z_]+", rule.holds)) & set(TABLES[rule.table].names)


def _source(part: Part) -> str:
    return f"read_parquet({sql_string(str(part.path))}, file_row_number = true)"


def rule_problems(con: duckdb.DuckDBPyConnection, part: Part) -> list[str]:
    """Rows of `part` breaking its table's rules: per rule, how many, and the first one."""
    rules = [rule for rule in RULES if rule.table == part.table]
    if not rules:
        return []
    # An older minor's part may lack a column (the reader refuses any other part that does):
    # it reads as NULL there, as in the views, so a rule that mentions it still checks the rest.
    missing = sorted(set().union(*map(_columns_of, rules)) - set(pq.read_schema(part.path).names))
    source = _source(part) if not missing else \
        f"(SELECT *, {', '.join(f'NULL AS {name}' for name in missing)} FROM {_source(part)})"
    selects = []
    for rule in rules:
        broken = f"NOT coalesce(({rule.holds}), true)"
        selects += [f"count_if({broken})", f"arg_min({rule.column}::VARCHAR, file_row_number) FILTER (WHERE {broken})",
                    f"min(file_row_number) FILTER (WHERE {broken})"]
    row = con.execute(f"SELECT {', '.join(selects)} FROM {source}").fetchall()[0]
    problems = []
    for index, rule in enumerate(rules):
        count, value, first_row = row[3 * index: 3 * index + 3]
        if count:
            shown = value if value is None or len(value) <= 60 else value[:57] + "..."
            more = f" (and {count - 1} more rows)" if count > 1 else ""
            problems.append(f"{part.path}: column {rule.column}, row {first_row}: {shown} breaks "
                            f"'{rule.holds}' ({rule.meaning}){more}")
    return problems


def order_problems(con: duckdb.DuckDBPyConnection, parts: list[Part]) -> list[str]:
    """ORDERED columns must grow within each part and from one part of a rank to the next."""
    if not parts or parts[0].table not in ORDERED:
        return []
    column, strict = ORDERED[parts[0].table]
    wrong = "<=" if strict else "<"
    problems: list[str] = []
    last_of_rank: dict[int, Any] = {}
    for part in parts:
        broken, first_row, first, last = con.execute(
            f"SELECT count_if(v {wrong} prev), min(n) FILTER (WHERE v {wrong} prev), "
            f"arg_min(v, n), arg_max(v, n) FROM (SELECT {column} AS v, file_row_number AS n, "
            f"lag({column}) OVER (ORDER BY file_row_number) AS prev FROM {_source(part)})"
        ).fetchall()[0]
        if broken:
            problems.append(f"{part.path}: column {column}, row {first_row}: out of order "
                            f"({'increasing' if strict else 'non-decreasing'} along the record order; {broken} rows)")
        previous = last_of_rank.get(part.rank)
        if previous is not None and first is not None and (first <= previous if strict else first < previous):
            problems.append(f"{part.path}: column {column}, row 0: {first} does not follow {previous}, "
                            "the last value of the rank's previous part")
        if last is not None:
            last_of_rank[part.rank] = last
    return problems


def part_problems(con: duckdb.DuckDBPyConnection, parts: dict[str, list[Part]]) -> tuple[list[str], bool]:
    """Every problem of every committed part (module docstring), one line each, and whether
    every part could be read (the rules run on readable parts only)."""
    problems, all_readable = [], True
    for table_parts in parts.values():
        readable = []
        for part in table_parts:
            found = [p for p in [checksum_problem(part)] if p] + decode_problems(part)
            problems += found
            all_readable = all_readable and not found
            if not found:
                problems += rule_problems(con, part)
                readable.append(part)
        problems += order_problems(con, readable)
    return problems, all_readable

