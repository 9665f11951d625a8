-- energy_by_component: compute or memory: where does the energy go?
-- From the registered `energy` table: every breakdown the model reports other than stage,
-- step, rank and module (component for compute; core type, process key, memory level and direction for
-- NeuroMC; ...), with its share of the model's total.
WITH totals AS (
    SELECT model, preset, max(pj) AS total FROM energy WHERE key IN ('energy_total_pj', 'total_pj') GROUP BY ALL
)
SELECT e.model, e.preset, e.breakdown, e.key, e.pj, e.pj / nullif(t.total, 0) AS share
FROM energy e JOIN totals t USING (model, preset)
WHERE e.breakdown NOT IN ('stage', 'step', 'rank', 'module', 'total', 'count') AND e.pj IS NOT NULL
