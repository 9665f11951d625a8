-- step_spike_rates: how does each layer's firing evolve over the time steps?
-- One row per (rank, module, time_step). A single-step module (step_mode 's' or none) is
-- called once per time step: time_step is the call's position among that module's forward
-- calls within the same recorder step (0, 1, ...). A multi-step module (step_mode 'm') sees
-- the whole sequence in one call: its binary output's nnz covers all T steps, so time_step
-- is NULL and the row is the average over the sequence.
WITH calls AS (
    SELECT post.rank, post.module_id, post.step, post.outputs[1] AS out_id,
           row_number() OVER (PARTITION BY post.rank, post.module_id, post.step ORDER BY post.seq) - 1 AS position
    FROM module_events post WHERE post.kind = 'forward_post'
)
SELECT c.rank, coalesce(m.tracker_name, m.path) AS scope, m.class_name,
       CASE WHEN m.attributes->>'step_mode' = 'm' THEN NULL ELSE c.position END AS time_step,
       count(*) AS calls,
       sum(t.nnz)::BIGINT AS ones,
       sum(t.numel)::BIGINT AS elements,
       sum(t.nnz) / sum(t.numel) AS spike_rate
FROM calls c
JOIN modules m ON m.rank = c.rank AND m.module_id = c.module_id
JOIN tensor_states t ON t.rank = c.rank AND t.tensor_id = c.out_id
WHERE t.is01 AND t.numel > 0
GROUP BY ALL
