"""The samples NeuroBench divides its per-sample metrics by, one batch (recorder step) at a time.

NeuroBench counts `data[0].size(0)` of each batch: dim 0 of batch-first data. From a trace the
batch of a recorder step is read where its position is known:

    1. dim 1 of the first SpikingJelly multi-step module's input (step_mode 'm': [T, B, ...]);
    2. else dim 0 of the bound model's first input (NeuroBench's batch-first rule).

Rule 1 is right both for a model SpikingJelly's way, called on [T, B, ...] itself (where dim 0
of the model's input is T), and for a NeuroBench-style wrapper that takes [B, T, ...] and
transposes it inside (where both rules give B). A model with multi-step modules none of which
showed a batch in some step (no such call, or an input of one dim) falls back to rule 2; where
that input's dims 0 and 1 differ a note says which dimension was taken and how to give the
count (`--samples N`). The note carries no count of its own, so the notes of a trace's ranks,
evaluated apart (the dask engine) and added up, read as the whole trace's.
"""

from __future__ import annotations

MULTI_STEP = "coalesce(json_extract_string(m.attributes, '$.step_mode') = 'm', false)"  # SpikingJelly's step_mode


def first_inputs(con, module_where: str = "true") -> list[tuple[int, int, list | None]]:
    """Per (rank, recorder step): the shape of the bound model's first forward call's first
    input (None when it has none, e.g. given by keyword), in (rank, step) order."""
    return [(rank, step, shape) for rank, step, shape, _ in _shapes(con, module_where)]


def _shapes(con, module_where: str) -> list[tuple[int, int, list | None, list | None]]:
    """Per (rank, step) with a forward call of the bound model: its first input's shape and the
    input shape (two dims or more) of the step's first multi-step module call, or None."""
    return con.execute(f"""
        WITH pre AS (
            SELECT me.rank, me.step, me.seq, me.inputs[1] AS input_id, m.parent_id IS NULL AS root,
                   {MULTI_STEP} AS multi_step
            FROM (SELECT * FROM module_events WHERE {module_where}) me
            JOIN modules m ON m.rank = me.rank AND m.module_id = me.module_id
            WHERE me.kind = 'forward_pre' AND m.in_model
        ), model AS (
            SELECT rank, step, arg_min(input_id, seq) AS input_id FROM pre WHERE root GROUP BY rank, step
        ), multi AS (
            SELECT p.rank, p.step, arg_min(t.shape, p.seq) AS shape
            FROM pre p JOIN tensors t ON t.rank = p.rank AND t.tensor_id = p.input_id
            WHERE p.multi_step AND len(t.shape) >= 2 GROUP BY p.rank, p.step
        )
        SELECT f.rank, f.step, t.shape, mu.shape
        FROM model f LEFT JOIN tensors t ON t.rank = f.rank AND t.tensor_id = f.input_id
        LEFT JOIN multi mu ON mu.rank = f.rank AND mu.step = f.step
        ORDER BY f.rank, f.step
    """).fetchall()


def batch_sizes(con, module_where: str = "true") -> list[tuple[int, int, int | None, str | None]]:
    """Per (rank, recorder step) with a forward call of the bound model: (rank, step, samples,
    rule), the rule "multi-step" (dim 1 of the first SpikingJelly multi-step module's input) or
    "model" (dim 0 of the model's first input); samples and rule None where neither is known."""
    return _sizes(_shapes(con, module_where))


def _sizes(shapes) -> list[tuple[int, int, int | None, str | None]]:
    sizes: list[tuple[int, int, int | None, str | None]] = []
    for rank, step, model, multi in shapes:
        if multi:
            sizes.append((rank, step, int(multi[1]), "multi-step"))
        elif model:
            sizes.append((rank, step, int(model[0]), "model"))
        else:
            sizes.append((rank, step, None, None))
    return sizes


def _has_multi_step(con) -> bool:
    return con.execute(f"SELECT count(*) > 0 FROM modules m WHERE m.in_model AND {MULTI_STEP}").fetchone()[0]


def _fell_back_ambiguously(model: list | None, multi: list | None) -> bool:
    """No multi-step module showed the batch, and dims 0 and 1 of the model's input differ."""
    return multi is None and model is not None and len(model) > 1 and model[0] != model[1]


def sample_count(con, module_where: str = "true") -> tuple[int | None, list[str]]:
    """(samples, notes): the batches' samples summed (module docstring), None when some step's
    batch is unknown; a note where a model with SpikingJelly multi-step modules fell back to
    dim 0 of its input and that input's dims 0 and 1 differ."""
    shapes = _shapes(con, module_where)
    known = [size for _, _, size, _ in _sizes(shapes) if size is not None]
    if not shapes or len(known) < len(shapes):
        return None, []
    ambiguous = any(_fell_back_ambiguously(model, multi) for _, _, model, multi in shapes)
    if ambiguous and _has_multi_step(con):
        return sum(known), ["samples: took dim 0 of the model's input, as NeuroBench does (batch-first data), where no "
                         "SpikingJelly multi-step module's input showed the batch (its dim 1 of [T, B, ...]); the "
                         "model has such modules and dims 0 and 1 of its input differ: if dim 0 holds time steps, "
                         "say the count with --samples N (samples=N)"]
    return sum(known), []


def samples(con, module_where: str = "true") -> int | None:
    """The samples NeuroBench would divide by (sample_count without its notes)."""
    return sample_count(con, module_where)[0]
