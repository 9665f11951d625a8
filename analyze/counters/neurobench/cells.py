"""NeuroBench's recurrent cells (neurobench/metrics/utils/layers/macs.py, recurrent_cell_macs):
what a cell call costs beyond its two matrix products, and its Dense count.

NeuroBench binarises x, the states, the weights and the biases (nonzero -> 1), and counts:

    RNNCell:  pairs(W_ih, x) + pairs(W_hh, h)                      (the GEMM pairs only)
    LSTMCell: the GEMM pairs, then with the gate pre-activations i, f, g, o (binary: a pair or
              a nonzero bias in that row) #(f & c) + #(i & g) + #(o & (f & c | i & g))
    GRUCell:  the GEMM pairs, then with r, z, n as NeuroBench forms them
              #(r & (W_hn h | b_hn)) + #((1 - z) != 0 & n) + #(z & h)

A trace holds each call's tensor facts (shape, nnz), not their elementwise patterns, so the gate
terms are read off the biases: where every gate row has a nonzero bias (LSTMCell: either bias
vector without a zero; GRUCell: both), every gate is nonzero and the terms are

    LSTMCell: nnz(c) + 2 * H * B            GRUCell: 2 * H * B + nnz(h)

(H hidden units, B rows of x). Where a bias has zeros (or bias=False) they are an upper bound
and `notes` says so. Dense (all inputs and weights ones; NeuroBench binarises rather than fills
the nested (h, c) of an LSTMCell, a quirk it keeps):

    RNNCell:  H * I * B + H * H * B         LSTMCell: 4H * I * B + 4H * nnz(h) + nnz(c) + 2HB
    GRUCell:  3H * I * B + 3H * H * B + 3HB

A call without a state counts as one given an explicit zero state (h = c = 0). NeuroBench 2.3.0
itself counts such a call wrong: it fails on a cell with a bias (SynapticOperations becomes 0.0)
and reads only the first sample's row without one; `notes` says where this happened.
"""

from __future__ import annotations

RNN_CELL = "torch.nn.modules.rnn.RNNCell"
LSTM_CELL = "torch.nn.modules.rnn.LSTMCell"
GRU_CELL = "torch.nn.modules.rnn.GRUCell"
CELL_BASE = "torch.nn.modules.rnn.RNNCellBase"
GATED_CELLS = (LSTM_CELL, GRU_CELL)

# kind -> (the gate terms beyond the GEMM pairs, Dense of the whole call): SQL over one call's
# row (H, I, B, h_nnz, c_nnz, the state's nnz 0 when the call had none)
EXTRA = {
    "lstm": "c_nnz + 2 * H * B",
    "gru": "2 * H * B + h_nnz",
    "rnn": "0",
}
DENSE = {
    "lstm": "4 * H * I * B + 4 * H * h_nnz + c_nnz + 2 * H * B",
    "gru": "3 * H * I * B + 3 * H * H * B + 3 * H * B",
    "rnn": "H * I * B + H * H * B",
}
# the biases that make every gate nonzero: LSTMCell either vector without a zero, GRUCell both
EXACT = {
    "lstm": "(bias_ih_dense OR bias_hh_dense)",
    "gru": "(bias_ih_dense AND bias_hh_dense)",
    "rnn": "true",
}


def _arms(rule: dict[str, str]) -> str:
    return "CASE kind " + " ".join(f"WHEN '{k}' THEN {v}" for k, v in rule.items()) + " END"


def calls_sql(events: str, groups: tuple[str, ...]) -> str:
    """One row per cell call with synaptic events in `events` (convention._events_sql): the
    scope, group columns and `spiking` of its first GEMM, its class, and `extra` (the gate
    terms), `dense`, `exact`, `stateless` (called without a state), `gemm_pairs` and
    `missing` (a fact the rule needs that the trace lacks: NULL when none)."""
    keys = "".join(f", {g}" for g in groups)
    return f"""
    WITH firsts AS (
        SELECT rank, first_seq, arg_min(scope_id, seq) AS scope_id, arg_min(spiking, seq) AS spiking
               {"".join(f", arg_min({g}, seq) AS {g}" for g in groups)}, sum(pairs) AS gemm_pairs
        FROM ({events}) WHERE cell GROUP BY rank, first_seq
    ), cells AS (
        SELECT f.*, m.class_name, m.path, p.inputs,
               CASE WHEN list_has_any(m.mro, ['{LSTM_CELL}']) THEN 'lstm'
                    WHEN list_has_any(m.mro, ['{GRU_CELL}']) THEN 'gru' ELSE 'rnn' END AS kind,
               json_extract(m.attributes, '$.hidden_size')::BIGINT AS H,
               json_extract(m.attributes, '$.input_size')::BIGINT AS I,
               coalesce(json_extract(m.attributes, '$.bias')::BOOLEAN, true) AS has_bias,
               len(p.inputs) < 2 AS stateless
        FROM firsts f
        JOIN module_events p ON p.rank = f.rank AND p.seq = f.first_seq
        JOIN modules m ON m.rank = p.rank AND m.module_id = p.module_id
    ), biases AS (
        SELECT rank, parameter, arg_min(nnz = numel, first_seq) AS dense
        FROM tensors WHERE is_parameter GROUP BY ALL
    ), facts AS (
        SELECT c.*, x.numel // c.I AS B,
               CASE WHEN stateless THEN 0 ELSE h.nnz END AS h_nnz,
               CASE WHEN stateless OR kind <> 'lstm' THEN 0 ELSE s.nnz END AS c_nnz,
               has_bias AND coalesce(bi.dense, false) AS bias_ih_dense,
               has_bias AND coalesce(bh.dense, false) AS bias_hh_dense
        FROM cells c
        LEFT JOIN tensors x ON x.rank = c.rank AND x.tensor_id = c.inputs[1]
        LEFT JOIN tensors h ON h.rank = c.rank AND h.tensor_id = c.inputs[2]
        LEFT JOIN tensors s ON s.rank = c.rank AND s.tensor_id = c.inputs[3]
        LEFT JOIN biases bi ON bi.rank = c.rank AND bi.parameter = c.path || '.bias_ih'
        LEFT JOIN biases bh ON bh.rank = c.rank AND bh.parameter = c.path || '.bias_hh'
    )
    SELECT rank, first_seq, scope_id{keys}, spiking, class_name, kind, stateless, has_bias, gemm_pairs,
           CAST({_arms(EXTRA)} AS BIGINT) AS extra, CAST({_arms(DENSE)} AS BIGINT) AS dense,
           {_arms(EXACT)} AS exact,
           CASE WHEN H IS NULL OR I IS NULL THEN 'hidden_size/input_size attributes'
                WHEN B IS NULL THEN 'the shape of x' WHEN h_nnz IS NULL THEN 'nnz of h'
                WHEN c_nnz IS NULL THEN 'nnz of c' END AS missing
    FROM facts
    """


def notes(con, events: str) -> list[str]:
    """What a reader of the cell counts must know: gate terms that are bounds, calls without a
    state (NeuroBench 2.3.0 miscounts those), facts the trace lacks."""
    rows = con.execute(f"""
        SELECT class_name, kind, count(*) FILTER (WHERE NOT exact AND kind <> 'rnn') AS bounds,
               count(*) FILTER (WHERE stateless) AS stateless, bool_or(has_bias) AS has_bias,
               count(*) FILTER (WHERE missing IS NOT NULL) AS missing, any_value(missing) AS what
        FROM ({calls_sql(events, ())}) GROUP BY ALL ORDER BY class_name
    """).fetchall()
    lines = []
    for name, kind, bounds, stateless, has_bias, missing, what in rows:
        if bounds:
            lines.append(f"{name}: {bounds} calls have gate rows without a nonzero bias; their gate and state "
                         "products are counted as if every gate were nonzero (an upper bound)")
        if stateless:
            nb = ("raises on such a call (bias with no state) and reports SynapticOperations 0.0"
                  if has_bias and kind != "rnn" else "counts only the first sample's row of such a call")
            lines.append(f"{name}: {stateless} calls without a state, counted as with an explicit zero state; "
                         f"NeuroBench 2.3.0 {nb}")
        if missing:
            lines.append(f"{name}: {missing} calls lack {what}; their gate and state products are not counted")
    return lines
