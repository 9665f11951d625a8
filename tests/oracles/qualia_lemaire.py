"""Golden numbers for the Lemaire "qualia" convention, from Qualia 2.6.0 itself.

Run by hand (not part of CI; it needs PyPI and takes a few minutes the first time):

    python tests/oracles/qualia_lemaire.py            # writes tests/oracles/qualia_lemaire_golden.json

It creates its own virtual environment under /tmp (python -m venv), installs torch==2.13.0
(the local CPU wheel; a bare `torch` is never resolved), spikingjelly 2.0.0 and Qualia 2.6.0
(qualia-core, -plugin-snn, -codegen-core, -codegen-plugin-snn, with --no-deps so torch stays
put, then the few packages they import), then re-runs this file inside it with `--inside`.
There it builds the models below, runs Qualia's public EnergyEstimationMetric (its real
Lightning predict path: reset_net, then the model T times per batch, or once on [T, B, ...]
in multi-step mode) and reads back the per-layer CSV Qualia writes. Qualia is AGPL: it is
only run here, in its own environment; none of its code is copied into spiketrace.

The model builders are plain torch + SpikingJelly and import nothing from Qualia, so the test
(tests/test_lemaire_differential.py) builds the very same models from this file, records
them with spiketrace's Recorder and compares our "qualia" convention with the JSON. Weights
and inputs come from closed-form integer patterns, not from a random generator, and a sha256
digest of every parameter and input is stored with the numbers so the test can prove it
rebuilt the same models.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "qualia_lemaire_golden.json"
VENV = Path(os.environ.get("QUALIA_VENV", "/tmp/spiketrace-qualia-venv"))
QUALIA_VERSION = "2.6.0"
PACKAGES_NO_DEPS = [
    "spikingjelly==2.0.0",
    f"qualia-core=={QUALIA_VERSION}",
    f"qualia-plugin-snn=={QUALIA_VERSION}",
    f"qualia-codegen-core=={QUALIA_VERSION}",
    f"qualia-codegen-plugin-snn=={QUALIA_VERSION}",
    # qualia_core imports lightning at module import time
    "lightning", "pytorch-lightning", "torchmetrics", "lightning-utilities",
]
PACKAGES = ["numpy", "loguru", "tqdm", "packaging", "scipy", "tomlkit", "colorful", "gitpython", "blosc2",
            "pydantic", "typing_extensions", "jinja2", "tabulate", "PyYAML", "fsspec[http]"]

# Every case: (name, description, builder kwargs). T timesteps, B samples in one batch.
CASES = {
    "mlp_if": dict(description="Flatten -> Linear(16,8) -> IF -> Linear(8,4) -> IF; binary input, single-step",
                   kind="mlp", neuron="if", binary=True, step_mode="s"),
    "mlp_lif": dict(description="Flatten -> Linear(16,8) -> LIF(tau=2) -> Linear(8,4) -> LIF(tau=2); binary input, single-step",
                    kind="mlp", neuron="lif", binary=True, step_mode="s"),
    "cnn_if": dict(description="Conv2d(2,4,k3,s1,p1) -> IF -> Conv2d(4,4,k3,s2,no bias) -> IF -> Flatten -> "
                               "Linear(36,5) -> LIF; binary 8x8 input, single-step",
                   kind="cnn", neuron="if", binary=True, step_mode="s"),
    "cnn_analog": dict(description="cnn_if with a non-binary (direct-encoded) input: Qualia's 'Hybrid' first layer",
                       kind="cnn", neuron="if", binary=False, step_mode="s"),
    "cnn_lif_multistep": dict(description="cnn_if with LIF neurons in multi-step mode (model([T,B,...]) once)",
                              kind="cnn", neuron="lif", binary=True, step_mode="m"),
    "conv1d_lif": dict(description="Conv1d(2,3,k3,s2) -> LIF -> Flatten -> Linear(21,4) -> IF; binary length-16 input",
                       kind="conv1d", neuron="lif", binary=True, step_mode="s"),
    "mlp_formal_hidden": dict(description="Flatten -> Linear(16,8) -> IF -> torch.nn.Linear(8,4) (not a StepModule: "
                                          "Qualia's formal-layer formulas) -> IF; binary input",
                              kind="mlp_formal", neuron="if", binary=True, step_mode="s"),
    "mlp_plif": dict(description="Flatten -> Linear(16,8) -> ParametricLIF -> Linear(8,4) -> ParametricLIF; binary input",
                     kind="mlp", neuron="plif", binary=True, step_mode="s"),
    "sresnet_add": dict(description="Conv2d(2,4,k3,p1) -> IF = s1 -> Conv2d(4,4,k3,p1) -> IF = s2 -> SNN Add(s2, s1) "
                                    "(spike counts up to 2) -> Conv2d(4,4,k3,s2,no bias) -> IF -> Flatten -> "
                                    "Linear(36,5) -> LIF; binary 8x8 input, single-step",
                        kind="sresnet", neuron="if", binary=True, step_mode="s", add="snn"),
    "sresnet_formal_add": dict(description="sresnet_add with Qualia's formal Add (qualia_core, not a StepModule): "
                                           "the Add itself is costed with the formal-layer formulas",
                               kind="sresnet", neuron="if", binary=True, step_mode="s", add="formal"),
}
TIMESTEPS = 4
BATCH = 3
SETTINGS = [  # (label, EnergyEstimationMetric kwargs)
    ("mem32_fifo1000", dict(mem_width=32, fifo_size=1000)),
    ("mem8_fifo64", dict(mem_width=8, fifo_size=64)),
]


# ---------------------------------------------------------------------------------------------
# Models and inputs (torch + SpikingJelly only; imported by the test too)
# ---------------------------------------------------------------------------------------------
def _pattern(n: int, salt: int):
    """n integers in [0, 97): a fixed multiplicative-hash pattern, the same on every machine."""
    import torch

    index = torch.arange(n, dtype=torch.int64)
    return (index * 2654435761 + salt * 40503 + 12345) % 97


def _fill(model) -> None:
    """Weights in [-0.5, 0.7) and biases in [-0.1, 0.3): big enough to make the neurons fire."""
    import torch

    with torch.no_grad():
        for salt, (name, parameter) in enumerate(sorted(model.named_parameters())):
            values = _pattern(parameter.numel(), salt).to(torch.float32) / 97.0
            scale, offset = (0.4, -0.1) if name.endswith("bias") else (1.2, -0.5)
            parameter.copy_((values * scale + offset).reshape(parameter.shape))


def _add_module(kind: str):
    """Qualia's Add layer (formal, or its SpikingJelly StepModule variant), which Qualia needs
    for a residual (a Python `+` fails its graph tracer). Without Qualia (the test's
    environment) a stand-in of the same class name and behaviour: spiketrace recognises an Add
    by its class name and its is-a-StepModule, as Qualia tells formal from spiking layers."""
    try:
        if kind == "formal":
            from qualia_core.learningmodel.pytorch.layers.Add import Add
        else:
            from qualia_plugin_snn.learningmodel.pytorch.layers.spikingjelly.Add import Add
        return Add()
    except ImportError:
        from spikingjelly.activation_based.base import StepModule
        from torch import nn

        class Add(nn.Module):
            def forward(self, a, b):
                return a + b

        if kind == "formal":
            return Add()
        spiking = type("Add", (Add, StepModule), {})
        module = spiking()
        module.step_mode = "s"
        return module


def _sresnet(spiking, add):
    """A spiking residual block as Qualia's SResNet builds it: the Add sums two spike maps."""
    from spikingjelly.activation_based import layer, neuron
    from torch import nn

    class SResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.sn1 = layer.Conv2d(2, 4, 3, stride=1, padding=1), spiking()
            self.conv2, self.sn2 = layer.Conv2d(4, 4, 3, stride=1, padding=1), spiking()
            self.add = add
            self.conv3, self.sn3 = layer.Conv2d(4, 4, 3, stride=2, bias=False), spiking()
            self.flatten, self.fc, self.sn4 = layer.Flatten(), layer.Linear(36, 5), neuron.LIFNode(tau=2.0)

        def forward(self, x):
            s1 = self.sn1(self.conv1(x))
            s2 = self.sn2(self.conv2(s1))
            y = self.sn3(self.conv3(self.add(s2, s1)))
            return self.sn4(self.fc(self.flatten(y)))

    return SResNet()


def build_model(name: str):
    """The case's model, filled, in eval mode, with the attributes Qualia's tracer reads."""
    from spikingjelly.activation_based import functional, layer, neuron
    from torch import nn

    case = CASES[name]

    def spiking():
        if case["neuron"] == "plif":
            return neuron.ParametricLIFNode(init_tau=2.0)
        return neuron.IFNode() if case["neuron"] == "if" else neuron.LIFNode(tau=2.0)

    if case["kind"] in ("mlp", "mlp_formal"):
        second = nn.Linear(8, 4) if case["kind"] == "mlp_formal" else layer.Linear(8, 4)
        model = nn.Sequential(layer.Flatten(), layer.Linear(16, 8), spiking(), second, spiking())
        input_shape = (16, 1)  # channels-last (L, C), as Qualia describes a sample
    elif case["kind"] == "cnn":
        model = nn.Sequential(layer.Conv2d(2, 4, 3, stride=1, padding=1), spiking(),
                              layer.Conv2d(4, 4, 3, stride=2, bias=False), spiking(),
                              layer.Flatten(), layer.Linear(36, 5), neuron.LIFNode(tau=2.0))
        input_shape = (8, 8, 2)  # (H, W, C)
    elif case["kind"] == "sresnet":
        model = _sresnet(spiking, _add_module(case["add"]))
        input_shape = (8, 8, 2)  # (H, W, C)
    elif case["kind"] == "conv1d":
        model = nn.Sequential(layer.Conv1d(2, 3, 3, stride=2), spiking(), layer.Flatten(), layer.Linear(21, 4),
                              neuron.IFNode())
        input_shape = (16, 2)  # (L, C)
    else:
        raise KeyError(name)
    _fill(model)
    functional.set_step_mode(model, case["step_mode"])
    model.is_snn = True
    model.timesteps = TIMESTEPS
    model.step_mode = case["step_mode"]
    # An SNN's input_shape leads with the timestep dimension (Qualia prepends no dummy batch for SNNs);
    # the energy formulas read only the per-sample part, channels last.
    model.input_shape = (TIMESTEPS, *input_shape)
    return model.eval()


def build_input(name: str):
    """One batch of BATCH samples, channels first ([B, C, ...]), the same at every timestep."""
    import torch

    case = CASES[name]
    shape = {"mlp": (BATCH, 1, 16), "mlp_formal": (BATCH, 1, 16), "cnn": (BATCH, 2, 8, 8), "sresnet": (BATCH, 2, 8, 8),
             "conv1d": (BATCH, 2, 16)}[case["kind"]]
    values = _pattern(int(torch.tensor(shape).prod()), 99).reshape(shape)
    if case["binary"]:
        return (values < 35).to(torch.float32)
    return (values.to(torch.float32) / 97.0 * 2.0 - 0.5).clamp(min=0.0)  # non-negative, ~25 % zeros


def run_inference(model, x, step_mode: str, call=None) -> None:
    """What Qualia's SpikingJelly(MultiStep).TrainerModule.forward does for one batch:
    reset, then T single-step calls on the same x, or one call on x repeated to [T, B, ...]."""
    import torch
    from spikingjelly.activation_based import functional

    call = call or model
    functional.reset_net(model)
    with torch.no_grad():
        if step_mode == "m":
            call(x.unsqueeze(0).repeat(TIMESTEPS, *([1] * x.dim())))
        else:
            for _ in range(TIMESTEPS):
                call(x)


def digest(model, x) -> str:
    """sha256 over every parameter (sorted by name) and the input, as float32 bytes."""
    import torch

    h = hashlib.sha256()
    for name, parameter in sorted(model.named_parameters()):
        h.update(name.encode())
        h.update(parameter.detach().to(torch.float32).contiguous().numpy().tobytes())
    h.update(x.to(torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# Inside the Qualia environment
# ---------------------------------------------------------------------------------------------
def _qualia_case(name: str, settings: dict, workdir: Path) -> dict:
    import numpy as np
    import torch
    from qualia_core.datamodel.RawDataModel import RawData
    from qualia_core.qualia import TrainResult
    from qualia_plugin_snn.learningframework.SpikingJelly import SpikingJelly
    from qualia_plugin_snn.learningframework.SpikingJellyMultiStep import (
        SpikingJellyMultiStep,
    )
    from qualia_plugin_snn.postprocessing.EnergyEstimationMetric import (
        EnergyEstimationMetric,
    )

    case = CASES[name]
    model = build_model(name)
    x = build_input(name)
    # Qualia datasets are channels-last; its DatasetFromArray turns them back to channels-first.
    x_last = x.numpy().transpose(0, 2, 3, 1) if x.dim() == 4 else x.numpy().swapaxes(1, 2)
    testset = RawData(x=np.ascontiguousarray(x_last), y=np.eye(4, dtype=np.float32)[np.arange(BATCH) % 4])
    framework = (SpikingJellyMultiStep if case["step_mode"] == "m" else SpikingJelly)(
        enable_progress_bar=False, accelerator="cpu")
    run_name = f"{name}_{settings['mem_width']}_{settings['fifo_size']}"
    trainresult = TrainResult(name=run_name, i=0, model=model, params=0, mem_params=0, acc=0.0, metrics={},
                              datamodel=None, trainset=None, testset=testset, framework=framework,
                              batch_size=BATCH, optimizer=None, log=False, dataaugmentations=[],
                              experimenttracking=None, parent_model_hash=None, model_hash=None)
    previous = Path.cwd()
    os.chdir(workdir)
    try:
        EnergyEstimationMetric(**settings)(trainresult, {})
    finally:
        os.chdir(previous)
    files = sorted((workdir / "logs").rglob(f"*{run_name}_mem*.csv"))
    if len(files) != 1:
        raise RuntimeError(f"expected one Qualia CSV for {run_name}, found {files}")
    with files[0].open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    fields = ("mem_pot", "mem_weights", "mem_bias", "mem_io", "mem_total", "ops", "addr", "opsaddr", "total",
              "input_spikerate", "output_spikerate", "input_is_binary", "is_sj")
    layers = [{"name": row["name"], **{k: _number(row[k]) for k in fields if k in row}} for row in rows]
    return {"layers": layers, "total": next(r for r in layers if r["name"] == "Total"),
            "digest": digest(build_model(name), build_input(name)), "torch": torch.__version__}


def _number(text: str):
    if text in ("True", "False"):
        return text == "True"
    if text == "Hybrid":
        return text
    try:
        return float(text)
    except ValueError:
        return text


def inside(output: Path) -> None:
    from importlib import metadata

    results = {}
    with tempfile.TemporaryDirectory(prefix="qualia-oracle-") as workdir:
        for name, case in CASES.items():
            for label, settings in SETTINGS:
                result = _qualia_case(name, settings, Path(workdir))
                results.setdefault(name, {"description": case["description"], "step_mode": case["step_mode"],
                                          "binary_input": case["binary"], "digest": result["digest"],
                                          "settings": {}})
                results[name]["settings"][label] = {"parameters": settings, "layers": result["layers"],
                                                    "total": result["total"]}
    document = {
        "generator": "tests/oracles/qualia_lemaire.py",
        "reference": f"qualia-plugin-snn {metadata.version('qualia-plugin-snn')} EnergyEstimationMetric "
                     "(public __call__, Lightning predict, per-layer CSV)",
        "versions": {p: metadata.version(p) for p in ("torch", "spikingjelly", "qualia-core", "qualia-plugin-snn",
                                                       "qualia-codegen-core", "qualia-codegen-plugin-snn")},
        "timesteps": TIMESTEPS, "batch": BATCH,
        "units": "pJ per inference (per sample, all timesteps), as Qualia reports them; spike rates per neuron per timestep",
        "cases": results,
    }
    output.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    print(f"wrote {output}")


# ---------------------------------------------------------------------------------------------
# Outside: make the environment, then run this file inside it
# ---------------------------------------------------------------------------------------------
def setup_venv() -> Path:
    python = VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet"]
    subprocess.run(pip + ["torch==2.13.0"], check=True)  # the local CPU wheel; never a bare `torch`
    subprocess.run(pip + ["--no-deps", *PACKAGES_NO_DEPS], check=True)
    subprocess.run(pip + PACKAGES, check=True)
    check = subprocess.run([str(python), "-c", "import torch; print(torch.__version__)"], check=True,
                           capture_output=True, text=True)
    if not check.stdout.startswith("2.13.0"):
        raise RuntimeError(f"the oracle environment has torch {check.stdout.strip()}, not 2.13.0")
    return python


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inside", action="store_true", help="run the cases (inside the Qualia environment)")
    parser.add_argument("--output", type=Path, default=GOLDEN)
    args = parser.parse_args()
    if args.inside:
        sys.path.insert(0, str(HERE))
        inside(args.output)
        return
    python = setup_venv()
    subprocess.run([str(python), str(Path(__file__).resolve()), "--inside", "--output", str(args.output.resolve())],
                   check=True, env={**os.environ, "PYTHONPATH": ""})


if __name__ == "__main__":
    main()
