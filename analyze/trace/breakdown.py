"""Per-module breakdown of a trace: ops attributed to each scope, and spike rates.

Ops are attributed the way SpikingJelly attributes counts: to every name in the tracker's
`parents` at that op (so a parent's count includes its children's). The spike rate of a
module is the fraction of ones in its binary forward outputs, over the whole trace, each
forward call once (a forward recomputed by activation checkpointing is not counted again;
its ops are, in the backward phase, where they ran).
"""

from __future__ import annotations

import pandas as pd

MODULE_BREAKDOWN_QUERY = """
WITH scope_ops AS (
    SELECT p.scope, coalesce(e.phase, 'unlabeled') AS phase, count(*) AS ops
    FROM events e JOIN scopes s USING (scope_id, rank), UNNEST(s.parents) AS p(scope)
    GROUP BY ALL
),
by_scope AS (
    PIVOT scope_ops ON phase IN ('forward', 'backward', 'optimizer', 'unlabeled') USING sum(ops) GROUP BY scope
),
outputs AS (
    SELECT me.module_id, me.rank, UNNEST(me.outputs) AS tensor_id
    FROM module_events me WHERE me.kind = 'forward_post' AND NOT coalesce(me.recompute, false)
),
spikes AS (
    SELECT coalesce(m.tracker_name, m.path) AS scope,
           sum(t.nnz) FILTER (WHERE t.is01) AS ones,
           sum(t.numel) FILTER (WHERE t.is01) AS binary_elements
    FROM outputs o JOIN tensors t USING (tensor_id, rank) JOIN modules m USING (module_id, rank)
    GROUP BY ALL
)
SELECT b.scope,
       coalesce(b.forward, 0)::BIGINT AS forward_ops, coalesce(b.backward, 0)::BIGINT AS backward_ops,
       coalesce(b.optimizer, 0)::BIGINT AS optimizer_ops, coalesce(b.unlabeled, 0)::BIGINT AS unlabeled_ops,
       round(s.ones / nullif(s.binary_elements, 0), 4) AS spike_rate
FROM by_scope b LEFT JOIN spikes s USING (scope)
ORDER BY b.scope = 'Global' DESC, b.scope
"""


def module_breakdown(trace) -> pd.DataFrame:
    """One row per scope name: ops by phase (SpikingJelly attribution) and output spike rate."""
    return trace.sql(MODULE_BREAKDOWN_QUERY)
