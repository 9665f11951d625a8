"""What the capture said about itself, in words, before any number of the trace is shown.

`Trace.health()` holds it as data (every rank's manifest): `degraded`, the capture's own
failures per rank (site, what, error, count, first_seq); `compiled`, torch.compile seen while
capturing (the trace is the eager graph); `tracker_underflows`, where SpikingJelly 2.0.0's
ActiveModuleTracker would have aborted the run and the capture went on; `unrecorded_threads`
(only when there were some), Python threads the capture could not reach that ran while it was
open (capture/session/threads.py), whose torch ops, if they ran any, are in no table;
`torch_limitations` (only when there is some), what an older torch could not tell the capture
(capture/modules/tracker.py: keyword inputs of module calls, checkpoint recomputation).

A degraded trace is readable and consistent, but its numbers miss the work the capture
failed to record, so every command that prints numbers says so first, on stderr (stdout stays
the table, for pipes): `info`, `counts`, `energy`, `validate`, `sql`, `report`; the report page
shows it as a banner and as its first findings; JSON documents carry `Trace.health()` as it is.

The same commands note work that activation checkpointing recomputed, and what their numbers
do with it (`--recompute`): not a fault of the capture, but a choice the reader must know of.
"""

from __future__ import annotations

from spiketrace.analyze.energy.scopes import recompute_default
from spiketrace.analyze.trace.facts import recomputed_events

SHOWN_KINDS = 3  # failure kinds named in the one DEGRADED line; the rest are counted


def _times(n: int) -> str:
    return f"{n} time{'' if n == 1 else 's'}"


def degraded_line(health: dict) -> str | None:
    """'DEGRADED: capture failed 12 times at dispatch (aten.convolution.default: ValueError:
    ...); the numbers miss the work it did not record', or None for a sound capture."""
    by_rank = health.get("degraded") or {}
    entries = [(rank, entry) for rank, listed in sorted(by_rank.items()) for entry in listed]
    if not entries:
        return None
    named_ranks = set(by_rank) != {"0"}  # a single-process trace needs no rank

    def where(rank, entry) -> str:
        prefix = f"on rank {rank} " if named_ranks else ""
        return f"{prefix}at {entry.get('site')} ({entry.get('what')}: {entry.get('error')})"

    total = sum(int(entry.get("count") or 0) for _, entry in entries)
    ordered = sorted(entries, key=lambda item: -int(item[1].get("count") or 0))
    if len(ordered) == 1:
        what = " " + where(*ordered[0])
    else:
        what = ": " + ", ".join(f"{int(e.get('count') or 0)} {where(r, e)}" for r, e in ordered[:SHOWN_KINDS])
        if len(ordered) > SHOWN_KINDS:
            what += f", and {len(ordered) - SHOWN_KINDS} more kinds (spiketrace info --format json)"
    return f"DEGRADED: capture failed {_times(total)}{what}; the numbers miss the work it did not record"


def compiled_line(health: dict) -> str | None:
    if not health.get("compiled"):
        return None
    listed = health.get("compiled_seen") or ["torch.compile"]
    seen = "; ".join(listed[:2]) + (f"; and {len(listed) - 2} more" if len(listed) > 2 else "")
    return (f"torch.compile was used while capturing ({seen}): the trace records the eager graph, "
            "not the compiled program's fused ops")


def underflow_line(health: dict) -> str | None:
    underflows = health.get("tracker_underflows") or []
    if not underflows:
        return None
    names = ", ".join(f"{u.get('tracker_name')} x{u.get('count')}" for u in underflows[:SHOWN_KINDS])
    more = f" and {len(underflows) - SHOWN_KINDS} more" if len(underflows) > SHOWN_KINDS else ""
    return (f"SpikingJelly 2.0.0's module tracker would have aborted this run (active_modules stack underflow "
            f"at {names}{more}); the capture went on, so --compat spikingjelly numbers are of a run SpikingJelly "
            "could not finish")


def _thread_names(entries: list) -> str:
    names = ", ".join(str(e.get("name")) for e in entries[:SHOWN_KINDS])
    return names + (f" and {len(entries) - SHOWN_KINDS} more" if len(entries) > SHOWN_KINDS else "")


def unrecorded_threads_line(health: dict) -> str | None:
    """'2 Python threads ran while capturing but were not recorded (pool_0, pool_1: started
    before the capture opened); any torch ops they ran are missing from the trace', or None."""
    entries = health.get("unrecorded_threads") or []
    if not entries:
        return None
    before = all(e.get("started") == "before" for e in entries)
    why = "started before the capture opened" if before else "started before the capture opened or past its thread hook"
    threads = f"{len(entries)} Python thread{'' if len(entries) == 1 else 's'}"
    return (f"{threads} ran while capturing but {'was' if len(entries) == 1 else 'were'} not recorded "
            f"({_thread_names(entries)}: {why}); any torch ops they ran are missing from the trace")


def torch_limitations_line(health: dict) -> str | None:
    """What the capture's torch could not tell (an older torch lacks an API the capture uses;
    every op is recorded all the same): its notes, or None."""
    notes = [str(entry.get("note")) for entry in health.get("torch_limitations") or []]
    return "; ".join(notes) if notes else None


def health_lines(health: dict) -> list[str]:
    """What to say before the numbers, most serious first: the DEGRADED line as it is, the
    others as `warning: ...`."""
    lines = [degraded_line(health)]
    lines += [f"warning: {line}" for line in (compiled_line(health), underflow_line(health),
                                              unrecorded_threads_line(health), torch_limitations_line(health)) if line]
    return [line for line in lines if line]


def degraded_summary(health: dict) -> str | None:
    """'capture failed 12 times (1 kind)', or None for a sound capture."""
    entries = [entry for listed in (health.get("degraded") or {}).values() for entry in listed]
    if not entries:
        return None
    failures = sum(int(entry.get("count") or 0) for entry in entries)
    return f"capture failed {_times(failures)} ({len(entries)} kind{'' if len(entries) == 1 else 's'})"


def compiled_record(manifests: dict) -> str:
    """Whether the capture recorded its ops in compiled code (the manifest's settings: `native`,
    the C extension was built, and its fast path `native_record` on): "yes", "no (...)" saying
    why, "unknown" for a trace that does not say, or per rank where ranks differ. The trace is
    the same either way; only the capture's speed differs."""
    def of(manifest: dict) -> str:
        settings = manifest.get("settings") or {}
        if "native" not in settings:
            return "unknown"
        if not settings["native"]:
            return "no (the C extension was not built: Python record)"
        if "native_record" not in (settings.get("fast_paths") or []):
            return "no (switched off: SPIKETRACE_SLOW_PATHS)"
        return "yes"

    per_rank = {rank: of(manifest) for rank, manifest in sorted(manifests.items())}
    if len(set(per_rank.values())) <= 1:
        return next(iter(per_rank.values()), "unknown")
    return ", ".join(f"rank {rank}: {said}" for rank, said in per_rank.items())


def health_facts(health: dict, manifests: dict | None = None) -> dict[str, str]:
    """Short fields for `info` and the report's facts: capture, torch.compile, the compiled
    record (with the trace's `manifests`), tracker underflows, unrecorded threads. torch.compile
    is the user's (seen while capturing), apart from spiketrace's own compiled record."""
    summary = degraded_summary(health)
    underflows = health.get("tracker_underflows") or []
    return {
        "capture": f"DEGRADED: {summary}" if summary else "sound",
        "torch.compile": "yes (eager graph recorded)" if health.get("compiled") else "no",
        **({"compiled_record": compiled_record(manifests)} if manifests is not None else {}),
        "tracker_underflows": ", ".join(f"{u.get('tracker_name')} x{u.get('count')}" for u in underflows) or "none",
        "unrecorded_threads": _thread_names(health.get("unrecorded_threads") or []) or "none",
    }


def health_findings(health: dict) -> list[dict]:
    """The report's first findings (headline, detail, warn), as report.findings makes them."""
    found = []
    for headline, line in (("capture degraded", degraded_line(health)), ("torch.compile", compiled_line(health)),
                           ("tracker underflow", underflow_line(health)),
                           ("threads not recorded", unrecorded_threads_line(health)),
                           ("torch limitations", torch_limitations_line(health))):
        if line:
            found.append({"headline": headline, "detail": line.removeprefix("DEGRADED: "), "warn": True})
    return found


def recompute_note(recomputed: int, choice: str) -> str | None:
    """A note when the trace holds work activation checkpointing recomputed during backward
    (`recomputed` events), saying what the numbers do with it (`choice`: include, exclude, only)."""
    if not recomputed:
        return None
    ops = f"{recomputed} op{'' if recomputed == 1 else 's'} recomputed by activation checkpointing"
    return {
        "include": f"note: {ops} are included (they ran; --recompute exclude leaves them out)",
        "exclude": f"note: {ops} are left out (--recompute include counts them)",
        "only": f"note: only the {ops} are counted",
    }[choice]


def report_health(trace, model: str) -> dict:
    """The report's share (analyze/present/report.py): the DEGRADED line as a banner, the
    capture's findings (shown first), its facts, and a caveat on recomputed work, which the
    report's numbers (the model's defaults) include or not."""
    health = trace.health()
    note = recompute_note(recomputed_events(trace), recompute_default(model, None))
    return {"banner": degraded_line(health), "findings": health_findings(health),
            "facts": list(health_facts(health, trace.manifests).items()),
            "caveats": [note.removeprefix("note: ")] if note else []}
