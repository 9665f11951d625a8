"""Offline analysis throughput: the counters and every energy model over 100 and 600 training
steps, 1M and 10M events of a real training trace.

    python benchmarks/analysis_throughput.py [--sizes 100s,600s,1000000,10000000] [--repeats 1] [--workload vgg]
                                             [--engines 4x100000] [--keep DIR]

1. Capture `--steps` real training steps of a workload (benchmarks/workloads.py) with Recorder.
2. Tile them into a trace of each size of `--sizes` (`Ns`: N training steps; a number: at
   least that many events): K copies of the captured rows, every id renumbered (seq,
   freed_seq, first_seq, tensor_id and the tensor-id lists of module_events, uid, stage_id,
   step, call_index) so that the result is a valid trace; scopes and modules are shared, not
   tiled (benchmarks/tiling.py). Tiles stream through spiketrace.capture.store.writer.TraceWriter
   (its zstd level, delta encoding, footer keys and manifest), one part per `--part-events`
   events (Recorder's default flush).
   The first trace is checked once with trace.validate(), outside timing. With --keep DIR the
   captured steps and the traces stay in DIR, and a later run with --no-online reuses them.
3. Per trace and command, in a child process of its own (so each reports its own peak RSS,
   VmHWM): spiketrace.analyze.counters.count(trace) with all five counters, and
   spiketrace.analyze.energy.energy(trace, model) for compute, neuromc, lemaire and spikesim (the mapping
   and one costing under the model's default preset; NeuroMC maps a rank of more than
   spiketrace.analyze.many.SHARD_EVENTS events a step range at a time): the median of `--repeats` runs,
   each on a fresh open_trace (opening timed apart); and `energy neuromc whole`, NeuroMC
   mapping the trace in one piece (shard_events past its events), for comparison.
   A command past `--timeout` seconds is stopped.
   A profile splits count(trace) by statement on the first trace and shows the slowest one's
   heaviest DuckDB operators.
4. With --engines, the dask engine against the in-process one (benchmarks/engine_comparison.py).
5. For comparison (unless --no-online), SpikingJelly 2.0.0's online DispatchCounterMode with
   its five counters over the same steps, interleaved with plain runs: extra ms per
   dispatched op, extrapolated to 1M.

Targets: all five counters over 1M events in < 1 s and 10M in < 10 s; every energy model over
1M events in < 5 s and 10M in < 60 s; peak RSS < 1 GB; time per event at 10M within 1.5x of
that at 1M.
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.tiling import build
from spiketrace.analyze import open_trace
from spiketrace.analyze.counters import count
from spiketrace.analyze.energy import energy
from spiketrace.capture.store.writer import TraceWriter

PART_EVENTS = inspect.signature(TraceWriter).parameters["flush_rows"].default
ENERGY_MODELS = ("compute", "neuromc", "lemaire", "spikesim")
WHOLE = " whole"  # NeuroMC mapping a trace in one piece, however large
COMMANDS = ("count", *(f"energy {model}" for model in ENERGY_MODELS), f"energy neuromc{WHOLE}")  # count: all five


def capture(workload: str, steps: int, path: Path, repeats: int) -> tuple[int, float, float]:
    """Record `steps` steps into `path`; then median seconds of `steps` steps plain and under SJ's
    counters over `repeats` rounds (none: zeros)."""
    import torch
    from spikingjelly.activation_based.op_counter import (
        ACCounter,
        DispatchCounterMode,
        FlopCounter,
        MACCounter,
        MemoryAccessCounter,
        SynOpCounter,
    )

    from benchmarks.workloads import make, train_step
    from spiketrace.capture import Recorder

    torch.set_num_threads(2)
    net, x, target, loss_fn, opt = make(workload)
    train_step(net, x, target, loss_fn, opt)  # warm-up
    with Recorder(path, model=net, optimizer=opt, metadata={"benchmark": "analysis_throughput"}) as recorder:
        for _ in range(steps):
            train_step(net, x, target, loss_fn, opt, stage=recorder.stage)
            recorder.step()
    if not repeats:
        return recorder.writer.counts["events"], 0.0, 0.0
    times = {"plain": [], "sj": []}
    for round_index in range(repeats + 1):  # round 0 warms up
        for variant in ("plain", "sj") if round_index % 2 else ("sj", "plain"):
            counters = [FlopCounter(), MemoryAccessCounter(), SynOpCounter(), MACCounter(), ACCounter()]
            start = time.perf_counter()
            with DispatchCounterMode(counters, strict=False) if variant == "sj" else nullcontext():
                for _ in range(steps):
                    train_step(net, x, target, loss_fn, opt)
            times[variant].append(time.perf_counter() - start)
    plain, online = (statistics.median(times[v][1:]) for v in ("plain", "sj"))
    return recorder.writer.counts["events"], plain, online


def run_command(trace, command: str) -> None:
    if command == "count":
        count(trace)
    else:
        options = {"shard_events": 2**62} if command.endswith(WHOLE) else {}
        with warnings.catch_warnings():  # model scope warnings: the trace is a training step, on purpose
            warnings.simplefilter("ignore")
            energy(trace, command.removesuffix(WHOLE).split()[1], **options)


def measure_here(path: Path, command: str, repeats: int) -> dict:
    """Median seconds of open_trace and of `command` over `repeats` runs, and the peak RSS."""
    opens, runs = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        with open_trace(path) as trace:
            opened = time.perf_counter()
            run_command(trace, command)
        opens.append(opened - start)
        runs.append(time.perf_counter() - opened)
    hwm_kb = int(re.search(r"VmHWM:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1))
    return {"open": statistics.median(opens), "seconds": statistics.median(runs),
            "range": (min(runs), max(runs)), "hwm_mb": hwm_kb / 1024}


def measure(path: Path, command: str, repeats: int, timeout: float) -> dict:
    """measure_here in a child process (this script with --child); None values past `timeout`."""
    call = [sys.executable, __file__, "--child", str(path), "--child-command", command, "--repeats", str(repeats)]
    try:
        done = subprocess.run(call, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"open": None, "seconds": None, "range": None, "hwm_mb": None, "error": f"> {timeout:.0f} s"}
    if done.returncode:
        lines = done.stderr.strip().splitlines() or ["failed"]
        error = next((line for line in reversed(lines) if re.match(r"[\w.]*(Error|Exception)\b", line)), lines[-1])
        return {"open": None, "seconds": None, "range": None, "hwm_mb": None, "error": error[:100]}
    return json.loads(done.stdout.splitlines()[-1])


# Kinds of count()'s statements, by a marker of their SQL (first match wins).
STATEMENT_KINDS = (
    ("GROUP BY rank, op", "chunks and ops"),
    ("FROM event_tensors", "tensor uses"),
    ("FROM tensor_states", "tensor states"),
    ("FROM op_stats", "op statistics"),
    ("FROM events", "events"),
    ("spiketrace_json_strings", "JSON reads"),
    ("op_facts_table", "rules (partition passes)"),
    ("counter_partials", "scope attribution"),
)


class ProfiledConnection:
    """Stands in for trace.con inside count(): seconds per kind of statement (execute and fetch)
    and DuckDB's operator profile of the slowest statement. Its cursors (count() gathers the
    next chunk on one, in a second thread) are profiled alike, so the seconds of the two
    threads overlap in time. Knows nothing of count()'s SQL but the markers above."""

    def __init__(self, con, output: Path, stats=None, thread: str = "") -> None:
        self.con, self.output, self.thread = con, output, thread
        self.stats = stats if stats is not None else {"seconds": {}, "slowest": (0.0, "", []), "lock": threading.Lock()}
        con.execute(f"PRAGMA enable_profiling = 'json'; PRAGMA profiling_output = '{output}'")

    def _kind(self, query: str) -> str:
        kind = next((name for marker, name in STATEMENT_KINDS if marker in query), "other")
        return kind + self.thread

    def _timed(self, kind: str, run):
        start = time.perf_counter()
        result = run()
        elapsed = time.perf_counter() - start
        with self.stats["lock"]:
            self.stats["seconds"][kind] = self.stats["seconds"].get(kind, 0.0) + elapsed
            if elapsed > self.stats["slowest"][0] and self.output.exists():
                self.stats["slowest"] = (elapsed, kind, json.loads(self.output.read_text())["operator"])
        return result

    def execute(self, query, params=None):
        self.kind = self._kind(query)
        self._timed(self.kind, lambda: self.con.execute(query, params))
        return self

    def df(self):
        return self._timed(self.kind, self.con.df)

    def sql(self, query, **options):
        relation, kind, timed = self.con.sql(query, **options), self._kind(query), self._timed

        class Relation:
            def to_arrow_table(self):
                return timed(kind, relation.to_arrow_table)

            def __getattr__(self, name):
                return getattr(relation, name)

        return Relation()

    def cursor(self):
        return ProfiledConnection(self.con.cursor(), self.output.with_name("cursor-" + self.output.name),
                                  self.stats, " (gather thread)")

    def __getattr__(self, name):  # register, close...: untimed
        return getattr(self.con, name)


def profile(path: Path) -> None:
    """Where count(trace) with all five spends its time: per kind of statement, and the slowest one's heaviest operators."""
    output = Path(tempfile.mkdtemp()) / "profile.json"
    with open_trace(path) as trace:
        count(trace)  # warm-up
        con, trace.con = trace.con, ProfiledConnection(trace.con, output)
        start = time.perf_counter()
        count(trace)
        total, profiled, trace.con = time.perf_counter() - start, trace.con, con
    shutil.rmtree(output.parent)
    seconds, slowest = profiled.stats["seconds"], profiled.stats["slowest"]
    operators, nodes = {}, list(slowest[2])  # operator name -> [CPU s, how many]
    while nodes:
        node = nodes.pop()
        entry = operators.setdefault(node["name"], [0.0, 0])
        entry[0], entry[1] = entry[0] + node["timing"], entry[1] + 1
        nodes += node.get("children", [])
    main = sum(t for kind, t in seconds.items() if not kind.endswith("(gather thread)"))
    print(f"\nprofile of count(trace) with all five (profiling on), {total:.2f} s; DuckDB statements (execute and fetch), "
          "by kind, in the main thread and in the gather thread (which runs alongside): "
          + "; ".join(f"{kind} {t:.2f} s" for kind, t in sorted(seconds.items(), key=lambda i: -i[1]))
          + "; main thread outside its DuckDB statements (numpy gathers, Arrow tables, waiting for the gather thread) "
          + f"{total - main:.2f} s")
    print(f"the slowest statement ({slowest[1]}, {slowest[0]:.2f} s) by operator (EXPLAIN ANALYZE, CPU s "
          f"summed over threads, {sum(t for t, _ in operators.values()):.2f} s in all): "
          + "; ".join(f"{name} x{n} {t:.2f} s" for name, (t, n) in sorted(operators.items(), key=lambda i: -i[1][0])[:5]))


def report(label: str, events: int, results: dict) -> None:
    print(f"\n## {label}: {events:,} events, median of the repeats\n", flush=True)
    print("| command | events | seconds [min, max] | M events/s | peak RSS MB | open_trace s |")
    print("|---|---|---|---|---|---|")
    for command, r in results.items():
        if r["seconds"] is None:
            print(f"| {command} | {events:,} | {r['error']} | - | - | - |", flush=True)
            continue
        print(f"| {command} | {events:,} | {r['seconds']:.2f} [{r['range'][0]:.2f}, {r['range'][1]:.2f}] | "
              f"{events / r['seconds'] / 1e6:.2f} | {r['hwm_mb']:,.0f} | "
              f"{r['open']:.2f} |", flush=True)


def sizes_of(text: str, per_step: float) -> list[tuple[str, int]]:
    """'100s,600s,1000000' -> [('100 steps', events), ('600 steps', ...), ('1,000,000 events', ...)]."""
    sizes = []
    for item in filter(None, text.split(",")):
        if item.endswith("s"):
            sizes.append((f"{int(item[:-1])} steps", int(item[:-1]) * per_step))
        else:
            sizes.append((f"{int(item):,} events", int(item)))
    return sizes


def targets(total: int, results: dict) -> list[tuple[str, str, bool]]:
    """(target, measured, met) for one trace: 1 s per 1M events for the counters; an energy
    model 5 s for about 1M events, 60 s per 10M for a larger trace; RSS under 1 GB."""
    rows = []
    for command, r in results.items():
        budget = total / 1e6 if command == "count" else 5.0 if total < 5_000_000 else 60 * total / 10_000_000
        measured = r["error"] if r["seconds"] is None else f"{r['seconds']:.2f} s"
        rows.append((f"{command} over {total:,} events < {budget:.1f} s", measured,
                     r["seconds"] is not None and r["seconds"] < budget))
        if r["hwm_mb"] is not None:
            rows.append((f"{command} peak RSS over {total:,} events < 1 GB", f"{r['hwm_mb']:,.0f} MB", r["hwm_mb"] < 1024))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100s,600s,1000000,10000000",
                        help="trace sizes: Ns for N training steps, a number for at least that many events")
    parser.add_argument("--commands", default=",".join(COMMANDS), help=f"a subset of {','.join(COMMANDS)}")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds a command may take")
    parser.add_argument("--workload", default="vgg")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--part-events", type=int, default=PART_EVENTS)
    parser.add_argument("--no-online", action="store_true", help="skip SpikingJelly's online counters")
    parser.add_argument("--keep", metavar="DIR", help="build the traces in DIR and keep them; a later run with the "
                        "same DIR reuses the captured steps (with --no-online) and every trace already built there")
    parser.add_argument("--engines", metavar="RANKSxEVENTS", help="also the dask engine (2 local workers) against the "
                        "in-process one on 8 copies of a trace of RANKS ranks of EVENTS events each, e.g. 4x100000 "
                        "(benchmarks/engine_comparison.py; needs the cluster extra)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-command", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:  # one measurement, in its own process
        print(json.dumps(measure_here(Path(args.child), args.child_command, args.repeats)))
        return
    commands = [c for c in args.commands.split(",") if c]
    scratch = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="spiketrace-analysis-"))
    source = scratch / f"source-{args.workload}-{args.steps}"
    if args.keep and args.no_online and (source / "manifest.json").exists():  # kept from an earlier run
        with open_trace(source) as captured:
            events, plain, online = captured.count("events"), 0.0, 0.0
    else:
        shutil.rmtree(source, ignore_errors=True)
        events, plain, online = capture(args.workload, args.steps, source, 0 if args.no_online else 3)
    print(f"captured {args.steps} steps of {args.workload}: {events:,} events ({events / args.steps:,.0f} a step); "
          f"parts of {args.part_events:,} events; {args.repeats} run(s) per command")
    outcomes, per_event = [], {}
    for index, (label, wanted) in enumerate(sizes_of(args.sizes, events / args.steps)):
        path, start = scratch / f"trace-{source.name}-{int(wanted)}-{args.part_events}", time.perf_counter()
        kept = args.keep and (path / "manifest.json").exists()
        if kept:  # checked when it was built
            with open_trace(path, verify=False) as kept:
                total = kept.count("events")
            print(f"\nkept the {label} trace: {total:,} events ({path})", flush=True)
        else:
            shutil.rmtree(path, ignore_errors=True)
            total = build(source, path, int(wanted), args.part_events)
            size = sum(f.stat().st_size for f in path.rglob("*.parquet"))
            print(f"\nbuilt the {label} trace: {total:,} events ({total // events * args.steps} steps) in "
                  f"{time.perf_counter() - start:.1f} s, {size / 2**20:.1f} MiB ({size / total:.2f} B/event)", flush=True)
        if index == 0 and not kept:
            with open_trace(path) as trace, open_trace(source) as captured:
                problems = trace.warnings + trace.validate()
                if count(trace).totals() != {k: v * (total // events) for k, v in count(captured).totals().items()}:
                    problems.append(f"count() totals are not {total // events} x those of the captured steps")
            print("open_trace warnings, validate(), totals = tiles x captured: "
                  + ("; ".join(problems) if problems else "all fine"))
        results = {command: measure(path, command, args.repeats, args.timeout) for command in commands}
        report(label, total, results)
        if total >= 1_000_000:
            outcomes += targets(total, results)
            per_event[total] = {c: r["seconds"] / total for c, r in results.items() if r["seconds"] is not None}
        if index == 0 and "count" in commands:
            profile(path)
        if not args.keep:
            shutil.rmtree(path)
    if len(per_event) >= 2:  # the time per event at the largest size against that at the smallest >= 1M
        small, big = per_event[min(per_event)], per_event[max(per_event)]
        for command in (c for c in big if c in small):
            ratio = big[command] / small[command]
            outcomes.append((f"{command}: time per event at {max(per_event):,} within 1.5x of {min(per_event):,}",
                             f"{ratio:.2f}x", ratio <= 1.5))
    if args.engines:
        from benchmarks.engine_comparison import compare

        compare(source, scratch, args.engines, args.part_events, args.timeout)
    if not args.no_online:
        per_op = (online - plain) / events
        print(f"\n## SpikingJelly DispatchCounterMode (5 counters), online over the same {args.steps} steps ({events:,} ops)\n")
        print("| plain s | with counters s (x) | extra ms/op | extra for 1M events online |")
        print("|---|---|---|---|")
        print(f"| {plain:.2f} | {online:.2f} ({online / plain:.2f}x) | {1e3 * per_op:.3f} | {per_op * 1e6:,.0f} s |")
    if outcomes:
        print("\n## Targets (scaled to the events the tiled traces really have)\n")
        print("| target | measured | met |\n|---|---|---|")
    for target, measured, met in outcomes:
        print(f"| {target} | {measured} | {'yes' if met else 'NO'} |")
    if not args.keep:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
