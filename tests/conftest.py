"""Fixtures shared by several test modules."""

from __future__ import annotations

from pathlib import Path

import pytest

# Suites that run ordinary training scripts in subprocesses (real_jobs, guest), seeded fuzzing and a
# local Dask cluster: marked `slow`, left out of the default `pytest` run (pyproject addopts)
# and run by the README's test command (and so by .ci/run) as a second `pytest -m slow`.
SLOW_DIRECTORIES = ("fuzz", "real_jobs", "guest")
SLOW_MODULES = ("test_dask_engine.py",)


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = Path(str(item.fspath))
        if path.parent.name in SLOW_DIRECTORIES or path.name in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def engine_calls(monkeypatch):
    """How often the NeuroMC mapping and the counters' engine really run, wrapped at their own
    modules (not through Analysis's bookkeeping): {"neuromc": n, "counters": n}."""
    import spiketrace.analyze.counters
    from spiketrace.analyze.energy import neuromc

    seen = {"neuromc": 0, "counters": 0}
    mapping, counting = neuromc.activity, spiketrace.analyze.counters.count_events

    def counted_mapping(*args, **kwargs):
        seen["neuromc"] += 1
        return mapping(*args, **kwargs)

    def counted_counting(*args, **kwargs):
        seen["counters"] += 1
        return counting(*args, **kwargs)

    monkeypatch.setattr(neuromc, "activity", counted_mapping)
    monkeypatch.setattr(spiketrace.analyze.counters, "count_events", counted_counting)
    return seen


@pytest.fixture
def shared_scans():
    """Every scan of 64 elements a thread or more shared among torch's threads however small
    (capture/native/_native_parallel.c), the settings and torch's thread count restored after; the
    fixture's value: whether the OpenMP runtime was found (False without the compiled path,
    which shares nothing)."""
    import torch

    import spiketrace.capture.native

    if not spiketrace.capture.native.AVAILABLE:
        yield False
        return
    found, min_bytes, max_threads = spiketrace.capture.native._native.parallel_scan()
    threads = torch.get_num_threads()
    spiketrace.capture.native._native.parallel_scan(min_bytes=0)
    yield found
    torch.set_num_threads(threads)
    spiketrace.capture.native._native.parallel_scan(min_bytes=min_bytes, max_threads=max_threads)
