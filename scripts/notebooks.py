"""Run every notebook in notebooks/ and store it with its outputs: python scripts/notebooks.py [NAME ...]

Each notebook runs top to bottom in a fresh temporary directory (the traces it makes stay
out of the repository); its outputs are written back, with the SHA-256 of its code cells in
`metadata.spiketrace.source_sha256`, so tests/test_notebooks.py can tell stored outputs that
came from the current code from stale ones. Run it after editing a notebook.
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"


def source_sha256(book) -> str:
    """The hash of a notebook's code, which its stored outputs must have come from."""
    code = "\n\x00\n".join(cell.source for cell in book.cells if cell.cell_type == "code")
    return hashlib.sha256(code.encode()).hexdigest()


def run(path: Path) -> None:
    book = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory(prefix="spiketrace-nb-") as work:
        NotebookClient(book, timeout=300, kernel_name="python3", resources={"metadata": {"path": work}}).execute()
    for cell in book.cells:  # the kernel's timing metadata changes every run: keep diffs to real changes
        cell.metadata.pop("execution", None)
    book.metadata["spiketrace"] = {"source_sha256": source_sha256(book)}
    nbformat.write(book, path)
    print(f"ran {path.name}")


def main(names: list[str]) -> None:
    paths = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
    for path in paths if not names else [p for p in paths if p.stem in names or p.name in names]:
        run(path)


if __name__ == "__main__":
    main(sys.argv[1:])
