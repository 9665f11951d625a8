"""Switches for capture's fast paths: each one records exactly what its slow path records.

A fast path is an optimisation of the per-op work whose output must not differ from the
plain computation by a single value. Each can be switched off for a run with the
environment variable SPIKETRACE_SLOW_PATHS (comma-separated names, or `all`), read when a
Recorder opens: tests/test_fast_paths.py takes a trace with each one off and compares it,
column by column, with the trace taken with all of them on; a user who suspects one can
take the slow path the same way.

The paths that run compiled code (`COMPILED`) are on only where the install built the C
extension (capture/native `AVAILABLE`): the manifest's settings list the paths that ran, so
a trace taken without the extension names none of them.
"""

from __future__ import annotations

import os

from spiketrace.capture import native

FAST_PATHS = {
    "interned_arguments": "argument JSON encoded once per (op, argument structure), not per call",
    "propagated_statistics": "nnz/is01 of an output derived from its inputs' (capture/tensors/propagation.py)",
    "native_statistics": "nnz/is01 of a CPU tensor by the compiled one-pass scan (capture/native/__init__.py), "
                         "where the install built it",
    "native_operand_statistics": "NeuroBench's nonzero-pair counts (mm, bmm, addmm, linear), ternary input checks, "
                                 "a convolution input's nonzeros per position and a weight's dense check in "
                                 "compiled passes (capture/native/scan/pairs.c, capture/native/scan/ternary.c, the scan) "
                                 "instead of a few torch ops each",
    "shared_scans": "a large CPU tensor's scan shared among the threads of the OpenMP runtime torch runs "
                    "(capture/native/scan/parallel.c) instead of the calling thread alone",
    "native_record": "the per-op record of the common call (plain CPU tensors, simple arguments, one tensor out) "
                     "and a module hook's row (plain tensors) in compiled code (capture/native/record/record.c, "
                     "capture/native/record/hooks.c)",
    "native_dispatch": "the dispatch mode's handler for ops the compiled record takes in compiled code "
                       "(capture/native/record/dispatch.c) instead of a Python __torch_dispatch__",
}

# The fast paths that are compiled code (capture/native/): none of them runs without the extension.
COMPILED = frozenset({"native_statistics", "native_operand_statistics", "shared_scans", "native_record",
                      "native_dispatch"})

ENVIRONMENT_VARIABLE = "SPIKETRACE_SLOW_PATHS"


def available_fast_paths() -> frozenset[str]:
    """The fast paths this install can run: all, or without the compiled ones where the C
    extension was not built."""
    return frozenset(FAST_PATHS) if native.AVAILABLE else frozenset(FAST_PATHS) - COMPILED


def enabled_fast_paths() -> frozenset[str]:
    """The fast paths on for a Recorder opening now: those available, less those switched off;
    an unknown name is misuse and raises (a compiled path's name is known, built or not)."""
    value = os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
    if value == "all":
        return frozenset()
    off = {name.strip() for name in value.split(",") if name.strip()}
    unknown = sorted(off - set(FAST_PATHS))
    if unknown:
        raise ValueError(f"{ENVIRONMENT_VARIABLE}: unknown fast path(s) {unknown}; known: {sorted(FAST_PATHS)}")
    return available_fast_paths() - off
