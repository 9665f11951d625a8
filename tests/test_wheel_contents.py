"""The wheel is the product: built from the checkout as a user's pip builds it (the sdist first,
the wheel from the sdist), it holds `spiketrace/` and its dist-info and nothing else, and in
`spiketrace/` exactly the tree's modules and the data files they read (presets, SQL views,
templates, the schema's README, the py.typed markers), plus the compiled extension.

The expected list is derived from the checkout (git's files, the way a clean clone has them),
not from pyproject's own lists: a module or data file pyproject forgets is a failure here."""

from __future__ import annotations

import fnmatch
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("capture", "analyze", "schemas")
COMPILED_SOURCES = (".c", ".h")  # built into the extension; the wheel carries the .so instead
EXTENSION = "spiketrace/capture/native/_native"


def checkout_files() -> list[str]:
    """The repository's files as a clean clone has them (tracked, plus new ones git does not
    ignore): the build's input, whatever this working tree has built beside them."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                            cwd=ROOT, check=True, capture_output=True).stdout.decode()
    return sorted(name for name in listed.split("\0") if name and (ROOT / name).is_file())


def package_data() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]


def installed_name(path: str) -> str:
    """capture/native/scans.py -> spiketrace/capture/native/scans.py"""
    return f"spiketrace/{path}"


def shipped_by_package_data(path: str, data: dict[str, list[str]]) -> bool:
    """Whether some package's package-data glob, taken relative to that package's folder, matches."""
    posix = PurePosixPath(path)
    for package, patterns in data.items():
        folder = PurePosixPath(*package.split(".")[1:])  # spiketrace.analyze.present -> analyze/present
        if folder in posix.parents and any(fnmatch.fnmatch(str(posix.relative_to(folder)), p) for p in patterns):
            return True
    return False


def expected_wheel_files(files: list[str]) -> set[str]:
    """What `spiketrace/` must hold: every module and every other file of the three packages,
    but the C sources."""
    return {installed_name(f) for f in files
            if f.split("/", 1)[0] in PACKAGES and not f.endswith(COMPILED_SOURCES)}


def test_every_data_file_of_the_tree_is_named_in_package_data():
    """A file the code reads that no package-data glob names is left out of the wheel (the
    editable install, which reads the tree, would never notice)."""
    data = package_data()
    unshipped = [f for f in checkout_files() if f.split("/", 1)[0] in PACKAGES
                 and not f.endswith((".py", *COMPILED_SOURCES)) and not shipped_by_package_data(f, data)]
    assert not unshipped, f"files the wheel would leave out (add them to package-data): {unshipped}"


def test_the_data_check_sees_an_unnamed_file():
    data = {"spiketrace.analyze.presets": ["*.toml"]}
    assert shipped_by_package_data("analyze/presets/neuromc-like-v1.toml", data)
    assert not shipped_by_package_data("analyze/presets/notes.md", data)
    assert not shipped_by_package_data("analyze/present/templates/report.css", data)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """The sdist and the wheel built from a copy of the checkout (no build/ or .so of this tree
    can leak in), with this environment's setuptools (the test extra pins what the build needs)."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    for name in checkout_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(work / "dist"), str(source)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = (work / "dist").glob("*.whl")
    (sdist,) = (work / "dist").glob("*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


def test_the_wheel_holds_the_package_and_its_metadata_only(built):
    names = zipfile.ZipFile(built["wheel"]).namelist()
    top = {name.split("/", 1)[0] for name in names}
    (dist_info,) = [t for t in top if t.endswith(".dist-info")]
    assert top == {"spiketrace", dist_info}, top
    # PEP 639: the license file travels in the dist-info
    assert f"{dist_info}/licenses/LICENSE" in names


def test_the_wheel_holds_every_file_of_the_tree_and_no_other(built):
    shipped = {n for n in zipfile.ZipFile(built["wheel"]).namelist() if n.startswith("spiketrace/")}
    extension = {n for n in shipped if n.startswith(EXTENSION) and n.endswith((".so", ".pyd"))}
    assert len(extension) == 1, f"the compiled extension (this machine has a C compiler): {sorted(extension)}"
    expected = expected_wheel_files(checkout_files())
    assert sorted(expected - shipped) == [], "left out of the wheel"
    assert sorted(shipped - expected - extension) == [], "in the wheel but not in the tree"
    # the namespace stays a namespace: spiketrace/ has no module of its own
    assert not [n for n in shipped if n.count("/") == 1]


def test_the_sdist_holds_what_a_wheel_is_built_from(built):
    with tarfile.open(built["sdist"]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    needed = {f for f in checkout_files() if f.split("/", 1)[0] in PACKAGES}
    needed |= {"pyproject.toml", "README.md", "LICENSE"}
    assert sorted(needed - names) == []


def test_the_metadata_says_what_a_user_and_an_index_need(built):
    with zipfile.ZipFile(built["wheel"]) as wheel:
        (metadata,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        text = wheel.read(metadata).decode()
    fields = [line.split(": ", 1) for line in text.split("\n\n", 1)[0].splitlines() if ": " in line]
    found: dict[str, list[str]] = {}
    for key, value in fields:
        found.setdefault(key, []).append(value)
    from spiketrace.schemas.version import __version__

    assert found["Version"] == [__version__]
    assert found["License-Expression"] == ["Apache-2.0"]
    assert found["Author"] == ["the spiketrace developers"]
    assert "Typing :: Typed" in found["Classifier"] and len(found["Classifier"]) >= 8
    assert "spiking neural networks" in found["Keywords"][0]
    assert any(r.startswith("torch") and "extra == \"capture\"" in r for r in found["Requires-Dist"])
    assert not any(r.startswith("torch") and "extra" not in r for r in found["Requires-Dist"]), \
        "torch is the capture extra's: the analysis installs without it"
