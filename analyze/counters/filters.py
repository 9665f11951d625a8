"""The filters every analysis of a trace takes (stage, phase, step, rank, module, ops, and what to
do with recomputed work) as one SQL condition over `events`; stage, phase, step, rank and
recompute select `module_events` too. Below the counters and the NeuroBench metrics alike, so
both read a selection the same way."""

from __future__ import annotations

# What to do with the work activation checkpointing (torch.utils.checkpoint) recomputed during
# backward: the events and module calls the trace flags `recompute`. It ran, so "include" is the
# default; "exclude" counts each forward once (the numbers of the run without checkpointing);
# "only" shows what checkpointing cost.
RECOMPUTE_CHOICES = ("include", "exclude", "only")


def quote(text: str) -> str:
    return "'" + str(text).replace("'", "''") + "'"


def recompute_clause(recompute: str | None) -> str | None:
    """SQL keeping the events (or module_events) `recompute` selects: None or "include" keeps
    all (no clause), "exclude" drops the work torch.utils.checkpoint recomputed during
    backward, "only" keeps just that work. A trace of schema 1.0 has no flag: nothing in it
    counts as recomputed."""
    if recompute in (None, "include"):
        return None
    if recompute not in RECOMPUTE_CHOICES:
        raise ValueError(f"recompute must be one of {RECOMPUTE_CHOICES}, got {recompute!r}")
    return "coalesce(recompute, false)" if recompute == "only" else "NOT coalesce(recompute, false)"


def where_sql(stage=None, phase=None, step=None, rank=None, module=None, ops=None, recompute=None) -> str:
    """SQL over `events` (stage, phase, step, rank and recompute also over `module_events`); a
    value or a list of values each."""
    clauses = [clause for clause in [recompute_clause(recompute)] if clause]
    for column, value in (("stage", stage), ("phase", phase), ("step", step), ("rank", rank)):
        if value is not None:
            values = value if isinstance(value, (list, tuple, set)) else [value]
            clauses.append(f"{column} IN ({', '.join(quote(v) if isinstance(v, str) else str(int(v)) for v in values)})")
    if module is not None:
        # events attributed to this scope (and so to its subtree), SpikingJelly-style
        clauses.append(
            f"(rank, scope_id) IN (SELECT rank, scope_id FROM scopes WHERE list_contains(parents, {quote(module)}))"
        )
    if ops is not None:
        patterns = [ops] if isinstance(ops, str) else list(ops)
        globs = (quote(p if any(c in p for c in '*?[') else p + '*') for p in patterns)
        clauses.append("(" + " OR ".join(f"op GLOB {glob}" for glob in globs) + ")")
    return " AND ".join(clauses) or "true"
