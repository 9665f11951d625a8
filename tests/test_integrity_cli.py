"""The CLI side of trace integrity: `--run` picks a capture run where a directory
holds several, `--no-verify` skips the checksums, `validate` names file, column and row,
`compact` merges small parts without changing a number."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from spiketrace.analyze.cli import main
from spiketrace.capture import Recorder
from spiketrace.schemas import layout
from tests.trace_surgery import rewrite_part


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def capture(root, *, rank=0, world_size=1, run_id=None, batches=4, **options):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with Recorder(root, model=model, optimizer=optimizer, rank=rank, world_size=world_size, run_id=run_id,
                  **options) as recorder:
        for _ in range(batches):
            with recorder.stage("forward"):
                loss = model(torch.randn(2, 6)).pow(2).mean()
            with recorder.stage("backward"):
                loss.backward()
            with recorder.stage("optimizer"):
                optimizer.step()
                optimizer.zero_grad()
            recorder.step()
    return root


def test_run_picks_one_run_of_a_directory_holding_two(tmp_path):
    root = tmp_path / "t"
    for rank in (0, 1):
        capture(root, rank=rank, world_size=2, run_id="first-run")
    capture(root, run_id="second-run", batches=1)  # rank 0 again, alone: rank 1 is stale
    refused = run("counts", root)
    assert refused.exit_code == 2
    assert "ranks [1] are stale (run first-run" in refused.output and "--run ID" in refused.output
    second = run("info", root, "--run", "second", "--format", "json")
    assert second.exit_code == 0, second.output
    assert json.loads(second.stdout)["trace"]["ranks"] == [0]
    first = run("validate", root, "--run", "first-run")
    assert first.exit_code == 0 and "ranks [1]" in first.output


def test_no_verify_skips_the_checksum_and_only_it(tmp_path):
    root = capture(tmp_path / "t")
    manifest_file = root / layout.MANIFEST_NAME
    manifest = json.loads(manifest_file.read_text())
    manifest["parts"]["events"][0]["blake2b"] = "0" * 64  # a wrong checksum of intact data
    manifest_file.write_text(json.dumps(manifest))
    refused = run("counts", root, "--format", "json")
    assert refused.exit_code == 2 and "checksum mismatch" in refused.output
    assert str(root / manifest["parts"]["events"][0]["path"]) in refused.output
    trusted = run("counts", root, "--format", "json", "--no-verify")
    assert trusted.exit_code == 0, trusted.output
    problems = run("validate", root, "--no-verify")  # validate checks the checksums regardless
    assert problems.exit_code == 1 and "checksum mismatch" in problems.output


def test_validate_names_file_column_and_row_of_an_implausible_value(tmp_path):
    root = capture(tmp_path / "t")
    part = root / json.loads((root / layout.MANIFEST_NAME).read_text())["parts"]["tensors"][0]["path"]

    def negative_numel(table):
        import pyarrow as pa

        values = table.column("numel").to_pylist()
        values[3] = -316  # the value a fuzzed trace printed as -316B
        return table.set_column(table.schema.get_field_index("numel"), "numel", pa.array(values, pa.int64()))

    rewrite_part(part, negative_numel)  # recommitted: only the rules can tell
    result = run("validate", root)
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if "numel" in line]
    assert any(f"{part}: column numel, row 3: -316 breaks 'numel >= 0'" in line for line in lines), result.output
    assert any("numel is the product of the shape" in line for line in lines)


def test_compact_merges_small_parts_and_changes_no_number(tmp_path):
    root = capture(tmp_path / "t", flush_events=8, compact=False)
    before = run("counts", root, "--format", "json")
    parts_before = sum(len(v) for v in json.loads((root / layout.MANIFEST_NAME).read_text())["parts"].values())
    result = run("compact", root)
    assert result.exit_code == 0, result.output
    parts_after = sum(len(v) for v in json.loads((root / layout.MANIFEST_NAME).read_text())["parts"].values())
    assert f"rank 0: {parts_before} parts -> {parts_after}" in result.output and parts_after < parts_before
    assert run("validate", root).exit_code == 0
    after = run("counts", root, "--format", "json")
    assert json.loads(after.stdout)["counters"] == json.loads(before.stdout)["counters"]


def test_compact_refuses_a_trace_still_being_captured(tmp_path):
    root = capture(tmp_path / "t", flush_events=8, compact=False)
    manifest_file = root / layout.MANIFEST_NAME
    manifest = json.loads(manifest_file.read_text())
    manifest["status"] = "running"
    manifest_file.write_text(json.dumps(manifest))
    result = run("compact", root)
    assert result.exit_code == 2 and "only a finished capture can be compacted" in result.output


@pytest.mark.parametrize("command", ["info", "counts", "energy", "validate", "collectives", "report", "sql", "plot"])
def test_every_trace_command_takes_run_and_no_verify(command):
    result = run(command, "-h")
    assert "--run ID" in result.output and "--no-verify" in result.output
