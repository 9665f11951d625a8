"""Costing: NeuroMC activity x a preset -> SpikingJelly's NeuroMCRuntimeEnergyReport.

Per fragment: MAC energy = MACs x mac_cost_pj[core type]; extra compute = primitive counts
x extra_op_cost_pj; memory = sum over its terms of bits / bandwidth x cost per access (read
bandwidth and cost for rh2l/rl2h, write ones for wh2l/wl2h). Each kind of fragment (kinds.py)
is priced once, for all its parts: its counts and bits times the parts of that kind. The preset decides weight
reuse (a reuse stage's weights fit the core's weight SRAM: the weight loads are skipped)
and which levels/directions count (the zero_* flags). Work the preset cannot price (an
instance it lacks, a core or primitive without a cost) is reported in `uncosted`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np
import pandas as pd

from spiketrace.analyze.energy.breakdown import breakdown_frame, section
from spiketrace.analyze.energy.neuromc import rules as rules
from spiketrace.analyze.energy.neuromc.costs import Costs

UNCOSTED_COLUMNS = ("kind", "name", "calls", "input_elements", "output_elements", "bytes_read", "bytes_written",
                    "bits", "stages", "modules", "reason")


# The report's dict fields: SpikingJelly's (copied by its __post_init__) and spiketrace's.
UNCOSTED_WARNING = "some work is uncosted (report.uncosted lists each kind, its calls and why); the totals cover the rest"
DICT_FIELDS = ("energy_by_stage", "energy_by_op", "primitive_counts", "memory_bits_by_level", "energy_by_core_type",
               "energy_by_process_key", "energy_by_memory_level_dir", "counts_by_core_type", "counts_by_process_key",
               "energy_by_module", "energy_by_module_component", "energy_by_step", "energy_by_rank")


@dataclass
class Report:
    """SpikingJelly 2.0.0 NeuroMCRuntimeEnergyReport fields, then spiketrace's additions:
    energy_by_module (module path -> pJ) and uncosted (work no rule or preset prices, ranked)."""

    energy_total_pj: float = 0.0
    energy_compute_pj: float = 0.0
    energy_memory_pj: float = 0.0
    energy_by_stage: dict[str, float] = field(default_factory=dict)
    energy_by_op: dict[str, float] = field(default_factory=dict)
    primitive_counts: dict[str, Any] = field(default_factory=dict)
    memory_bits_by_level: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    energy_mac_pj: float = 0.0
    energy_base_memory_pj: float = 0.0
    energy_extra_memory_pj: float = 0.0
    energy_extra_compute_pj: float = 0.0
    energy_by_core_type: dict[str, float] = field(default_factory=dict)
    energy_by_process_key: dict[str, float] = field(default_factory=dict)
    energy_by_memory_level_dir: dict[str, dict[str, float]] = field(default_factory=dict)
    counts_by_core_type: dict[str, dict[str, int]] = field(default_factory=dict)
    counts_by_process_key: dict[str, dict[str, int]] = field(default_factory=dict)
    # SpikingJelly's mapping_summary (one dict per fragment) is built when first read: on a
    # long trace it is the largest part of the report (see the mapping_summary property)
    summary_source: tuple | list[dict[str, Any]] | None = field(default=None, repr=False, compare=False)
    model_info: dict[str, Any] | None = None
    memory_config: Costs | None = None
    energy_by_module: dict[str, float] = field(default_factory=dict)
    # module -> {component: pJ}: mac_pj, extra_compute_pj and one <level>_memory_pj per memory level
    energy_by_module_component: dict[str, dict[str, float]] = field(default_factory=dict)
    uncosted: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(UNCOSTED_COLUMNS)))
    energy_by_step: dict[str, float] = field(default_factory=dict)  # recorder step -> pJ; sums to the total
    energy_by_rank: dict[str, float] = field(default_factory=dict)  # rank -> pJ; sums to the total

    def __post_init__(self) -> None:
        # As SpikingJelly's report: its containers are the report's own (shallow copies) and None
        # stands for empty, so a caller's dicts are never shared with it or changed through it.
        for name in DICT_FIELDS:
            setattr(self, name, dict(getattr(self, name) or {}))
        self.warnings = list(self.warnings or [])

    @property
    def mapping_summary(self) -> list[dict[str, Any]]:
        """One entry per fragment (SpikingJelly's report field), built on first use."""
        if not isinstance(self.summary_source, list):
            activity, with_groups = self.summary_source or (None, False)
            rows = activity.fragment_rows() if activity is not None else pd.DataFrame()
            self.summary_source = mapping_summary(rows, with_groups=with_groups)
        return self.summary_source

    def to_frame(self) -> pd.DataFrame:
        """Tidy rows (analyze/energy/breakdown.py): total, component, stage, op, core_type,
        process_key, module, step, rank, memory (pJ, and bits in count), count, uncosted (calls)."""
        components = ("energy_compute_pj", "energy_memory_pj", "energy_mac_pj", "energy_extra_compute_pj",
                      "energy_base_memory_pj", "energy_extra_memory_pj")
        memory = [{"breakdown": "memory", "key": f"{level}.{direction}", "count": n,
                   "pj": self.energy_by_memory_level_dir.get(level, {}).get(direction)}
                  for level, directions in self.memory_bits_by_level.get("by_level_dir", {}).items()
                  for direction, n in directions.items()]
        return breakdown_frame(
            section("total", {"energy_total_pj": self.energy_total_pj}),
            section("component", {k: getattr(self, k) for k in components}),
            *(section(name, values) for name, values in (
                ("stage", self.energy_by_stage), ("op", self.energy_by_op), ("core_type", self.energy_by_core_type),
                ("process_key", self.energy_by_process_key), ("module", self.energy_by_module),
                ("step", self.energy_by_step), ("rank", self.energy_by_rank))),
            memory,
            section("count", self.primitive_counts.get("totals", {}), "count"),
            section("uncosted", ((f"{r.kind}:{r.name}", r.calls) for r in self.uncosted.itertuples()), "count"))

    def to_json(self) -> dict:
        document = {}
        for f in fields(self):  # in field order, mapping_summary where SpikingJelly has it
            if f.name == "summary_source":
                continue
            if f.name not in ("memory_config", "uncosted", "model_info"):
                document[f.name] = getattr(self, f.name)
            if f.name == "counts_by_process_key":
                document["mapping_summary"] = self.mapping_summary
        document["model_info"] = {k: list(v) if isinstance(v, tuple) else v for k, v in (self.model_info or {}).items()}
        if self.memory_config is not None:
            config = asdict(self.memory_config)
            config["level_order"] = list(config["level_order"])
            document["memory_config"] = config
        document["uncosted"] = self.uncosted.astype(object).where(self.uncosted.notna(), None).to_dict("records")
        return document


def _nested(frame: pd.DataFrame, outer: str, inner: str, value: str, cast) -> dict:
    return {str(k): {str(i): cast(v) for i, v in zip(g[inner], g[value])} for k, g in frame.groupby(outer, sort=False)}


def _memory_energy(activity, costs: Costs, parts: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(costed terms with pj, uncosted bits per instance) after the preset's reuse and flags:
    a term's bits and pj are those of one part of its kind, the uncosted bits those of all
    `parts` of each kind."""
    f, terms = activity.kinds, activity.memory
    specs = pd.DataFrame([asdict(s) for s in costs.memory_instances.values()],
                         columns=["name", "size_bits", "datawidth", "r_bw", "w_bw", "r_cost", "w_cost"]).set_index("name")
    fits = f["weight_bits"] <= f["weight_instance"].map(specs["size_bits"]).astype("float64")
    reused = (f["reuse_stage"] & fits.fillna(False)).to_numpy()
    kind = terms["kind"].to_numpy()
    drop = terms["weight_load"].to_numpy() & reused[kind] if len(terms) else pd.Series(dtype=bool)
    level, direction = terms["level"], terms["direction"]
    drop = drop | ((level == "dram") & costs.zero_dram_in_paper_energy) | ((level == "noc") & costs.zero_noc_in_paper_energy) \
        | ((level == "sram") & costs.zero_sram_high_directions & direction.isin(["rl2h", "wh2l"]))
    terms = terms[~drop].copy()
    read = terms["direction"].str.startswith("r").to_numpy(dtype=bool)
    # per instance, then per term by its instance's position (an unknown instance: NaN)
    codes, names = pd.factorize(terms["instance"])
    spec = specs.reindex(list(names))

    def per_term(read_field: str, write_field: str) -> np.ndarray:
        return np.where(read, np.append(spec[read_field].to_numpy(float), np.nan)[codes],
                        np.append(spec[write_field].to_numpy(float), np.nan)[codes])

    terms["pj"] = terms["bits"].to_numpy() / per_term("r_bw", "w_bw") * per_term("r_cost", "w_cost")
    unknown = terms[~terms["instance"].isin(specs.index)]
    missing = unknown.assign(bits=unknown["bits"].to_numpy() * parts[unknown["kind"].to_numpy()]).groupby(
        "instance", as_index=False, observed=True)["bits"].sum()
    return terms, missing


def _fragments_per(values: pd.Series, fragments: pd.DataFrame) -> dict:
    """value -> how many fragments (not parts: an optimizer fragment has one per module) have a
    part whose kind has that value; `values` holds one value per kind (NaN: none)."""
    codes, uniques = pd.factorize(values)
    of_part = codes[fragments["kind"].to_numpy()].astype(np.int64)
    ids = fragments["fragment_id"].to_numpy()[of_part >= 0]
    span = int(ids.max()) + 1 if len(ids) else 1
    distinct = np.unique(of_part[of_part >= 0] * span + ids)  # (value, fragment) pairs, each once
    return dict(zip(uniques, np.bincount(distinct // span, minlength=len(uniques)).tolist()))


def _uncosted(activity, missing: pd.DataFrame, f: pd.DataFrame, costs: Costs, parts: np.ndarray) -> pd.DataFrame:
    """`f`: the kinds with their counts summed over their parts; `parts`: parts per kind."""
    extra = []
    for r in missing.itertuples():
        extra.append({"kind": "memory_instance", "name": r.instance, "bits": int(r.bits),
                      "reason": "the preset has no such memory instance"})
    no_mac_cost = (f["mac_count"] > 0) & ~f["core_type"].isin(list(costs.mac_cost_pj))
    if no_mac_cost.any():
        fragments = _fragments_per(f["core_type"].where(no_mac_cost), activity.fragments)
        for core, group in f[no_mac_cost].groupby("core_type"):
            extra.append({"kind": "mac", "name": core, "calls": fragments[core],
                          "input_elements": int(group["mac_count"].sum()),
                          "reason": "the preset has no MAC cost for this core"})
    for primitive in rules.PRIMITIVES:
        if primitive not in costs.extra_op_cost_pj and f[primitive].sum() > 0:
            extra.append({"kind": "primitive", "name": primitive, "calls": int(parts[(f[primitive] > 0).to_numpy()].sum()),
                          "input_elements": int(f[primitive].sum()), "reason": "the preset has no cost for this primitive"})
    frame = pd.concat([activity.uncosted, pd.DataFrame(extra)], ignore_index=True) if extra else activity.uncosted.copy()
    for column in UNCOSTED_COLUMNS:
        if column not in frame:
            frame[column] = None
    for column in ("calls", "input_elements", "output_elements", "bytes_read", "bytes_written", "bits"):
        frame[column] = pd.to_numeric(frame[column]).round().astype("Int64")
    volume = frame[["bytes_read", "bytes_written"]].fillna(0).sum(axis=1) + frame["bits"].fillna(0) / 8
    return frame.assign(_v=volume).sort_values(["_v", "calls"], ascending=False, kind="stable")[
        list(UNCOSTED_COLUMNS)].reset_index(drop=True)


def cost(activity, costs: Costs, *, compat=None, strict: bool = False) -> Report:
    if strict:
        missing = costs.missing_instances()
        if missing:
            raise ValueError(f"Missing required NeuroMC memory instances: {missing}.")
        if activity.refusals:
            raise ValueError(activity.refusals[0])
    parts = activity.parts_per_kind()
    terms, missing = _memory_energy(activity, costs, parts)
    one = activity.kinds  # one part of each kind
    pj, priced = terms["pj"].to_numpy(), terms["pj"].notna().to_numpy()
    base = (terms["component"] == "base").to_numpy()
    by_kind = {component: np.bincount(terms["kind"].to_numpy()[priced & chosen], pj[priced & chosen],
                                      minlength=len(one)) for component, chosen in (("base", base), ("extra", ~base))}
    mac_pj = one["mac_count"] * one["core_type"].map(costs.mac_cost_pj).fillna(0.0) if len(one) else pd.Series(dtype=float)
    extra_pj = sum((one[p] * costs.extra_op_cost_pj.get(p, 0.0) for p in rules.PRIMITIVES), pd.Series(0.0, index=one.index))
    part_pj = (mac_pj + extra_pj + by_kind["base"] + by_kind["extra"]).to_numpy()
    # From here on a kind stands for all its parts: its counts and pJ times its parts, and
    # only the columns the breakdowns read, not a copy of every kind column.
    frame = one[["stage", "op_name", "core_type", "process_key", "module", "mac_count", *rules.PRIMITIVES]].assign(
        mac_count=one["mac_count"] * parts, **{p: one[p] * parts for p in rules.PRIMITIVES},
        mac_pj=mac_pj * parts, extra_compute_pj=extra_pj * parts, base_pj=by_kind["base"] * parts,
        extra_memory_pj=by_kind["extra"] * parts, pj=part_pj * parts)
    weight = parts[terms["kind"].to_numpy()]
    terms = terms.assign(bits=terms["bits"].to_numpy() * weight, pj=pj * weight)
    uncosted = _uncosted(activity, missing, frame, costs, parts)
    warnings = list(activity.warnings)
    if len(uncosted):
        # no count in the words: a trace's ranks costed apart (the dask engine) must add up to the
        # same warning, and the kinds one rank leaves uncosted may be another's too
        warnings.append(UNCOSTED_WARNING)
        if strict:
            raise ValueError(f"uncosted work: {uncosted.iloc[0]['kind']} {uncosted.iloc[0]['name']}")

    def energy_by(column):
        return {str(k): float(v) for k, v in frame.groupby(column, sort=False)["pj"].sum().items()}

    def counts_by(column):
        sums = frame.groupby(column, sort=False)[["mac_count", *rules.PRIMITIVES]].sum()
        fragments = _fragments_per(frame[column], activity.fragments)
        return {str(k): {"fragments": int(fragments[k]), "mac": int(values["mac_count"]),
                         **{p: int(values[p]) for p in rules.PRIMITIVES}} for k, values in sums.iterrows()}

    def primitives_by(column):
        sums = frame.groupby(column, sort=False)[list(rules.PRIMITIVES)].sum()
        return {str(k): {p: int(v) for p, v in values.items()} for k, values in sums.to_dict("index").items()}

    bits = terms.groupby(["level", "direction"], as_index=False, sort=False, observed=True)["bits"].sum()
    energy_terms = terms["pj"].groupby([terms["level"], terms["direction"]], sort=False, observed=True).sum(
        min_count=1).dropna().reset_index()  # only (level, direction) pairs with a priced term
    totals = {p: int(frame[p].sum()) for p in rules.PRIMITIVES} | {"mac": int(frame["mac_count"].sum())}
    energy_mac, energy_extra = float(frame["mac_pj"].sum()), float(frame["extra_compute_pj"].sum())
    energy_base, energy_extra_memory = float(frame["base_pj"].sum()), float(frame["extra_memory_pj"].sum())
    part_pj = part_pj[activity.fragments["kind"].to_numpy()]  # each fragment part's, for the steps and ranks
    return Report(
        energy_total_pj=energy_mac + energy_extra + energy_base + energy_extra_memory,
        energy_compute_pj=energy_mac + energy_extra,
        energy_memory_pj=energy_base + energy_extra_memory,
        energy_by_stage=energy_by("stage"),
        energy_by_op=energy_by("op_name"),
        primitive_counts={"totals": totals, "by_stage": primitives_by("stage"), "by_op": primitives_by("op_name")},
        memory_bits_by_level={
            "preset_name": costs.preset_name,
            "totals": {str(k): int(v) for k, v in bits.groupby("level", sort=False, observed=True)["bits"].sum().items()},
            "by_level_dir": _nested(bits, "level", "direction", "bits", int),
        },
        warnings=warnings,
        energy_mac_pj=energy_mac,
        energy_base_memory_pj=energy_base,
        energy_extra_memory_pj=energy_extra_memory,
        energy_extra_compute_pj=energy_extra,
        energy_by_core_type=energy_by("core_type"),
        energy_by_process_key=energy_by("process_key"),
        energy_by_memory_level_dir=_nested(energy_terms, "level", "direction", "pj", float),
        counts_by_core_type=counts_by("core_type"),
        counts_by_process_key=counts_by("process_key"),
        summary_source=(activity, activity.compat != "spikingjelly"),
        model_info=dict(rules.MODEL_INFO),
        memory_config=costs,
        energy_by_module={str(k): float(v) for k, v in frame.groupby("module", sort=False)["pj"].sum().items()},
        energy_by_module_component=_module_components(frame, terms),
        uncosted=uncosted,
        energy_by_step=_by_integer(part_pj, activity.fragments["step"]),
        energy_by_rank=_by_integer(part_pj, activity.fragments["rank"]),
    )


def _by_integer(pj: np.ndarray, keys: pd.Series) -> dict[str, float]:
    """pJ per fragment step or rank (every fragment, optimizer ones included, has both), in order."""
    return {str(int(k)): float(v) for k, v in pd.Series(pj, index=keys.index).groupby(keys).sum().items()}


def _module_components(frame: pd.DataFrame, terms: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per module: compute (MAC, extra primitives) and memory energy by level."""
    if not len(frame):
        return {}
    parts = [frame.groupby("module", sort=False)[["mac_pj", "extra_compute_pj"]].sum().stack()]
    priced = terms["pj"].notna().to_numpy()
    if priced.any():  # summed per (module of the term's fragment, level) code pair: no text per term
        module_codes, modules = pd.factorize(frame["module"].reset_index(drop=True))
        level_codes, levels = pd.factorize(terms["level"])
        pair = module_codes[terms["kind"].to_numpy()[priced]] * len(levels) + level_codes[priced]
        sums = np.bincount(pair, terms["pj"].to_numpy()[priced])
        pairs, first = np.unique(pair, return_index=True)
        parts.append({(modules[p // len(levels)], f"{levels[p % len(levels)]}_memory_pj"): sums[p]
                      for p in pairs[np.argsort(first, kind="stable")]})
    result: dict[str, dict[str, float]] = {}
    for part in parts:
        for (module, component), pj in part.items():
            result.setdefault(str(module), {})[str(component)] = float(pj)
    return result


def mapping_summary(f: pd.DataFrame, *, with_groups: bool) -> list[dict[str, Any]]:
    """One entry per fragment (optimizer parts summed), SpikingJelly's keys; `G` joins the
    loop dims outside compat mode."""
    if not len(f):
        return []
    first = ["stage", "phase", "op_name", "core_type", "process_key", "input_precision_bits", "weight_precision_bits",
             "output_precision_bits", "B", "T", "C", "OY", "OX", "FY", "G", "b_type", "t_type", "source",
             "optimizer_has_momentum", "optimizer_has_weight_decay", "optimizer_has_momentum_buffer", "order"]
    grouped = f.groupby("fragment_id", sort=False)
    summary = grouped[first].first().join(grouped[["K", "FX", "mac_count"]].sum()).sort_values("order", kind="stable")
    dims = [*rules.LOOP_DIMS, *(["G"] if with_groups else [])]
    # Whole columns as Python values (int, bool, str), then one dict per fragment: no per-row pandas.
    column = {c: summary[c].astype(object if c in ("stage", "phase", "op_name", "core_type", "process_key", "source")
                                   else bool if c.startswith("optimizer_") else "int64").tolist()
              for c in summary.columns if c != "order"}
    names = ("stage", "phase", "op_name", "core_type", "process_key", "input_precision_bits", "weight_precision_bits",
             "output_precision_bits")
    flags = ("optimizer_has_momentum", "optimizer_has_weight_decay", "optimizer_has_momentum_buffer")
    rows = zip(*(column[c] for c in names), zip(*(column[d] for d in dims)), column["b_type"], column["t_type"],
               column["mac_count"], column["source"], *(column[c] for c in flags))
    return [{**dict(zip(names, r[:8])), "loop_dims": dict(zip(dims, r[8])), "b_type": r[9], "t_type": r[10],
             "mac_count": r[11], "source": r[12], **dict(zip(flags, r[13:]))} for r in rows]
