-- collective_traffic: how much does each rank communicate, in which collectives and stages?
-- One row per (rank, stage, phase, kind, group_size) of the `collectives` table (one row per
-- c10d or functional collective: DDP's allreduce, FSDP's allgather and reduce_scatter, ...);
-- empty for a single-process trace. calls, and the recorder steps they ran in;
-- input_bytes: what this rank hands to the collective (for in-place kinds, the tensors it
-- reduces or broadcasts); output_bytes: what the collective writes on this rank. DDP's
-- allreduce input per step is its gradient bytes: every parameter's, in buckets.
-- bus_bytes: what this rank moves over its link under a bandwidth-optimal (ring) algorithm
-- with n = group_size ranks, NCCL-tests' bus-bandwidth convention: allreduce 2(n-1)/n of its
-- input, allgather (n-1)/n of its output (the gathered whole), reduce_scatter and alltoall
-- (n-1)/n of their input, broadcast, reduce and send their input, recv its output, barrier 0;
-- NULL for gather and scatter (no agreed convention), and where the factor needs n but the
-- group size is unknown.
SELECT c.rank, e.stage, e.phase, c.kind, c.group_size,
       count(*) AS calls,
       count(DISTINCT e.step) AS steps,
       sum(c.input_bytes)::BIGINT AS input_bytes,
       sum(c.output_bytes)::BIGINT AS output_bytes,
       round(sum(CASE c.kind
           WHEN 'allreduce' THEN 2.0 * (c.group_size - 1) / c.group_size * c.input_bytes
           WHEN 'allgather' THEN (c.group_size - 1) / c.group_size * c.output_bytes
           WHEN 'reduce_scatter' THEN (c.group_size - 1) / c.group_size * c.input_bytes
           WHEN 'alltoall' THEN (c.group_size - 1) / c.group_size * c.input_bytes
           WHEN 'broadcast' THEN c.input_bytes
           WHEN 'reduce' THEN c.input_bytes
           WHEN 'send' THEN c.input_bytes
           WHEN 'recv' THEN c.output_bytes
           WHEN 'barrier' THEN 0
       END))::BIGINT AS bus_bytes
FROM collectives c
JOIN events e ON e.rank = c.rank AND e.seq = c.seq
GROUP BY ALL
