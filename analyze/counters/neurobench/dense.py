"""NeuroBench's `Dense` synaptic operations (SynapticOperations' total=True): a layer call's
operations as if every input and weight were nonzero (neurobench/metrics/utils/layers/macs.py
fills input and weights with ones, zeroes the bias, reruns the layer and sums the output).

Per synaptic op of a stateless layer's call, a pure function of its shapes and arguments:

    mm x [M, K] @ y [K, N], addmm(b, x, y):          M * K * N   (bmm/baddbmm: times the batch)
    linear x [..., K], w [N, K]:                      numel(x) * N
    conv x [N, C_in, L...], w [C_out, C_in/g, K...]:  N * C_out * C_in/g * prod_d taps_d

taps_d counts the (output position, kernel tap) pairs along dim d whose input lands inside x,
not in the zero padding: sum over taps k of #{o : 0 <= o * stride + k * dilation - padding < L}.
A recurrent cell's Dense is its own rule (cells.DENSE).
"""

from __future__ import annotations

import json
import math


def _per_dim(value, dims: int) -> list[int]:
    values = value if isinstance(value, list) else [value]
    return values * dims if len(values) == 1 else values


def taps(length: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    """The (output, tap) pairs of one conv dim whose input position is inside [0, length)."""
    outputs = (length + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
    total = 0
    for k in range(kernel):
        offset = k * dilation - padding  # input position of output o: o * stride + offset
        low = -(offset // stride) if offset < 0 else 0  # ceil(-offset / stride)
        high = min(outputs - 1, (length - 1 - offset) // stride)
        total += max(0, high - low + 1)
    return total


def _conv(x: list[int], w: list[int], stride, padding, dilation) -> int | None:
    dims = len(w) - 2
    batch = x[0] if len(x) == dims + 2 else 1
    lengths = x[-dims:]
    stride, dilation = _per_dim(stride, dims), _per_dim(dilation, dims)
    if padding == "valid":
        padding = [0] * dims
    elif padding == "same":  # total padding dilation * (K - 1), the left part is what meets input
        padding = [d * (k - 1) // 2 for d, k in zip(dilation, w[2:])]
    padding = _per_dim(padding, dims)
    product = 1
    for length, kernel, s, p, d in zip(lengths, w[2:], stride, padding, dilation):
        product *= taps(length, kernel, s, p, d)
    return batch * w[0] * w[1] * product


def _operand(shapes: list[list[int] | None], position: int) -> list[int]:
    """The shape of the operand at `position`; TypeError where it has none (total() leaves the
    call out, unsized)."""
    shape = shapes[position]
    if shape is None:
        raise TypeError(f"no tensor operand at position {position}")
    return shape


def dense(op: str, shapes: list[list[int] | None], args: str) -> int | None:
    """Dense operations of one synaptic op (`shapes`: its positional tensor arguments' shapes,
    `args`: its recorded arguments as JSON); None for one NeuroBench never meets in a layer
    (a transposed convolution)."""
    a = json.loads(args)
    if op in ("aten.mm.default", "aten.bmm.default"):
        x, y = _operand(shapes, 0), _operand(shapes, 1)
        return math.prod(x) * y[-1]
    if op in ("aten.addmm.default", "aten.baddbmm.default"):
        x, y = _operand(shapes, 1), _operand(shapes, 2)
        return math.prod(x) * y[-1]
    if op == "aten.linear.default":
        return math.prod(_operand(shapes, 0)) * _operand(shapes, 1)[0]
    if op == "aten.convolution.default":
        if a[6]:
            return None
        return _conv(_operand(shapes, 0), _operand(shapes, 1), a[3], a[4], a[5])
    if op.startswith("aten.conv") and len(shapes) >= 2:
        dims = len(_operand(shapes, 1)) - 2
        stride, padding, dilation = (a[3] if len(a) > 3 else 1), (a[4] if len(a) > 4 else 0), (a[5] if len(a) > 5 else 1)
        return _conv(_operand(shapes, 0), _operand(shapes, 1), _per_dim(stride, dims), padding, _per_dim(dilation, dims))
    return None


def geometry_sql(events: str) -> str:
    """One row per non-cell synaptic event in `events` (convention._events_sql): its op, the
    shapes of its first three positional tensors (with their positions) and its arguments."""
    return f"""
    SELECT e.op, list(t.shape ORDER BY u.position) AS shapes, list(u.position ORDER BY u.position) AS positions,
           ev.args
    FROM ({events}) e
    JOIN events ev ON ev.rank = e.rank AND ev.seq = e.seq
    JOIN event_tensors u ON u.rank = e.rank AND u.seq = e.seq AND u.role = 'arg' AND u.item IS NULL AND u.position < 3
    JOIN tensors t ON t.rank = u.rank AND t.tensor_id = u.tensor_id
    WHERE NOT e.cell
    GROUP BY e.rank, e.seq, e.op, ev.args
    """


def total(con, events: str) -> tuple[int, list[str]]:
    """Dense of the non-cell synaptic events in `events`, and notes on any it cannot size."""
    rows = con.execute(f"""
        SELECT op, shapes, positions, args, count(*) AS calls FROM ({geometry_sql(events)}) GROUP BY ALL
    """).fetchall()
    value = 0
    unsized: dict[str, int] = {}
    for op, shapes, positions, args, calls in rows:
        by_position = dict(zip(positions, shapes))
        operands = [by_position.get(i) for i in range(3)]
        try:
            each = dense(op, operands, args)
        except (TypeError, IndexError, ValueError, ZeroDivisionError):
            each = None
        if each is None:
            unsized[op] = unsized.get(op, 0) + calls
        else:
            value += each * calls
    notes = [f"Dense: {calls} {op} calls could not be sized and are left out" for op, calls in sorted(unsized.items())]
    return value, notes
