-- training_spike_rates: how does the network's firing change over training steps?
-- One row per (rank, recorder step): over the forward calls of leaf layers and stateful
-- neurons whose output is binary (spikes), the fraction of ones (sum nnz / sum numel) and how
-- many calls it averages. A layer passing spikes on unchanged (Flatten) counts like the
-- neuron before it: the rate is that of the binary outputs, layer by layer. Forward calls
-- that activation checkpointing recomputes during backward are left out (a repeat).
SELECT post.rank, post.step, count(*) AS calls, sum(o.nnz)::BIGINT AS ones, sum(o.numel)::BIGINT AS elements,
       sum(o.nnz) / sum(o.numel) AS rate
FROM module_events post
JOIN modules m ON m.rank = post.rank AND m.module_id = post.module_id
JOIN tensor_states o ON o.rank = post.rank AND o.tensor_id = post.outputs[1]
WHERE post.kind = 'forward_post' AND NOT coalesce(post.recompute, false)
  AND (m.is_leaf OR list_contains(json_keys(m.attributes), '$memories'))
  AND o.is01 AND o.numel > 0
GROUP BY post.rank, post.step
ORDER BY post.rank, post.step
