"""The compiled inner loops (capture/native/: scan/ the module and its value kernels, record/ the
compiled per-op record), where the install could build them.

The extension is optional (pyproject.toml): without a C compiler the install goes on, and
capture runs the Python paths, which record the same trace. `AVAILABLE` says which; the
manifest's settings name it (`native`), so a slow capture can be told from a slow machine.

`scan_stats(t)` is the one-pass value statistics of a CPU tensor: its elements' bit patterns
are compared with the format's zero (sign bit masked: -0.0 is zero, NaN is not) and one, so
the counts equal `(t != 0).sum()` and `(t == 1).sum()` for every value, NaN included. A large
tensor's scan is shared among the threads of the OpenMP runtime torch runs its kernels on
(capture/native/scan/parallel.c; the fast path `shared_scans`): the same counts, sooner.

This package imports no torch itself: `_native` (and so the writer's flush, which uses its
IntColumn and identity_codes) loads without it, and the names that read torch tensors
(BIT_FORMATS, scan_stats, the scan sharing) come from capture/native/scans.py at first use.
"""

from __future__ import annotations

try:
    from spiketrace.capture.native import _native
except ImportError:  # built without a compiler (or from a source tree never installed)
    _native = None

AVAILABLE = _native is not None

_SCANS = frozenset({"BitFormat", "BIT_FORMATS", "scan_stats", "share_scans", "restore_scans", "scan_threads"})


def __getattr__(name: str):
    if name in _SCANS:  # loaded with torch, at first use
        from spiketrace.capture.native import scans

        return getattr(scans, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
