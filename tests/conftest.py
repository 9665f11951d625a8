"""Fixtures shared by several test modules."""

from __future__ import annotations

import pytest


@pytest.fixture
def engine_calls(monkeypatch):
    """How often the NeuroMC mapping and the counters' engine really run, wrapped at their own
    modules (not through Analysis's bookkeeping): {"neuromc": n, "counters": n}."""
    import analyze.counters
    from analyze.energy import neuromc

    seen = {"neuromc": 0, "counters": 0}
    mapping, counting = neuromc.activity, analyze.counters.count_events

    def counted_mapping(*args, **kwargs):
        seen["neuromc"] += 1
        return mapping(*args, **kwargs)

    def counted_counting(*args, **kwargs):
        seen["counters"] += 1
        return counting(*args, **kwargs)

    monkeypatch.setattr(neuromc, "activity", counted_mapping)
    monkeypatch.setattr(analyze.counters, "count_events", counted_counting)
    return seen
