"""Re-costing one trace under 10,000 NeuroMC presets, beside SpikingJelly's per-preset get_report().

    python benchmarks/recost_throughput.py [--workload vgg] [--presets 10000] [--repeats 3]

1. Capture one training step of a spiking VGG-style net (benchmarks/workloads.py) with
   Recorder, and, in a separate run of the same seeded net, with SpikingJelly's
   NeuroMCEnergyProfiler (its probes would otherwise reach the recorder).
2. spiketrace: the mapper once (neuromc.activity); the bulk costing of a 10 x 10 x 10 x 10
   sweep of SRAM and DRAM read energies and bandwidths (10,000 presets) on that activity;
   and the whole spiketrace.analyze.energy.recost call, mapper included. Medians of --repeats.
3. SpikingJelly: get_report() per preset on the already-profiled profiler, its preset check
   and unsupported-op refusal bypassed, over --reference-presets presets; per-preset ms.

4. Every other model on the same trace (an inference forward is recorded after the training
   step, so SpikeSim has Conv2d calls to cost, with the spike maps its event mode needs): the
   mapper once, the bulk costing (the model's sweep_totals) of a sweep of about --presets
   presets over its pJ parameters, the whole recost call, and its per-preset costing
   (cost() per preset, over --reference-presets presets) extrapolated to the same count.

Targets: the 10,000 presets cost in < 1 s, >= 15x the reference's per-preset speed, no model
run; the whole recost call < 2 s; for every model.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spikingjelly.activation_based import functional
from spikingjelly.activation_based.op_counter import NeuroMCEnergyProfiler
from workloads import make, train_step

from spiketrace.analyze import open_trace
from spiketrace.analyze.energy import _model, load_preset, map_activity, neuromc, recost, sweep_presets
from spiketrace.analyze.energy.neuromc.sweep import sweep_totals
from spiketrace.capture import Recorder

SRAM, DRAM = "sram_fp_conv_in_w", "dram"


def capture(workload: str, path: Path) -> None:
    import torch

    model, x, target, loss_fn, optimizer = make(workload, "sgd")
    with Recorder(path, model=model, optimizer=optimizer, keep_binary_inputs=True) as recorder:
        train_step(model, x, target, loss_fn, optimizer, stage=lambda name: recorder.stage(name, phase=name))
        with recorder.suspend():
            functional.reset_net(model)
            model.eval()
        with torch.no_grad(), recorder.stage("inference", phase="forward"):
            model(x)


# model -> (base preset, overrides, the swept keys and their ranges)
OTHER_MODELS = {
    "compute": ("compute-fp32-45nm", (), {"e_mac_pj": (0.1, 4.6), "e_ac_pj": (0.03, 0.9),
                                          "e_memory_pj_per_byte": (1.0, 24.96)}),
    "lemaire (spikingjelly)": ("lemaire-spikingjelly", (), {"e_add_pj": (0.03, 0.1), "e_mul_pj": (1.0, 3.1),
                                                            "memory_breakpoints.p1.pj_per_byte": (1.0, 2.5),
                                                            "snn_fifo_capacity_elements": (100, 10000)}),
    "lemaire (qualia)": ("lemaire-qualia", (), {"e_add_pj": (0.03, 0.1), "e_mul_pj": (1.0, 3.1),
                                                "qualia.ram_slope": (5e-6, 2e-5), "qualia.ram_floor": (5.0, 15.0)}),
    "spikesim (dense)": ("spikesim-rram-64", (), {"adc_pj": (1.0, 3.0), "neuron_pj": (1.0, 6.0),
                                                  "rram_xbar_pj": (0.5, 2.0), "htree_pj": (50.0, 200.0)}),
    "spikesim (event)": ("spikesim-rram-64", ("activity_mode=event",),
                         {"adc_pj": (1.0, 3.0), "neuron_pj": (1.0, 6.0), "rram_xbar_pj": (0.5, 2.0),
                          "htree_pj": (50.0, 200.0)}),
}


def other_models(path: Path, presets: int, repeats: int, reference_presets: int) -> list[tuple]:
    """(model, presets, mapper s, bulk costing s, whole recost s, per-preset ms) per model."""
    rows = []
    with open_trace(path) as trace:
        for label, (preset, overrides, ranges) in OTHER_MODELS.items():
            model = label.split()[0]
            side = round(presets ** (1 / len(ranges)))
            sweep = {key: list(np.linspace(low, high, side)) for key, (low, high) in ranges.items()}
            if model == "lemaire" and "snn_fifo_capacity_elements" in sweep:
                sweep["snn_fifo_capacity_elements"] = [round(v) for v in sweep["snn_fifo_capacity_elements"]]
            base = load_preset(preset, overrides)
            module = _model(model)
            mapper, costing, whole = [], [], []
            for _ in range(repeats):
                started = time.perf_counter()
                mapped = map_activity(trace, model)
                mapper.append(time.perf_counter() - started)
                grids = np.meshgrid(*(np.asarray(v, dtype=float) for v in sweep.values()), indexing="ij")
                started = time.perf_counter()
                module.sweep_totals(mapped, base.costs(), {k: g.ravel() for k, g in zip(sweep, grids)})
                costing.append(time.perf_counter() - started)
                started = time.perf_counter()
                frame = recost(trace, model, sweep=sweep, base=base)
                whole.append(time.perf_counter() - started)
            singles = sweep_presets(base, {k: v[:1] * reference_presets for k, v in list(sweep.items())[:1]})
            started = time.perf_counter()
            for single in singles:
                module.cost(mapped, single.costs())
            per_preset_ms = 1e3 * (time.perf_counter() - started) / len(singles)
            rows.append((label, frame["preset"].nunique(), statistics.median(mapper), statistics.median(costing),
                         statistics.median(whole), per_preset_ms))
    return rows


def reference(workload: str, n: int) -> tuple[float, float]:
    """(profiled step seconds, median ms per get_report() under a new preset)."""
    model, x, target, loss_fn, optimizer = make(workload, "sgd")
    profiler = NeuroMCEnergyProfiler()
    profiler.bind_model(model)
    profiler.bind_optimizer(optimizer)
    started = time.perf_counter()
    with profiler:
        train_step(model, x, target, loss_fn, optimizer, stage=lambda name: profiler.stage(name, phase=name),
                   before_step=lambda: profiler.record_optimizer_step("optimizer"))
    profiled = time.perf_counter() - started
    profiler._unsupported_ops = list  # bypass its refusal of ops it has no rule for
    config = profiler.memory_config
    config.validate = lambda: None  # and its preset check
    base = dict(config.memory_instances)
    times = []
    for i in range(n):
        config.memory_instances[SRAM] = dataclasses.replace(base[SRAM], r_cost=1.0 + i * 0.01)
        started = time.perf_counter()
        profiler.get_report()
        times.append(time.perf_counter() - started)
    return profiled, 1e3 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", default="vgg")
    parser.add_argument("--presets", type=int, default=10_000, help="a perfect 4th power: 10 x 10 x 10 x 10")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--reference-presets", type=int, default=20)
    args = parser.parse_args()
    side = round(args.presets ** 0.25)
    sweep = {
        f"memory_instances.{SRAM}.r_cost": list(np.linspace(1.0, 10.0, side)),
        f"memory_instances.{SRAM}.r_bw": list(np.linspace(8.0, 64.0, side)),
        f"memory_instances.{DRAM}.r_cost": list(np.linspace(100.0, 1000.0, side)),
        f"memory_instances.{DRAM}.r_bw": list(np.linspace(16.0, 256.0, side)),
    }
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / "trace"
        started = time.perf_counter()
        capture(args.workload, path)
        capture_s = time.perf_counter() - started
        mapper, costing, whole = [], [], []
        base = load_preset("neuromc-like-v1").costs()
        with open_trace(path) as trace:
            events = trace.count("events")
            for _ in range(args.repeats):
                started = time.perf_counter()
                mapped = neuromc.activity(trace)
                mapper.append(time.perf_counter() - started)
                # the costing alone, on the mapped activity: what recost does after mapping
                grids = np.meshgrid(*(np.asarray(v, dtype=float) for v in sweep.values()), indexing="ij")
                started = time.perf_counter()
                sweep_totals(mapped, base, {k: g.ravel() for k, g in zip(sweep, grids)})
                costing.append(time.perf_counter() - started)
                started = time.perf_counter()
                frame = recost(trace, "neuromc", sweep=sweep)
                whole.append(time.perf_counter() - started)
        presets = frame["preset"].nunique()
        others = other_models(path, args.presets, args.repeats, args.reference_presets)
    profiled_s, reference_ms = reference(args.workload, args.reference_presets)
    ours_ms = 1e3 * statistics.median(costing) / presets
    print(f"workload {args.workload}: {events:,} events captured in {capture_s:.2f} s; {presets:,} presets; "
          f"medians of {args.repeats}")
    print("| step | spiketrace | SpikingJelly 2.0.0 |\n|---|---|---|")
    print(f"| model run | none (trace captured once) | {profiled_s:.2f} s profiled step per trace |")
    print(f"| mapper (once) | {statistics.median(mapper):.3f} s | - |")
    print(f"| cost {presets:,} presets (on the mapped activity) | "
          f"{statistics.median(costing):.3f} s ({ours_ms * 1e3:.1f} us/preset) | "
          f"{reference_ms * presets / 1e3:.1f} s extrapolated ({reference_ms:.2f} ms/preset, "
          f"{args.reference_presets} measured) |")
    print(f"| whole recost call | {statistics.median(whole):.3f} s | - |")
    speedup = reference_ms / ours_ms
    print(f"\nper-preset speed-up: {speedup:,.0f}x")
    print(f"targets: {presets:,} presets < 1 s: {'met' if statistics.median(costing) < 1 else 'NOT met'}; "
          f">= 15x: {'met' if speedup >= 15 else 'NOT met'}; whole call < 2 s: "
          f"{'met' if statistics.median(whole) < 2 else 'NOT met'}")
    print(f"\n## every model: a sweep of its pJ parameters, bulk costing (sweep_totals), medians of {args.repeats}\n")
    print("| model | presets | mapper (once) s | bulk costing s | us/preset | whole recost s | cost() per preset ms "
          "(extrapolated to the sweep) | speed-up | < 1 s | whole < 2 s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label, n, mapper_s, costing_s, whole_s, single_ms in [("neuromc", presets, statistics.median(mapper),
                                                                statistics.median(costing), statistics.median(whole),
                                                                None)] + others:
        single = "-" if single_ms is None else f"{single_ms:.2f} ({single_ms * n / 1e3:,.1f} s)"
        ratio = "-" if single_ms is None else f"{single_ms * 1e-3 * n / costing_s:,.0f}x"
        print(f"| {label} | {n:,} | {mapper_s:.3f} | {costing_s:.4f} | {1e6 * costing_s / n:.2f} | {whole_s:.3f} | "
              f"{single} | {ratio} | {'yes' if costing_s < 1 else 'NO'} | {'yes' if whole_s < 2 else 'NO'} |")


if __name__ == "__main__":
    main()
