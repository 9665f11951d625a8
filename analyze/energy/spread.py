"""The spread of a per-sample quantity over the batches of a test set: its mean, its standard
deviation across batches and a 95% confidence interval of the mean (Student's t).

Each batch b holds n_b samples and a total E_b (energy, operations). Its per-sample value is
e_b = E_b / n_b. The mean is the set's own per-sample value, sum(E_b) / sum(n_b) (so a
smaller last batch weighs by its samples); the standard deviation is that of the batches'
e_b (ddof 1: the batches are the observations); the interval is mean -+ t(0.975, B - 1) *
std / sqrt(B) over B batches. One batch has no spread: std and interval are None.
"""

from __future__ import annotations

import math

import numpy as np

# Student's t 0.975 quantile for 1..30 degrees of freedom (scipy.stats.t.ppf, 6 decimals).
T_975 = (12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004, 2.262157, 2.228139,
         2.200985, 2.178813, 2.160369, 2.144787, 2.13145, 2.119905, 2.109816, 2.100922, 2.093024, 2.085963,
         2.079614, 2.073873, 2.068658, 2.063899, 2.059539, 2.055529, 2.051831, 2.048407, 2.04523, 2.042272)
_Z_975 = 1.959963984540054


def t_975(degrees: int) -> float:
    """Student's t 0.975 quantile: the table to 30 degrees of freedom, then the Cornish-Fisher
    expansion in 1/degrees (four terms: within 1e-6 of the exact value beyond 30)."""
    if degrees < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {degrees}")
    if degrees <= len(T_975):
        return T_975[degrees - 1]
    z, n = _Z_975, float(degrees)
    return (z + (z**3 + z) / (4 * n) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * n**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * n**3)
            + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * n**4))


def spread(totals, samples) -> dict[str, float | int | None]:
    """{mean, std, ci95_low, ci95_high, batches} of the per-sample value of batches with
    `totals` and `samples` (equal-length sequences; batches of 0 samples are left out)."""
    totals, samples = np.asarray(totals, dtype=float), np.asarray(samples, dtype=float)
    kept = samples > 0
    totals, samples = totals[kept], samples[kept]
    batches = int(len(samples))
    if not batches:
        return {"mean": None, "std": None, "ci95_low": None, "ci95_high": None, "batches": 0}
    mean = float(totals.sum() / samples.sum())
    if batches == 1:
        return {"mean": mean, "std": None, "ci95_low": None, "ci95_high": None, "batches": 1}
    std = float(np.std(totals / samples, ddof=1))
    half = t_975(batches - 1) * std / math.sqrt(batches)
    return {"mean": mean, "std": std, "ci95_low": mean - half, "ci95_high": mean + half, "batches": batches}
