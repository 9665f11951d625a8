-- energy_by_stage: how much energy does each stage (forward / backward / optimizer) take?
-- From the registered `energy` table (one model under one preset): pJ and share per stage.
SELECT model, preset, key AS stage, pj, pj / nullif(sum(pj) OVER (PARTITION BY model, preset), 0) AS share
FROM energy WHERE breakdown = 'stage'
