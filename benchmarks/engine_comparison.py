"""The dask engine against the in-process one (spiketrace.analyze.many): the counts and energies of 8
copies of one multi-rank trace, evaluated in this process, and as one task per (trace, rank)
on a LocalCluster of 2 worker processes. Run from analysis_throughput.py:

    python benchmarks/analysis_throughput.py --sizes "" --engines 4x100000 [--no-online]

1. The captured steps are tiled (tiling.build) into RANKS ranks of at least EVENTS
   events each, one trace; it is copied COPIES times (the traces of a sweep).
2. Per command and engine, in a child process of its own: spiketrace.analyze.many.count (all five
   counters) or spiketrace.analyze.many.energy(model) over every copy; for dask on a fresh LocalCluster
   whose start is timed apart. Peak RSS (VmHWM): the process's own in-process; for dask the
   largest of the client's and each worker's.
3. The two engines' results must be equal (counts exactly, energies to 1e-9 relative).
"""

from __future__ import annotations

import json
import logging
import math
import re
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

COMMANDS = ("count", "energy compute", "energy neuromc", "energy lemaire")
ENGINES = ("in-process", "dask")
COPIES, WORKERS = 8, 2


def peak_rss_mb() -> float:
    return int(re.search(r"VmHWM:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1)) / 1024


def measure_here(paths: list[str], command: str, engine: str) -> dict:
    """Seconds of `command` over `paths` on `engine`, peak RSS, and the result in short (to compare)."""
    from spiketrace.analyze import many

    options, started, cluster, client = {}, time.perf_counter(), None, None
    if engine == "dask":
        import distributed

        cluster = distributed.LocalCluster(n_workers=WORKERS, threads_per_worker=1, processes=True,
                                           dashboard_address=None, silence_logs=logging.CRITICAL)
        client = distributed.Client(cluster)
        options = {"engine": "dask", "client": client}
    start = time.perf_counter()
    with warnings.catch_warnings():  # model scope warnings: training steps, on purpose
        warnings.simplefilter("ignore")
        if command == "count":
            combined = many.count(paths, **options)
            result = {"totals": combined.total.totals(), "rows": len(combined.total.frame)}
        else:
            combined = many.energy(paths, command.split()[1], **options)
            result = {"rows": [[b, k, p] for b, k, p in zip(combined.frame["breakdown"], combined.frame["key"],
                                                             combined.frame["pj"])]}
    seconds = time.perf_counter() - start
    rss = peak_rss_mb()
    if client is not None:
        rss = max([rss, *client.run(peak_rss_mb).values()])
        client.close()
        cluster.close()
    return {"seconds": seconds, "start": start - started, "rss_mb": rss, "result": result}


def measure(paths: list[str], command: str, engine: str, timeout: float) -> dict:
    """measure_here in a child process (this file with --child)."""
    call = [sys.executable, __file__, "--child", json.dumps({"paths": paths, "command": command, "engine": engine})]
    try:
        done = subprocess.run(call, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"> {timeout:.0f} s"}
    if done.returncode:
        lines = done.stderr.strip().splitlines() or ["failed"]
        return {"error": next((line for line in reversed(lines) if "Error" in line), lines[-1])[:100]}
    return json.loads(done.stdout.splitlines()[-1])


def equal(a: dict, b: dict) -> bool:
    """Counts exactly; energies to 1e-9 relative (the shards' sums are added in another order)."""
    if "totals" in a:
        return a == b
    def same(x, y) -> bool:  # a row without energy (a count) has NaN on both sides
        return (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-6)

    return len(a["rows"]) == len(b["rows"]) and all(
        x[:2] == y[:2] and same(float(x[2]), float(y[2])) for x, y in zip(a["rows"], b["rows"]))


def build_copies(source: Path, scratch: Path, shape: str, part_events: int) -> tuple[list[str], int, int]:
    """COPIES copies of one trace of RANKS ranks of at least EVENTS events each (`shape` RANKSxEVENTS)."""
    from benchmarks.tiling import build
    from spiketrace.analyze import open_trace

    ranks, events = (int(v) for v in shape.lower().split("x"))
    first = scratch / "copy=0"
    for rank in range(ranks):
        build(source, first, events, part_events, rank=rank, world_size=ranks)
    for index in range(1, COPIES):
        shutil.copytree(first, scratch / f"copy={index}")
    with open_trace(first) as trace:
        per_trace = trace.count("events")
    return [str(scratch / f"copy={i}") for i in range(COPIES)], ranks, per_trace * COPIES


def compare(source: Path, scratch: Path, shape: str, part_events: int, timeout: float) -> None:
    """Build the copies, measure every command on both engines, print the table."""
    start = time.perf_counter()
    paths, ranks, events = build_copies(source, scratch / "engines", shape, part_events)
    print(f"\nbuilt {COPIES} copies of a trace of {ranks} ranks: {events:,} events in all, in "
          f"{time.perf_counter() - start:.1f} s", flush=True)
    print(f"\n## dask engine ({WORKERS} local workers, one task per (trace, rank)) vs in-process: "
          f"{COPIES} traces x {ranks} ranks, {events:,} events\n")
    print("| command | in-process s | M events/s | peak RSS MB | dask s | M events/s | peak RSS MB (largest process) "
          "| dask / in-process | equal | cluster start s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for command in COMMANDS:
        here, there = (measure(paths, command, engine, timeout) for engine in ENGINES)
        cells = []
        for r in (here, there):
            cells += ([r["error"], "-", "-"] if "error" in r else
                      [f"{r['seconds']:.2f}", f"{events / r['seconds'] / 1e6:.2f}", f"{r['rss_mb']:,.0f}"])
        both = "error" not in here and "error" not in there
        ratio = f"{there['seconds'] / here['seconds']:.2f}x" if both else "-"
        same = ("yes" if equal(here["result"], there["result"]) else "NO") if both else "-"
        start_s = f"{there['start']:.1f}" if "error" not in there else "-"
        print(f"| {command} | {' | '.join(cells)} | {ratio} | {same} | {start_s} |", flush=True)
    shutil.rmtree(scratch / "engines", ignore_errors=True)


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--child":
    job = json.loads(sys.argv[2])
    print(json.dumps(measure_here(job["paths"], job["command"], job["engine"])))
