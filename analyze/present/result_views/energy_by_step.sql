-- energy_by_step: how does the energy change over the recorded training steps?
-- From the registered `energy` table: pJ and share per recorder step (Recorder.step()), for
-- the models that split their energy by step (compute, neuromc, spikesim, lemaire in the
-- spikingjelly convention; Qualia's convention prices per inference from pooled spike rates,
-- so it has no per-step energy and this view is empty for it). Steps add up to the total.
SELECT model, preset, CAST(key AS INTEGER) AS step, pj,
       pj / nullif(sum(pj) OVER (PARTITION BY model, preset), 0) AS share
FROM energy WHERE breakdown = 'step'
