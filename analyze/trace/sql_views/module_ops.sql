-- module_ops: how many ops, and how many tensor bytes, each module scope ran per phase?
-- One row per (rank, scope, phase). Ops are attributed as SpikingJelly attributes counts: to
-- every scope in the tracker's parents at that op, so a scope includes its sub-modules and
-- "Global" holds everything. depth: 0 for Global, 1 for the root module, +1 per level.
-- (Ops are summed per tracker state first, then spread over its parents: a few rows to
-- expand instead of one per op and parent.)
WITH event_bytes AS (
    SELECT u.rank, u.seq, sum(t.numel * t.element_size) AS bytes
    FROM event_tensors u JOIN tensor_states t ON t.rank = u.rank AND t.tensor_id = u.tensor_id
    GROUP BY u.rank, u.seq
),
per_state AS (
    SELECT e.rank, e.scope_id, coalesce(e.phase, 'unlabeled') AS phase, count(*) AS ops, sum(b.bytes) AS bytes
    FROM events e LEFT JOIN event_bytes b ON b.rank = e.rank AND b.seq = e.seq
    GROUP BY ALL
)
SELECT o.rank, p.scope,
       CASE WHEN p.scope = 'Global' THEN 0 ELSE len(string_split(p.scope, '.')) END AS depth,
       o.phase,
       sum(o.ops)::BIGINT AS ops,
       coalesce(sum(o.bytes), 0)::BIGINT AS tensor_bytes
FROM per_state o
JOIN scopes s ON s.rank = o.rank AND s.scope_id = o.scope_id, UNNEST(s.parents) AS p(scope)
GROUP BY ALL
