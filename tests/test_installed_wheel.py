"""What a user installs, run as a user runs it: the built wheel in fresh virtual environments
outside the repository (no editable install, no source tree on the path), one with torch and
one without, and the sdist built where no C compiler works.

With torch: the demo, the capture API in a script of its own, and every command on the
demo's trace. Without torch: every analysis command on the same trace, printing the same
numbers, and the demo refused in one line. From the sdist with no compiler: the install goes
on, capture runs its Python paths and writes a trace whose counts equal the wheel's.

Slow (venvs, installs): marked so, and run by the README's second pytest (and so by CI).
SPIKETRACE_DIST names a folder holding the sdist and the wheel CI built from its clean
checkout; without it the test builds them from this checkout as tests/test_wheel_contents.py does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.test_wheel_contents import checkout_files

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
TORCH = "torch==2.13.0"  # the local CPU wheel (.ci/run's torch)
MODELS = ("compute", "lemaire", "neuromc", "spikesim")

# Every analysis command on the demo's trace (TRACE), run the same in both venvs: name -> argv.
ANALYSIS_COMMANDS = {
    "info": ["info", "TRACE", "--format", "json"],
    "validate": ["validate", "TRACE", "--format", "json"],
    "views": ["views"],
    "counts": ["counts", "TRACE", "--format", "json"],
    "counts by stage": ["counts", "TRACE", "--by", "stage", "--format", "csv"],
    **{f"energy {model}": ["energy", "TRACE", "--model", model, "--format", "json"] for model in MODELS},
    "energy paper": ["energy", "TRACE", "--model", "paper", "--samples", "8", "--format", "json"],
    "energy chip": ["energy", "TRACE", "--model", "chip", "--preset", "truenorth-2014", "--samples", "8", "--format", "json"],
    "compare": ["compare", "TRACE", "--samples", "8", "--format", "json", "--plot", "OUT/compare.png"],
    "neurobench": ["neurobench", "TRACE", "--format", "json"],
    "recost": ["recost", "TRACE", "--preset", "compute-fp32-45nm", "--preset", "compute-fp16-45nm",
               "--out", "OUT/recost.csv"],
    "plot": ["plot", "TRACE", "energy", "--out", "OUT/energy.png"],
    "report": ["report", "TRACE", "--out", "OUT/report.html"],
    "sql": ["sql", "TRACE", "SELECT count(*) AS n FROM events", "--format", "csv"],
    "diff": ["diff", "TRACE", "TRACE", "--format", "json"],
    "collectives": ["collectives", "TRACE"],
    "presets list": ["presets", "list", "--format", "json"],
    "presets show": ["presets", "show", "neuromc-like-v1", "--format", "json"],
    "presets validate": ["presets", "validate", "PRESET_FILE"],
}
# Outputs that are the same document whichever venv printed them (no paths, no times).
SAME_NUMBERS = ("counts", "counts by stage", *(f"energy {m}" for m in MODELS), "energy paper", "energy chip", "neurobench",
                "sql")
MADE = ("recost.csv", "energy.png", "report.html", "compare.png")  # the files the commands write into OUT


def command_lines(trace: Path, out: Path, preset_file: str) -> dict[str, list[str]]:
    """ANALYSIS_COMMANDS with the trace, the output folder and a shipped preset file filled in
    (scripts/torch_matrix.py runs the same lines beside each torch)."""
    fill = {"TRACE": str(trace), "PRESET_FILE": preset_file}
    return {name: [fill.get(a, a.replace("OUT/", f"{out}/")) for a in argv] for name, argv in ANALYSIS_COMMANDS.items()}


# the path of a preset file inside the installed package, printed by its Python
PRESET_FILE_CODE = ("import spiketrace.analyze.presets as p, pathlib; "
                    "print(pathlib.Path(p.__file__).parent / 'neuromc-like-v1.toml')")


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> dict[str, Path]:
    given = os.environ.get("SPIKETRACE_DIST")
    folder = Path(given) if given else tmp_path_factory.mktemp("dist")
    if not given:
        source = tmp_path_factory.mktemp("source")
        for name in checkout_files():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
        subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(folder), str(source)],
                       check=True, capture_output=True)
    (wheel,) = folder.glob("spiketrace-*.whl")
    (sdist,) = folder.glob("spiketrace-*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


class Venv:
    """A fresh virtual environment and a working directory outside the repository."""

    def __init__(self, root: Path):
        self.root, self.work = root / "venv", root / "work"
        self.work.mkdir(parents=True)
        venv.create(self.root, with_pip=True)
        self.bin = self.root / "bin"

    def env(self, **extra: str) -> dict[str, str]:
        keep = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "COV_"))}
        return {**keep, "PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": str(self.root), **extra}

    def run(self, *argv: str, check: bool = True, **extra_env: str) -> subprocess.CompletedProcess:
        done = subprocess.run(list(argv), cwd=self.work, env=self.env(**extra_env), capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=900)
        if check:
            assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        return done

    def pip(self, *args: str, **extra_env: str) -> None:
        self.run(str(self.bin / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args,
                 **extra_env)

    def python(self, code: str) -> str:
        return self.run(str(self.bin / "python"), "-c", code).stdout

    def spiketrace(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return self.run(str(self.bin / "spiketrace"), *args, check=check)


@pytest.fixture(scope="module")
def with_torch(dist, tmp_path_factory) -> Venv:
    env = Venv(tmp_path_factory.mktemp("with-torch"))
    env.pip(TORCH, str(dist["wheel"]))
    return env


@pytest.fixture(scope="module")
def without_torch(dist, tmp_path_factory) -> Venv:
    env = Venv(tmp_path_factory.mktemp("without-torch"))
    env.pip(str(dist["wheel"]))
    return env


@pytest.fixture(scope="module")
def demo_trace(with_torch) -> Path:
    with_torch.spiketrace("demo", "demo-trace", "--force")
    return with_torch.work / "demo-trace"


def installed_from(env: Venv) -> str:
    return env.python("import spiketrace.analyze, pathlib; print(pathlib.Path(spiketrace.analyze.__file__).parent)")


def analysis_outputs(env: Venv, trace: Path) -> dict[str, str]:
    out = env.work / "out"
    out.mkdir(exist_ok=True)
    lines = command_lines(trace, out, env.python(PRESET_FILE_CODE).strip())
    outputs = {name: env.spiketrace(*args).stdout for name, args in lines.items()}
    for made in MADE:
        assert (out / made).stat().st_size > 0, made
    return outputs


def test_the_wheel_runs_from_its_own_install(with_torch):
    where = installed_from(with_torch)
    assert where.startswith(str(with_torch.root)) and "site-packages" in where, where
    from spiketrace.schemas.version import __version__

    assert with_torch.spiketrace("--version").stdout.split() == ["spiketrace,", "version", __version__]
    # the compiled extension came with the wheel
    assert with_torch.python("import spiketrace.capture.native as n; print(n.AVAILABLE)").strip() == "True"


def test_every_command_runs_with_torch(with_torch, demo_trace):
    outputs = analysis_outputs(with_torch, demo_trace)
    counts = json.loads(outputs["counts"])
    assert counts["counters"]["flop"]["total"] > 0
    assert json.loads(outputs["validate"])["ok"] is True
    # `spiketrace compact` rewrites a trace in place: on a copy
    shutil.copytree(demo_trace, with_torch.work / "compacted")
    with_torch.spiketrace("compact", str(with_torch.work / "compacted"))
    compacted = json.loads(with_torch.spiketrace("counts", str(with_torch.work / "compacted"), "--format", "json").stdout)
    assert compacted["counters"] == counts["counters"]


def test_the_capture_api_in_a_user_script(with_torch):
    script = with_torch.work / "train.py"
    script.write_text(
        "import torch\n"
        "from spiketrace.capture import Recorder\n"
        "from spiketrace.analyze import open_trace\n"
        "from spiketrace.analyze.counters import counts\n"
        "torch.manual_seed(0)\n"
        "net = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())\n"
        "opt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
        "x = torch.randn(2, 8)\n"
        "with Recorder('user-trace', model=net, optimizer=opt) as rec:\n"
        "    with rec.stage('forward'):\n"
        "        loss = (net(x) ** 2).sum()\n"
        "    with rec.stage('backward'):\n"
        "        loss.backward()\n"
        "    with rec.stage('optimizer'):\n"
        "        opt.step()\n"
        "with open_trace('user-trace') as trace:\n"
        "    frame = counts(trace, ['mac'], by=['stage'])\n"
        "    print(frame[frame.scope == 'Global'].groupby('stage').value.sum().to_json())\n")
    macs = json.loads(with_torch.run(str(with_torch.bin / "python"), str(script)).stdout.splitlines()[-1])
    # Linear(8, 4) on a batch of 2: 2*8*4 = 64 MACs forward (addmm); backward: the weight's
    # gradient, grad_out^T (4x2, 2*relu(y): not binary) @ x (2x8), 64, and no input gradient
    # (x needs none); SGD's update multiplies by no tensor: no MAC
    assert macs == {"backward": 64, "forward": 64}


def test_the_analysis_needs_no_torch(without_torch, with_torch, demo_trace):
    assert without_torch.run(str(without_torch.bin / "python"), "-c", "import torch", check=False).returncode != 0
    where = installed_from(without_torch)
    assert where.startswith(str(without_torch.root)), where
    here, there = analysis_outputs(without_torch, demo_trace), analysis_outputs(with_torch, demo_trace)
    for name in SAME_NUMBERS:
        assert here[name] == there[name], name
    refused = without_torch.spiketrace("demo", "demo-trace", check=False)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "torch" in refused.stderr


def test_the_sdist_installs_where_no_compiler_works(with_torch, demo_trace, dist):
    """The extension is optional: with the compiler failing, the install goes on and capture
    records the same trace in Python (its counts equal the compiled wheel's)."""
    def counters(trace: str) -> dict:
        return json.loads(with_torch.spiketrace("counts", trace, "--format", "json").stdout)["counters"]

    wheel_counts = counters(str(demo_trace))
    with_torch.pip("--no-build-isolation", "setuptools>=77")
    with_torch.pip("--force-reinstall", "--no-deps", "--no-build-isolation", "--no-cache-dir", str(dist["sdist"]),
                   CC="false", CXX="false")
    assert with_torch.python("import spiketrace.capture.native as n; print(n.AVAILABLE)").strip() == "False"
    with_torch.spiketrace("demo", "python-trace", "--force")
    assert counters("python-trace") == wheel_counts
