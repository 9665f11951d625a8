"""Every notebook in notebooks/ runs top to bottom on CPU (a failing cell fails the suite),
on traces it makes itself, and is stored with the outputs of its current code
(scripts/notebooks.py runs them and records the hash of the code the outputs came from)."""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
_spec = importlib.util.spec_from_file_location("notebook_runner", ROOT / "scripts" / "notebooks.py")
runner = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(runner)


def test_there_are_the_notebooks():
    assert [p.name[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04", "05", "06", "07", "08", "09", "10"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_stored_with_the_outputs_of_its_code(path):
    book = nbformat.read(path, as_version=4)
    stored = book.metadata.get("spiketrace", {}).get("source_sha256")
    assert stored == runner.source_sha256(book), f"{path.name}: outputs are stale; run python scripts/notebooks.py {path.stem}"
    code = [cell for cell in book.cells if cell.cell_type == "code"]
    assert all(cell.execution_count is not None for cell in code), f"{path.name}: a cell never ran"
    errors = [o for cell in code for o in cell.outputs if o.output_type == "error"]
    assert not errors, f"{path.name}: stored with an error output"
    assert not any("assert " in cell.source for cell in code), f"{path.name}: notebooks teach; tests assert"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
    # As in a kernel whose environment's bin directory is not on PATH (a Jupyter server started
    # from another environment): a notebook runs spiketrace through its own interpreter.
    bin_directory = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                                               if p and Path(p) != Path(bin_directory)))
    book = nbformat.read(path, as_version=4)
    started = time.monotonic()
    NotebookClient(book, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert time.monotonic() - started < 180  # generous against a loaded machine; each runs in well under 60 s
