-- step_spike_rates: how does each layer's firing evolve over the time steps?
-- One row per (rank, layer (a leaf module or a stateful neuron), time_step), over forward calls whose output is binary.
-- A single-step module (step_mode 's' or none) is called once per time step: time_step is
-- the call's position among that module's forward calls within the same recorder step.
-- A multi-step module (step_mode 'm') sees the whole sequence in one call; its output is
-- the `stack` of its per-step outputs (SpikingJelly's multi_step_forward), so time_step t
-- is the t-th stacked tensor, whose nnz the trace holds. When no such stack is found (a
-- fused neuron kernel), the call gives one row with time_step NULL: the sequence average.
-- Forward calls that activation checkpointing recomputes during backward are left out: they
-- repeat a time step already counted (and would otherwise shift the positions).
WITH calls AS (
    SELECT post.rank, post.module_id, post.step, pre.seq AS pre_seq, post.seq AS post_seq,
           post.outputs[1] AS out_id, m.attributes->>'step_mode' = 'm' AS multi_step,
           row_number() OVER (PARTITION BY post.rank, post.module_id, post.step ORDER BY post.seq) - 1 AS position
    FROM module_events post
    JOIN module_events pre ON pre.rank = post.rank AND pre.module_id = post.module_id
         AND pre.call_index = post.call_index AND pre.kind = 'forward_pre'
    JOIN modules m ON m.rank = post.rank AND m.module_id = post.module_id
    WHERE post.kind = 'forward_post' AND NOT coalesce(post.recompute, false)
      AND (m.is_leaf OR list_contains(json_keys(m.attributes), '$memories'))
),
binary_calls AS (
    SELECT c.*, o.nnz, o.numel, o.storage_ptr, o.shape
    FROM calls c JOIN tensor_states o ON o.rank = c.rank AND o.tensor_id = c.out_id
    WHERE o.is01 AND o.numel > 0
),
stacked AS (  -- per-step outputs of multi-step calls: the items of the stack that is the output
    SELECT c.rank, c.module_id, c.post_seq, u.item AS time_step, t.nnz, t.numel
    FROM binary_calls c  -- the stack ops inside the call, matched within its recorder step: a
    -- join on rank alone with seq ranges would compare every call with every stack op of the rank
    JOIN events e ON e.rank = c.rank AND e.step = c.step AND e.seq > c.pre_seq AND e.seq < c.post_seq
         AND e.op = 'aten.stack.default'
    JOIN event_tensors eo ON eo.rank = e.rank AND eo.seq = e.seq AND eo.role = 'out'
    JOIN tensor_states so ON so.rank = eo.rank AND so.tensor_id = eo.tensor_id
         AND so.storage_ptr = c.storage_ptr AND so.shape = c.shape
    JOIN event_tensors u ON u.rank = e.rank AND u.seq = e.seq AND u.role = 'arg'
    JOIN tensor_states t ON t.rank = u.rank AND t.tensor_id = u.tensor_id
    WHERE c.multi_step
),
per_step AS (
    SELECT rank, module_id, position AS time_step, nnz, numel FROM binary_calls WHERE NOT coalesce(multi_step, false)
    UNION ALL
    SELECT rank, module_id, time_step, nnz, numel FROM stacked
    UNION ALL
    SELECT c.rank, c.module_id, NULL, c.nnz, c.numel FROM binary_calls c
    WHERE c.multi_step AND NOT EXISTS (
        SELECT 1 FROM stacked s WHERE s.rank = c.rank AND s.module_id = c.module_id AND s.post_seq = c.post_seq)
)
SELECT p.rank, coalesce(m.tracker_name, m.path) AS scope, m.class_name, p.time_step,
       count(*) AS calls,
       sum(p.nnz)::BIGINT AS ones,
       sum(p.numel)::BIGINT AS elements,
       sum(p.nnz) / sum(p.numel) AS spike_rate
FROM per_step p JOIN modules m ON m.rank = p.rank AND m.module_id = p.module_id
GROUP BY ALL
