"""What the statistics of one op share while they are taken (capture/ops/op_statistics.py).

Whether its operands are known 0/1, their (nnz, is01) as the record just described them,
whether the compiled passes may run, and what one statistic computed that another reads (a
convolution input's nonzero taps, a GEMM's pair count). Held only while one op's statistics
are taken, so nothing outlives the call whose tensors it was computed from; a statistic
function called on its own computes everything itself.
"""

from __future__ import annotations

from contextlib import contextmanager

SHARED: dict = {}


@contextmanager
def one_op(binary_operands, compiled: bool = True, operand_stats=()):
    """The statistics of one op are taken inside; `binary_operands`: per operand of
    OP_STATISTICS, True when known to hold only 0 and 1 (False or None otherwise);
    `compiled`: the pair counts and ternary checks may take their compiled passes (the fast
    path native_operand_statistics); `operand_stats`: per operand, its
    (nnz, is01) as the record just described it, or None where not known."""
    begin_op(binary_operands, compiled, operand_stats)
    try:
        yield
    finally:
        SHARED.clear()


def begin_op(binary_operands, compiled: bool = True, operand_stats=()) -> None:
    """What one_op does on entry, for a caller that clears SHARED itself (end_op) in a
    finally: the per-op path, where a generator's context manager cost more than the lookups."""
    SHARED.clear()
    SHARED["binary"] = tuple(binary_operands)
    SHARED["compiled"] = compiled
    SHARED["stats"] = tuple(operand_stats)


end_op = SHARED.clear


def operand_stats(index: int) -> tuple | None:
    """The (nnz, is01) one_op was given for operand `index` of OP_STATISTICS, or None."""
    stats = SHARED.get("stats", ())
    return stats[index] if index < len(stats) else None
