"""NeuroMC totals under many presets at once: one activity, N presets, a few matrix products.

NeuroMC energy is linear in the preset once its one structural decision is made: a
weight-reusing stage skips its weight loads when the weight fits the SRAM instance. So the
activity's memory bits are summed once per (reuse group, instance, read/write) — a reuse
group being the kinds of fragment that share a weight instance and weight size, each kind's
bits those of all its parts — and each preset
is a row of pJ-per-bit ratios (cost / bandwidth) and a row of "fits" flags:

    memory[p] = sum_g keep[p, g] * (ratio[p, :] @ bits[g, :])

with keep = 1 for terms no reuse can drop and 1 - fits for the others. Compute is
mac_count per core type and primitive counts times their costs. The result equals
neuromc_report.cost preset by preset (tests/test_neuromc_sweep.py); 10,000 presets take
milliseconds (benchmarks/recost_throughput.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict

import numpy as np
import pandas as pd

from spiketrace.analyze.energy.neuromc import rules as rules
from spiketrace.analyze.energy.neuromc.costs import Costs

INSTANCE_FIELDS = ("size_bits", "r_bw", "w_bw", "r_cost", "w_cost")


def _kept_terms(activity, costs: Costs) -> pd.DataFrame:
    """The memory terms the preset's level flags keep (the flags are not swept)."""
    terms = activity.memory
    level, direction = terms["level"], terms["direction"]
    drop = ((level == "dram") & costs.zero_dram_in_paper_energy) | ((level == "noc") & costs.zero_noc_in_paper_energy) \
        | ((level == "sram") & costs.zero_sram_high_directions & direction.isin(["rl2h", "wh2l"]))
    return terms[~drop]


# The keys sweep_totals costs in bulk; recost costs other sweeps preset by preset.
SWEEPABLE = (*(f"memory_instances.*.{f}" for f in INSTANCE_FIELDS), "mac_cost_pj.*", "extra_op_cost_pj.*")


def sweep_totals(activity, base: Costs, values: Mapping[str, np.ndarray], *, compat=None) -> pd.DataFrame:
    """energy_total_pj, energy_compute_pj and energy_memory_pj for each index of `values`
    (dotted keys -> equal-length arrays: memory_instances.<name>.<field>, mac_cost_pj.<core>,
    extra_op_cost_pj.<primitive>), every other parameter from `base`."""
    n = len(next(iter(values.values()))) if values else 1
    names = list(base.memory_instances)
    specs = {f: np.tile(np.array([float(asdict(base.memory_instances[i])[f]) for i in names]), (n, 1))
             for f in INSTANCE_FIELDS}
    cores, primitives = list(rules.CORE_TYPES), list(rules.PRIMITIVES)
    mac_cost = np.tile([float(base.mac_cost_pj.get(c, 0.0)) for c in cores], (n, 1))
    op_cost = np.tile([float(base.extra_op_cost_pj.get(p, 0.0)) for p in primitives], (n, 1))
    for key, column in values.items():
        column = np.asarray(column, dtype=float)
        table, _, rest = key.partition(".")
        if table == "memory_instances":
            instance, _, field = rest.rpartition(".")
            if instance not in names or field not in INSTANCE_FIELDS:
                raise ValueError(f"cannot sweep {key!r}: {instance!r} is not an instance of the base or "
                                 f"{field!r} is not one of {', '.join(INSTANCE_FIELDS)}")
            specs[field][:, names.index(instance)] = column
        elif table == "mac_cost_pj" and rest in cores:
            mac_cost[:, cores.index(rest)] = column
        elif table == "extra_op_cost_pj" and rest in primitives:
            op_cost[:, primitives.index(rest)] = column
        else:
            raise ValueError(f"cannot sweep {key!r} in bulk (memory_instances.*, mac_cost_pj.*, extra_op_cost_pj.*)")

    f, parts = activity.kinds, activity.parts_per_kind()
    # reuse groups: kinds whose weight loads a fitting weight makes unnecessary
    reusable = f["reuse_stage"].to_numpy(bool) & f["weight_instance"].isin(names).to_numpy()
    group_keys = pd.MultiIndex.from_arrays([f["weight_instance"].where(reusable), f["weight_bits"].where(reusable)])
    codes, uniques = pd.factorize(group_keys)
    n_groups = len(uniques)
    kind_group = np.where(reusable, codes, n_groups)  # n_groups = "never dropped"
    terms = _kept_terms(activity, base)
    terms = terms[terms["instance"].isin(names)]
    kind = terms["kind"].to_numpy()
    group = np.where(terms["weight_load"].to_numpy(bool), kind_group[kind], n_groups)
    column = terms["instance"].map({name: i for i, name in enumerate(names)}).to_numpy(dtype=int) * 2 \
        + (~terms["direction"].astype(str).str.startswith("r").to_numpy(dtype=bool)).astype(int)
    bits = np.zeros((n_groups + 1, 2 * len(names)))
    np.add.at(bits, (group, column), terms["bits"].to_numpy(float) * parts[kind])

    ratio = np.empty((n, 2 * len(names)))
    ratio[:, 0::2] = specs["r_cost"] / specs["r_bw"]
    ratio[:, 1::2] = specs["w_cost"] / specs["w_bw"]
    per_group = ratio @ bits.T  # (n, groups + 1)
    keep = np.ones((n, n_groups + 1))
    for g, (instance, weight_bits) in enumerate(uniques):
        if not isinstance(instance, str):  # the (missing, missing) key of non-reusable rows: never dropped
            continue
        keep[:, g] = ~(weight_bits <= specs["size_bits"][:, names.index(instance)])
    memory = (keep * per_group).sum(axis=1)
    mac_counts = (f["mac_count"] * parts).groupby(f["core_type"]).sum()
    compute = mac_cost @ np.array([float(mac_counts.get(c, 0)) for c in cores]) \
        + op_cost @ np.array([float((f[p] * parts).sum()) for p in primitives])
    return pd.DataFrame({"energy_total_pj": compute + memory, "energy_compute_pj": compute, "energy_memory_pj": memory})
