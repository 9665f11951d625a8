"""Which traces the arguments name, and what each trace says about itself.

An argument is a trace directory, or a directory whose subdirectories are traces (a sweep
over seeds, model sizes or checkpoints: `runs/seed=0`, `runs/seed=1`, ...). The facts of a
trace are what the commands show beside its numbers: what the capture said about itself, the
reader's warnings, its module classes, its recomputed events and, for energy, the model it
gets. They are read where the trace is opened (on a cluster worker, for the dask engine), so
the client never needs to open a trace itself.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from spiketrace.analyze.trace import TraceError
from spiketrace.analyze.trace.facts import module_classes, recomputed_events, trace_json
from spiketrace.schemas.layout import MANIFEST_NAME, holds_manifest


def _natural(name: str) -> list:
    """`seed=2` before `seed=10`."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name) if part]


def find_traces(arguments) -> list[str]:
    """The traces named by `arguments` (a path, or several), in order: each argument is a trace,
    or a directory whose immediate subdirectories are traces (in natural order of their names).
    A path that is neither is passed on as it is, so that opening it says what is wrong with it.
    The same trace named twice is refused: it would be counted twice."""
    arguments = [arguments] if isinstance(arguments, (str, os.PathLike)) else list(arguments)
    if not arguments:
        raise TraceError("no trace given")
    found: list[str] = []
    for argument in arguments:
        path = Path(argument)
        if not path.is_dir() or holds_manifest(path):
            found.append(str(argument))
            continue
        children = sorted((c for c in path.iterdir() if holds_manifest(c)), key=lambda c: _natural(c.name))
        if not children:
            raise TraceError(f"{path}: not a trace, and none of its subdirectories is one (no {MANIFEST_NAME})")
        found += [str(child) for child in children]
    seen: dict[Path, str] = {}
    for label in found:
        resolved = Path(label).resolve()
        if resolved in seen:
            raise TraceError(f"{label}: the same trace as {seen[resolved]}; name each trace once (it would count twice)")
        seen[resolved] = label
    return found


@dataclass
class TraceFacts:
    """What one trace says about itself, read when it is opened whole."""

    label: str  # the trace as named (its path)
    document: dict  # path, schema_version, complete, ranks, events, Trace.health(): counts JSON's `trace` entry
    health: dict  # Trace.health(): degraded, compiled, compiled_seen, tracker_underflows
    warnings: list[str]  # the reader's
    modules: pd.DataFrame  # scope, class_name, is_leaf, order (analyze/trace/facts.py module_classes)
    recomputed_events: int  # events activation checkpointing recomputed
    model: str | None = None  # energy: the model this trace gets (named, the preset's, or its default)
    scope_warnings: list[str] = field(default_factory=list)  # energy: work outside the model's scope

    @property
    def ranks(self) -> list[int]:
        return list(self.document["ranks"])


def read_facts(trace, label: str) -> TraceFacts:
    """The facts of an opened (whole) trace."""
    return TraceFacts(label, trace_json(trace), trace.health(), list(trace.warnings), module_classes(trace),
                      recomputed_events(trace))


def modules_of(facts: list[TraceFacts]) -> pd.DataFrame:
    """Every trace's module classes, each scope once (the first trace naming it says its class)."""
    frames = [f.modules for f in facts if len(f.modules)]
    if not frames:
        return facts[0].modules if facts else pd.DataFrame(columns=["scope", "class_name", "is_leaf", "order"])
    return pd.concat(frames, ignore_index=True).drop_duplicates("scope", keep="first").reset_index(drop=True)
