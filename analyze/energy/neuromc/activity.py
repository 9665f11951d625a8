"""Preset-independent activity of NeuroMC fragments: primitive counts and bits moved.

`extra_counts` gives the mux/add/mul/comp/sqrt counts of each fragment (SpikingJelly's
`_extra_counts`), `memory_terms` the bits each fragment moves per memory level, direction
and instance (`_map_base_memory` and `_extra_memory_for_fragment`), one vectorised column
operation per rule of rules.py. They read a fragment's columns only, not its place in the
run, so they run once per kind of fragment (kinds.py). Nothing here reads a preset: the one
decision that depends on it (skip the weight loads when a reuse stage's weights fit the
weight SRAM) is left to the costing, so the weight-load terms are flagged and each fragment
carries its weight bits and the instance that must hold them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from spiketrace.analyze.energy.neuromc import rules as rules


def _scalar_counts(f: pd.DataFrame) -> dict[str, pd.Series]:
    optimizer = f["process_key"] == "with_opt"
    return {
        "OKBT": f["OY"] * f["OX"] * f["K"] * f["B"] * f["T"],
        "OCBT": f["OY"] * f["OX"] * f["C"] * f["B"] * f["T"],
        "CT": f["C"] * f["T"],
        "KT": f["K"].where(optimizer, f["K"] * f["T"]),
        "FYFXKC": (f["FY"] * f["FX"] * f["C"]).where(optimizer, f["FY"] * f["FX"] * f["K"] * f["C"]),
    }


def _sgd_flags(f: pd.DataFrame):
    sgd = (f["process_key"] == "with_opt") & (f["op_name"] == "sgd")
    parameters = f["K"] + f["FX"] * f["FY"] * f["C"]
    return sgd, parameters


def extra_counts(f: pd.DataFrame) -> pd.DataFrame:
    """mux, add, mul, comp, sqrt per fragment row."""
    s = _scalar_counts(f)
    okbt, ocbt, ct, kt, fyfxkc = s["OKBT"], s["OCBT"], s["CT"], s["KT"], s["FYFXKC"]
    forward = f["phase"] == "forward"
    soma, bn = f["process_key"] == "with_sg", f["process_key"] == "with_bn"
    soma_f, soma_b = soma & forward, soma & ~forward
    bn_f, bn_b = bn & forward, bn & ~forward & (f["conv_type"] != "without_bp_bn")
    adam = (f["process_key"] == "with_opt") & f["op_name"].isin(["adam", "adamw"])
    sgd, parameters = _sgd_flags(f)
    sgd_copies = sgd * (1 + f["optimizer_has_weight_decay"].astype(int)
                        + (f["optimizer_has_momentum"] & f["optimizer_has_momentum_buffer"]).astype(int))

    def i(mask):  # a 0/1 selector
        return mask.astype("int64")

    return pd.DataFrame({
        "mux": okbt * i(soma_f) + ocbt * i(soma_b),
        "add": okbt * i(soma_f) + 2 * ocbt * i(soma_b) + (3 * okbt + 2 * kt) * i(bn_f) + 7 * ocbt * i(bn_b)
               + (8 * kt + 4 * fyfxkc) * i(adam) + parameters * sgd_copies,
        "mul": okbt * i(soma_f) + 4 * ocbt * i(soma_b) + (3 * okbt + 4 * kt) * i(bn_f) + (3 * ocbt + 22 * ct) * i(bn_b)
               + (22 * kt + 11 * fyfxkc) * i(adam) + parameters * sgd_copies,
        "comp": 3 * okbt * i(soma_f),
        "sqrt": kt * i(bn_f) + (2 * kt + fyfxkc) * i(adam),
    }, index=f.index).astype("int64")


class _Terms:
    """Collects memory terms as numpy column chunks and builds one frame at the end. Terms of
    zero or negative bits are dropped as they come, and the text columns are kept as codes
    (the frame's are categorical): there are ten or so terms per kind of fragment."""

    def __init__(self) -> None:
        self.chunks: list[tuple] = []
        self.labels: dict[str, int] = {}

    def _code(self, label) -> int:
        return self.labels.setdefault(label, len(self.labels))

    def add(self, rows: np.ndarray, component: str, level: str, direction: str, instance, bits, weight_load: bool) -> None:
        bits = np.broadcast_to(np.asarray(bits, dtype=np.int64), (len(rows),))
        keep = bits > 0
        if not keep.any():
            return
        rows, bits = rows[keep], bits[keep]
        if isinstance(instance, str):
            instances = np.full(len(rows), self._code(instance), dtype=np.int32)
        else:
            codes, labels = pd.factorize(np.asarray(instance, dtype=object)[keep])
            lookup = np.array([self._code(label) for label in labels] + [-1], dtype=np.int32)
            instances = lookup[codes]  # a missing instance (code -1) stays missing
        self.chunks.append((rows, self._code(component), self._code(level), self._code(direction), instances, bits,
                            weight_load))

    def frame(self) -> pd.DataFrame:
        if not self.chunks:
            return pd.DataFrame({c: pd.Series(dtype=t) for c, t in zip(
                MEMORY_COLUMNS, ("int64", "object", "object", "object", "object", "int64", "bool"))})
        sizes = [len(c[0]) for c in self.chunks]
        categories = list(self.labels)

        def text(codes: np.ndarray) -> pd.Categorical:
            return pd.Categorical.from_codes(codes, categories=categories)

        return pd.DataFrame({
            "kind": np.concatenate([c[0] for c in self.chunks]).astype(np.int32),
            "component": text(np.repeat(np.array([c[1] for c in self.chunks], dtype=np.int32), sizes)),
            "level": text(np.repeat(np.array([c[2] for c in self.chunks], dtype=np.int32), sizes)),
            "direction": text(np.repeat(np.array([c[3] for c in self.chunks], dtype=np.int32), sizes)),
            "instance": text(np.concatenate([c[4] for c in self.chunks])),
            "bits": np.concatenate([c[5] for c in self.chunks]),
            "weight_load": np.repeat([c[6] for c in self.chunks], sizes),
        })


def _base_terms(f: pd.DataFrame, terms: _Terms) -> None:
    mapped = ((f["mac_count"] > 0) & f["core_type"].isin(list(rules.BASE_INSTANCES))).to_numpy()
    weight_gradient = f["core_type"].isin(rules.WEIGHT_GRADIENT_CORES).to_numpy()
    m, oe, w = (f[c].to_numpy(np.int64) for c in ("mac_count", "output_numel", "weight_numel"))
    k, c = f["K"].to_numpy(np.int64), f["C"].to_numpy(np.int64)
    reduction = np.where(f["core_type"].isin(rules.INPUT_GRADIENT_CORES).to_numpy(), k, c)
    chunks = -(-reduction // 16) * f["FY"].to_numpy(np.int64) * f["FX"].to_numpy(np.int64)
    elements = {
        "M": m, "Oe": oe, "W": w, "M-Oe": m - oe, "P": oe * (chunks - 1), "S": oe * chunks,
        "Si": -(-m // np.clip(k, 1, 16)), "Sw": -(-m // np.clip(c, 1, 16)),
    }
    precision = {operand: f[f"{operand}_precision_bits"].to_numpy(np.int64) for operand in ("input", "weight", "output")}
    instance_of = {role: f["core_type"].map({core: names[i] for core, names in rules.BASE_INSTANCES.items()}).to_numpy()
                   for i, role in enumerate(rules.ROLES)}
    for selected, table in ((mapped & ~weight_gradient, rules.STREAM_TERMS),
                            (mapped & weight_gradient, rules.WEIGHT_GRADIENT_TERMS)):
        rows = np.flatnonzero(selected)
        for level, direction, role, count, operand, weight_load in table:
            terms.add(rows, "base", level, direction, instance_of[role][rows],
                      (elements[count] * precision[operand])[rows], weight_load)


def _extra_terms(f: pd.DataFrame, terms: _Terms) -> None:
    s = {key: value.to_numpy(np.int64) for key, value in _scalar_counts(f).items()}
    select = f["op_name"].where(f["process_key"] == "with_opt", f["phase"]).to_numpy()
    process_key = f["process_key"].to_numpy()
    for (key, which), variables in rules.EXTRA_VARIABLES.items():
        rows = np.flatnonzero((process_key == key) & (select == which))
        if not len(rows):
            continue
        for name, (count_key, bits, register, sram) in variables.items():
            total = s[count_key][rows] * bits
            for level, instance in (("reg", register), ("sram", sram)):
                written = name in rules.EXTRA_WRITTEN
                if (key, which) == ("with_sg", "backward"):
                    written = (level, name) in rules.SOMA_BACKWARD_WRITES
                for direction, factor in (("rh2l", rules.EXTRA_READ_MULTIPLIER.get(name, 0)), ("wl2h", int(written))):
                    if factor:
                        terms.add(rows, "extra", level, direction, instance, total * factor, False)
    sgd, parameters = _sgd_flags(f)
    momentum = f["optimizer_has_momentum"].to_numpy(bool)
    conditions = {None: sgd.to_numpy(), "momentum": sgd.to_numpy() & momentum,
                  "momentum_and_buffer": sgd.to_numpy() & momentum & f["optimizer_has_momentum_buffer"].to_numpy(bool)}
    parameters = parameters.to_numpy(np.int64)
    for direction, copies, condition in rules.SGD_TERMS:
        rows = np.flatnonzero(conditions[condition])
        terms.add(rows, "extra", "sram", direction, rules.SGD_INSTANCE, parameters[rows] * rules.SGD_BITS * copies, False)


MEMORY_COLUMNS = ("kind", "component", "level", "direction", "instance", "bits", "weight_load")


def memory_terms(f: pd.DataFrame) -> pd.DataFrame:
    """Long frame: kind (position in `f`, the kinds of fragment), component (base/extra), level,
    direction, instance, bits (of one fragment part of that kind), weight_load. Terms of zero or
    negative bits are dropped, as SpikingJelly's _accumulate_memory does."""
    terms = _Terms()
    _base_terms(f, terms)
    _extra_terms(f, terms)
    return terms.frame()


def weight_residency(f: pd.DataFrame) -> pd.DataFrame:
    """What the costing needs to decide weight reuse per fragment row: whether the stage
    reuses weights (b_type or t_type), the weight bits, and the SRAM that must hold them."""
    sram_w = rules.ROLES.index("sram_w")
    return pd.DataFrame({
        "reuse_stage": (f["b_type"] > 0) | (f["t_type"] > 0),
        "weight_bits": (f["weight_numel"] * f["weight_precision_bits"]).astype("int64"),
        "weight_instance": f["core_type"].map({c: names[sram_w] for c, names in rules.BASE_INSTANCES.items()}),
    }, index=f.index).assign(weight_instance=lambda d: d["weight_instance"].where(
        ~f["core_type"].isin(rules.WEIGHT_GRADIENT_CORES), np.nan))
