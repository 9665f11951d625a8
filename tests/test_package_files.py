"""The files a package people can depend on carries, and the one version they all name:
spiketrace.schemas.version.__version__ (pyproject reads it; the CLI, a trace's manifest,
CITATION.cff and CHANGELOG.md say the same)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml
from click.testing import CliRunner

from spiketrace.analyze.cli import main
from spiketrace.schemas.version import __version__

ROOT = Path(__file__).resolve().parent.parent


def test_the_version_is_a_release_number():
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__), __version__


def test_pyproject_takes_the_version_from_its_one_source():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "spiketrace.schemas.version.__version__"}


def test_the_command_line_says_the_version():
    done = CliRunner().invoke(main, ["--version"])
    assert done.exit_code == 0 and done.output.split() == ["spiketrace,", "version", __version__]


def test_capture_says_the_version():
    import spiketrace.capture

    assert spiketrace.capture.__version__ == __version__
    assert "__version__" not in spiketrace.capture.__all__  # a star import brings the API only


def test_the_license_is_apache_2():
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License") and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_the_citation_file_names_this_release():
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    # the keys CFF 1.2.0 requires, and what a reference manager shows
    assert citation["cff-version"] == "1.2.0"
    assert {"message", "title", "authors"} <= citation.keys()
    assert citation["version"] == __version__ and citation["license"] == "Apache-2.0"
    assert citation["authors"] == [{"name": "the spiketrace developers"}]


def test_the_changelog_has_this_version_s_entry():
    headings = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), flags=re.MULTILINE)
    assert __version__ in headings, headings
