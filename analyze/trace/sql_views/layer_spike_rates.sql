-- layer_spike_rates: how often does each layer fire?
-- One row per (rank, layer (a leaf module or a stateful neuron), stage): over the module's forward calls whose first output is
-- binary (all values 0 or 1, from the captured nnz/is01), the ones, the elements and their
-- ratio. Modules that never emit a binary output are absent. A forward that activation
-- checkpointing recomputes during backward (module_events.recompute) repeats a call already
-- counted: left out, so each forward call is counted once.
SELECT post.rank, coalesce(m.tracker_name, m.path) AS scope, m.path, m.class_name, post.stage,
       count(*) AS calls,
       sum(t.nnz)::BIGINT AS ones,
       sum(t.numel)::BIGINT AS elements,
       sum(t.nnz) / sum(t.numel) AS spike_rate
FROM module_events post
JOIN modules m ON m.rank = post.rank AND m.module_id = post.module_id
JOIN tensor_states t ON t.rank = post.rank AND t.tensor_id = post.outputs[1]
WHERE post.kind = 'forward_post' AND NOT coalesce(post.recompute, false)
  AND (m.is_leaf OR list_contains(json_keys(m.attributes), '$memories')) AND t.is01 AND t.numel > 0
GROUP BY ALL
