"""Fragments held as kinds: the few distinct fragments a run repeats, and where each recurs.

A training run repeats the same work step after step, so its fragments are mostly copies of
a few kinds, however many steps it records. What a fragment
costs (its MACs, primitives, memory terms, weight reuse) depends only on its columns other
than its place in the run (rank, step, seq, sub), so a trace's fragments are kept as
`kinds` (one row per distinct fragment part, every column but the place) and `fragments`
(one narrow row per fragment part: its kind, rank, step and fragment id, in SpikingJelly's
order). The costing prices each kind once and weights it by how often it recurs; only the
per-step and per-rank sums and the fragment counts read `fragments`. Held one row per
fragment part with every column, the fragments and their memory terms would be the largest
thing NeuroMC's mapping keeps, growing with the trace.

Fragments mapped a range of steps at a time (mapper.py) are compacted range by
range, and the ranges' kinds and places combined into the kinds and order of the whole trace,
so a trace mapped in ranges gives the same activity as one mapped whole.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from spiketrace.analyze.energy.neuromc import rules
from spiketrace.analyze.energy.neuromc.fallback import SIGNATURE

# A fragment part's place in the run: what tells apart the parts of one kind. order_group:
# 0 for module hook and optimizer fragments, 1 for trace fragments (SpikingJelly lists them after).
PLACE = ("order_group", "rank", "seq", "sub", "step")
KIND_COLUMNS = tuple(c for c in rules.FRAGMENT_COLUMNS if c not in PLACE)
ORDER = ["order_group", "rank", "seq", "sub"]  # SpikingJelly's order; one fragment per distinct value
BOOLEAN_COLUMNS = ("optimizer_has_momentum", "optimizer_has_weight_decay", "optimizer_has_momentum_buffer")
INTEGER_COLUMNS = (*rules.LOOP_DIMS, "G", "input_precision_bits", "weight_precision_bits", "output_precision_bits",
                   "input_numel", "weight_numel", "output_numel", "mac_count", "b_type", "t_type")


def _kind_codes(frame: pd.DataFrame) -> np.ndarray:
    """The kind of each row: rows equal in every kind column share one, numbered in order of
    first appearance (exact: pandas factorizes each column, no hashing)."""
    if not len(frame):
        return np.zeros(0, dtype=np.int64)
    return frame.groupby(list(KIND_COLUMNS), sort=False, dropna=False).ngroup().to_numpy(np.int64)


def compact(rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(kinds, places) of fragment part rows (FRAGMENT_COLUMNS and order_group): kinds the
    distinct rows of KIND_COLUMNS, places the PLACE columns of each row and its `kind`."""
    rows = rows.reset_index(drop=True)
    for column in BOOLEAN_COLUMNS:
        rows[column] = rows[column].fillna(False).astype(bool)
    for column in INTEGER_COLUMNS:
        rows[column] = rows[column].astype("int64")
    rows["module"] = rows["module"].fillna("Global")
    codes = _kind_codes(rows)
    first = np.unique(codes, return_index=True)[1]  # codes number first appearances: in code order
    kinds = rows.loc[first, list(KIND_COLUMNS)].reset_index(drop=True)
    # narrow integers: a long trace has millions of places, and they are all it keeps per fragment
    places = rows[list(PLACE)].astype({"order_group": "int8", "rank": "int32", "seq": "int64", "sub": "int32",
                                       "step": "int64"}).assign(kind=codes.astype(np.int32))
    return kinds, places


def combine(compacted: list[tuple[pd.DataFrame, pd.DataFrame]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(kinds, fragments) of several compacted parts (ranges of one trace, in record order):
    the parts' places in SpikingJelly's order (a stable sort: the parts of one fragment keep
    their order), one kind per distinct kind numbered by first appearance in that order, and
    each fragment part's id (fragments: kind, rank, step, fragment_id, and trace_fragment,
    which compat's duplicate test reads)."""
    all_kinds = pd.concat([k for k, _ in compacted], ignore_index=True)
    codes = _kind_codes(all_kinds)
    offsets = np.cumsum([0, *(len(k) for k, _ in compacted)])
    places = pd.concat([p.assign(kind=codes[offset + p["kind"].to_numpy()].astype(np.int32)) for offset, (_, p) in
                        zip(offsets, compacted)], ignore_index=True)
    places = places.sort_values(ORDER, kind="stable", ignore_index=True)
    by_code = np.unique(codes, return_index=True)[1]  # a row of all_kinds for each code
    seen = pd.unique(places["kind"].to_numpy())  # codes in order of first appearance
    renumbered = np.full(len(by_code), -1, dtype=np.int64)
    renumbered[seen] = np.arange(len(seen))
    kinds = all_kinds.iloc[by_code[seen]].reset_index(drop=True)
    keys = places[ORDER].to_numpy()
    new_fragment = np.ones(len(places), dtype=bool)
    new_fragment[1:] = (keys[1:] != keys[:-1]).any(axis=1)
    fragments = pd.DataFrame({"kind": renumbered[places["kind"].to_numpy()].astype(np.int32),
                              "rank": places["rank"].to_numpy(),
                              "step": places["step"].to_numpy(), "fragment_id": np.cumsum(new_fragment) - 1,
                              "trace_fragment": places["order_group"].to_numpy() == 1})
    return kinds, fragments


def module_signatures(modules: pd.DataFrame) -> pd.DataFrame:
    """The distinct SpikingJelly signatures of module fragment rows (fallback.SIGNATURE)."""
    return modules.assign(BT=modules["B"] * modules["T"])[list(SIGNATURE)].drop_duplicates()


def drop_trace_duplicates(kinds: pd.DataFrame, fragments: pd.DataFrame,
                          signatures: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """SpikingJelly's rule (compat): a trace fragment whose signature some module fragment of the
    trace has is dropped. A signature is a kind's columns and a rank, so it is tested once per
    (rank, kind) of the trace fragments; kinds no fragment is left of go, the others keep their order."""
    traced = fragments[fragments["trace_fragment"]]
    if not len(traced) or not len(signatures):
        return kinds, fragments
    pairs = traced[["rank", "kind"]].drop_duplicates()
    candidates = kinds.iloc[pairs["kind"].to_numpy()].reset_index(drop=True).assign(rank=pairs["rank"].to_numpy())
    candidates["BT"] = candidates["B"] * candidates["T"]
    matched = candidates.merge(signatures.drop_duplicates().assign(_duplicate=True), how="left", on=list(SIGNATURE))
    duplicate = pairs[matched["_duplicate"].notna().to_numpy()]
    if not len(duplicate):
        return kinds, fragments
    key = pd.MultiIndex.from_frame(fragments[["rank", "kind"]])
    drop = fragments["trace_fragment"].to_numpy() & key.isin(pd.MultiIndex.from_frame(duplicate))
    kept = fragments[~drop].reset_index(drop=True)
    seen = pd.unique(kept["kind"].to_numpy())  # kinds renumbered by first appearance among those kept
    renumbered = np.full(len(kinds), -1, dtype=np.int64)
    renumbered[seen] = np.arange(len(seen))
    kept["kind"] = renumbered[kept["kind"].to_numpy()].astype(np.int32)
    ids = kept["fragment_id"].to_numpy()  # consecutive again: a dropped trace fragment had one part
    kept["fragment_id"] = np.cumsum(np.r_[True, ids[1:] != ids[:-1]]) - 1 if len(ids) else ids
    return kinds.iloc[seen].reset_index(drop=True), kept


def weighted(kinds: pd.DataFrame, fragments: pd.DataFrame) -> np.ndarray:
    """How many fragment parts are of each kind."""
    return np.bincount(fragments["kind"].to_numpy(), minlength=len(kinds)).astype(np.int64)


def expanded(kinds: pd.DataFrame, fragments: pd.DataFrame) -> pd.DataFrame:
    """One row per fragment part in order, with every kind column (what SpikingJelly's
    mapping_summary lists): the fragments as they were before compaction."""
    rows = kinds.iloc[fragments["kind"].to_numpy()].reset_index(drop=True)
    return rows.assign(rank=fragments["rank"].to_numpy(), step=fragments["step"].to_numpy(),
                       fragment_id=fragments["fragment_id"].to_numpy(), order=np.arange(len(fragments)))
