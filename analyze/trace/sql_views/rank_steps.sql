-- rank_steps: is every rank and step doing the same amount of work?
-- One row per (rank, step): ops per phase and in all, and the stages seen.
SELECT rank, step,
       count(*) FILTER (WHERE phase = 'forward') AS forward_ops,
       count(*) FILTER (WHERE phase = 'backward') AS backward_ops,
       count(*) FILTER (WHERE phase = 'optimizer') AS optimizer_ops,
       count(*) FILTER (WHERE phase IS NULL) AS unlabeled_ops,
       count(*) AS ops,
       list(DISTINCT stage ORDER BY stage) AS stages
FROM events
GROUP BY rank, step
