"""The analysis side runs where torch cannot be imported, on a trace captured for real."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from spiketrace.capture.session.example import record_demo

REPO = Path(__file__).resolve().parents[1]

BLOCK_TORCH = textwrap.dedent(
    """
    import sys
    class NoTorch:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ImportError("torch is blocked in this test")
    sys.meta_path.insert(0, NoTorch())
    sys.path.insert(0, {repo!r})
    """
)

ANALYSE = BLOCK_TORCH + textwrap.dedent(
    """
    import json
    from spiketrace.analyze import count, open_trace
    from spiketrace.analyze.cli import main
    with open_trace({trace!r}) as trace:
        problems = trace.validate()
        ops = trace.sql("SELECT op, count(*) AS n FROM events GROUP BY op").set_index("op")["n"].to_dict()
        flop = count(trace, ["flop", "neuromorphic_memory_access", "neuron_state"]).spikingjelly("flop")
        from spiketrace.analyze.energy import MODELS, energy
        energies = {{model: energy(trace, model).to_json() for model in MODELS}}
    print(json.dumps({{"problems": problems, "ops": ops, "flop": flop, "torch": "torch" in sys.modules,
                      "energy_models": sorted(energies)}}))
    try:
        main(["info", {trace!r}, "--format", "json"], standalone_mode=False)
    finally:
        assert "torch" not in sys.modules
    """
)


def test_real_trace_is_analysed_without_torch(tmp_path):
    trace = record_demo(tmp_path / "demo")
    result = subprocess.run(
        [sys.executable, "-c", ANALYSE.format(repo=str(REPO), trace=str(trace))],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    first, _, info = result.stdout.partition("\n")
    report = json.loads(first)
    assert report["problems"] == [] and report["torch"] is False
    assert "compute" in report["energy_models"]
    assert report["ops"]["aten.addmm.default"] == 2  # fc1 and fc2 forward
    # fc1 = Linear(64, 32) on [T*N=32, 64]: 2*m*n*k + m*n (bias, beta=1)
    assert report["flop"]["SpikingMLP.fc1"]["aten.addmm.default"] == 2 * 32 * 32 * 64 + 32 * 32
    assert json.loads(info)["trace"]["counts"]["events"] == sum(report["ops"].values())
