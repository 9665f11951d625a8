-- stage_summary: what did each stage (forward / backward / optimizer / ...) run?
-- One row per (rank, stage, phase): stage instances, steps they occur in, ops, distinct op
-- kinds, and the ops' tensor bytes (inputs and outputs, dense).
WITH event_bytes AS (
    SELECT u.rank, u.seq, sum(t.numel * t.element_size) AS bytes
    FROM event_tensors u JOIN tensor_states t ON t.rank = u.rank AND t.tensor_id = u.tensor_id
    GROUP BY u.rank, u.seq
)
SELECT e.rank, e.stage, coalesce(e.phase, 'unlabeled') AS phase,
       count(DISTINCT e.stage_id) AS instances,
       count(DISTINCT e.step) AS steps,
       count(*) AS ops,
       count(DISTINCT e.op) AS distinct_ops,
       coalesce(sum(b.bytes), 0)::BIGINT AS tensor_bytes
FROM events e LEFT JOIN event_bytes b ON b.rank = e.rank AND b.seq = e.seq
GROUP BY ALL
