"""`spiketrace counts`: its tables, its JSON contract, its tidy frame and its exit codes, on the
demo trace (capture/session/example.py: SpikingMLP, fc1 = Linear(64, 32), fc2 = Linear(32, 10), inputs
[T=4, N=8, 64], one SGD training step)."""

import io
import json

import pandas as pd
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from spiketrace.analyze import open_trace
from spiketrace.analyze.cli import main
from spiketrace.analyze.counters import count, mac
from spiketrace.analyze.present.counts import OUTSIDE_LEAVES, human

pytest.importorskip("torch")
from spiketrace.capture.session.example import record_demo

COUNTER_KEYS = {"total", "by_scope", "unsupported", "coverage", "coverage_calls", "not_applicable"}
TRACE_KEYS = {"path", "schema_version", "complete", "ranks", "events",
              "degraded", "compiled", "compiled_seen", "tracker_underflows"}  # the last four: Trace.health()

# Linear on a [T, N, features] input runs as one aten.addmm over m = T*N = 32 rows. With the
# bias (beta=1), addmm costs 2*m*n*k FLOPs for the product plus m*n for adding the bias.
FC1_ADDMM_FLOP = 2 * 32 * 32 * 64 + 32 * 32  # k = 64 inputs, n = 32 outputs: 132096
FC2_ADDMM_FLOP = 2 * 32 * 10 * 32 + 32 * 10  # k = 32 inputs, n = 10 outputs: 20800


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return record_demo(tmp_path_factory.mktemp("counts") / "demo")


def run(*args):
    return CliRunner().invoke(main, ["counts", *[str(a) for a in args]])


def table_rows(stdout: str) -> list[list[str]]:
    """The rows of the first table (up to the first blank line), split on whitespace."""
    block = stdout.split("\n\n")[0]
    return [line.split() for line in block.splitlines()]


def library(demo, counters=None, **options):
    with open_trace(demo) as trace:
        return count(trace, counters, **options)


def test_human_units():
    assert human(0) == "0" and human(999) == "999" and human(1000) == "1.00K"
    assert human(1234) == "1.23K" and human(5_600_000) == "5.60M"
    assert human(2_500_000_000) == "2.50G" and human(3 * 10**12) == "3.00T"
    assert human(999_999) == "1.00M"  # not "1000.00K"
    assert human(-1234) == "-1.23K" and human(10**16) == "10000.00T"


def test_json_matches_the_contract_and_the_library(demo):
    result = run(demo, "--counter", "flop,mac", "--format", "json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert set(document) == {"counters", "trace"}
    assert list(document["counters"]) == ["flop", "mac"]
    for entry in document["counters"].values():
        assert set(entry) == COUNTER_KEYS
        assert isinstance(entry["total"], int) and isinstance(entry["coverage"], float)
    assert set(document["trace"]) == TRACE_KEYS
    assert document["trace"]["ranks"] == [0] and document["trace"]["complete"] is True
    assert document["trace"]["path"] == str(demo)

    expected = library(demo, ["flop", "mac"])
    frame = expected.frame
    flop_global = frame[(frame["counter"] == "flop") & (frame["scope"] == "Global")]
    assert document["counters"]["flop"]["total"] == int(flop_global["value"].sum())
    assert document["counters"]["flop"]["by_scope"] == expected.spikingjelly("flop")
    assert document["counters"]["mac"]["unsupported"] == expected.unsupported_of("mac")


def test_addmm_flops_are_hand_derived(demo):
    document = json.loads(run(demo, "--counter", "flop", "--format", "json").stdout)
    by_scope = document["counters"]["flop"]["by_scope"]
    assert by_scope["SpikingMLP.fc1"]["aten.addmm.default"] == FC1_ADDMM_FLOP == 132096
    assert by_scope["SpikingMLP.fc2"]["aten.addmm.default"] == FC2_ADDMM_FLOP == 20800
    # Attribution goes to every parent: the model and Global get both layers' addmm.
    assert by_scope["SpikingMLP"]["aten.addmm.default"] == FC1_ADDMM_FLOP + FC2_ADDMM_FLOP
    assert by_scope["Global"]["aten.addmm.default"] == FC1_ADDMM_FLOP + FC2_ADDMM_FLOP


def test_coverage_leaves_out_what_the_counter_does_not_apply_to(demo):
    with open_trace(demo) as trace:
        events = trace.sql("SELECT op FROM events WHERE stage = 'forward'")["op"]
    covered = int(events.isin(list(mac.RULES)).sum())  # mac covers GEMMs, convolution, BN
    document = json.loads(run(demo, "--counter", "mac", "--stage", "forward", "--format", "json").stdout)
    entry = document["counters"]["mac"]
    # the forward pass holds addmm (covered) and LIF's elementwise ops, which do no
    # multiply-accumulate: not applicable, so not gaps; before, coverage was 2.6% here
    assert entry["unsupported"] == {} and entry["coverage"] == entry["coverage_calls"] == 1.0
    assert sum(entry["not_applicable"].values()) == len(events) - covered
    assert "aten.mul.Tensor" in entry["not_applicable"]
    assert document["trace"]["events"] > len(events)  # all events of the trace, not the selection
    # SpikingJelly's view (compat): every op without a rule is uncovered, by calls
    compat = json.loads(run(demo, "--counter", "mac", "--stage", "forward", "--format", "json",
                            "--compat", "spikingjelly").stdout)["counters"]["mac"]
    assert compat["coverage_calls"] == pytest.approx(covered / len(events))
    assert sum(compat["unsupported"].values()) == len(events) - covered


def test_scope_table_is_a_tree_cut_at_depth(demo):
    result = run(demo, "--by", "scope", "--depth", "1", "--counter", "flop,mac")
    assert result.exit_code == 0, result.output
    rows = table_rows(result.stdout)
    assert rows[0] == ["scope", "flop", "mac"]
    assert [row[0] for row in rows[1:]] == ["Global", "SpikingMLP"]
    lines = result.stdout.splitlines()
    assert lines[1].startswith("Global") and lines[2].startswith("  SpikingMLP")

    full = run(demo, "--by", "scope", "--counter", "flop")
    labels = {row[0]: row[-1] for row in table_rows(full.stdout)[1:]}
    assert set(labels) == {"Global", "SpikingMLP", "fc1", "sn1", "fc2", "sn2"}
    fc1_total = sum(library(demo, "flop").spikingjelly("flop")["SpikingMLP.fc1"].values())
    assert labels["fc1"] == human(fc1_total)
    assert any(line.startswith("    fc1 (Linear) ") for line in full.stdout.splitlines())  # depth 2, its class
    assert any(line.startswith("    sn1 (LIF) ") for line in full.stdout.splitlines())


def test_op_table_keeps_the_top_ops_and_sums_the_others(demo):
    result = run(demo, "--by", "op", "--top", "2", "--counter", "flop")
    assert result.exit_code == 0, result.output
    frame = library(demo, "flop").frame
    at_global = frame[frame["scope"] == "Global"].sort_values("value", ascending=False)
    rows = table_rows(result.stdout)
    assert rows[0] == ["flop", "(scope", "Global)"] and rows[1] == ["op", "value", "share"]
    assert [row[0] for row in rows[2:4]] == list(at_global["op"][:2])
    others = next(row for row in rows if row[0] == "others")
    assert others[1] == f"({len(at_global) - 2}" and others[3] == human(at_global["value"][2:].sum())
    assert rows[-1][:2] == ["total", human(at_global["value"].sum())]

    wide = run(demo, "--by", "op", "--top", "1000", "--counter", "flop")
    assert not any(row[0] == "others" for row in table_rows(wide.stdout))


def test_stage_table_has_one_row_per_stage(demo):
    result = run(demo, "--by", "stage", "--counter", "flop")
    assert result.exit_code == 0, result.output
    frame = library(demo, "flop", by=("stage",)).frame
    per_stage = frame[frame["scope"] == "Global"].groupby("stage")["value"].sum()
    rows = {row[0]: row[1] for row in table_rows(result.stdout)[1:]}
    assert rows == {**{stage: human(v) for stage, v in per_stage.items()}, "total": human(per_stage.sum())}
    assert [row[0] for row in table_rows(result.stdout)[1:]] == ["forward", "backward", "optimizer", "total"]


def test_module_type_table_sums_leaf_modules_only(demo):
    result = run(demo, "--by", "module-type", "--counter", "flop")
    assert result.exit_code == 0, result.output
    by_scope = library(demo, "flop").spikingjelly("flop")
    linear = sum(sum(by_scope[s].values()) for s in ("SpikingMLP.fc1", "SpikingMLP.fc2"))
    lif = sum(sum(by_scope[s].values()) for s in ("SpikingMLP.sn1", "SpikingMLP.sn2"))
    total = sum(by_scope["Global"].values())
    lines = result.stdout.splitlines()
    assert lines[1].split() == ["Linear", human(linear)] and lines[2].split() == ["LIF", human(lif)]
    assert lines[3].startswith(OUTSIDE_LEAVES) and lines[3].split()[-1] == human(total - linear - lif)
    assert lines[4].split() == ["total", human(total)]
    assert "leaf modules only" in result.stdout


def test_coverage_block_lists_uncovered_ops_or_says_all_covered(demo):
    result = run(demo, "--counter", "flop,mac", "--stage", "forward")
    block = result.stdout.split("coverage (of the work each counter applies to, by tensor bytes):\n")[1]
    assert "flop: 100.0% covered (100.0% of calls); every op it applies to has a rule" in block
    assert "ops not applicable" in block.split("mac:")[1] and "aten.mul.Tensor" not in block
    limited = run(demo, "--counter", "mac", "--top", "1", "--compat", "spikingjelly")
    assert "aten.mul.Tensor" in limited.stdout and "more ops" in limited.stdout


def test_csv_is_the_tidy_frame(demo):
    result = run(demo, "--format", "csv", "--counter", "flop,ac")
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(io.StringIO(result.stdout))
    assert list(frame.columns) == ["counter", "scope", "op", "value"]
    expected = library(demo, ["flop", "ac"]).frame
    key = ["counter", "scope", "op"]
    assert frame.sort_values(key).values.tolist() == expected.sort_values(key).values.tolist()
    assert list(dict.fromkeys(frame["counter"])) == ["flop", "ac"]

    staged = pd.read_csv(io.StringIO(run(demo, "--format", "csv", "--by", "stage", "--counter", "flop").stdout))
    assert list(staged.columns) == ["counter", "scope", "op", "stage", "value"]
    assert staged["value"].sum() == frame[frame["counter"] == "flop"]["value"].sum()


def test_parquet_round_trips(demo, tmp_path):
    out = tmp_path / "counts.parquet"
    result = run(demo, "--format", "parquet", "--out", out, "--counter", "flop,mac")
    assert result.exit_code == 0, result.output
    table = pq.read_table(out)
    assert table.column_names == ["counter", "scope", "op", "value"]
    csv = pd.read_csv(io.StringIO(run(demo, "--format", "csv", "--counter", "flop,mac").stdout))
    assert table.to_pandas().values.tolist() == csv.values.tolist()

    missing = run(demo, "--format", "parquet")
    assert missing.exit_code == 2 and "--out" in missing.output


def test_strict_passes_on_the_demo_and_fails_on_a_real_gap(demo, tmp_path):
    assert run(demo, "--strict").exit_code == 0  # every op the counters apply to has a rule
    import torch

    from spiketrace.capture import Recorder

    x = torch.ones(2, 2)
    with Recorder(tmp_path / "gap") as recorder, recorder.stage("forward"):
        torch.sin(x @ x)  # sin: arithmetic with no FLOP rule, a real gap
    result = run(tmp_path / "gap", "--counter", "flop", "--strict")
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: strict: flop")
    assert "aten.sin.default" in result.stderr
    assert result.stdout.startswith("scope")  # the report is printed before failing
    compat = run(demo, "--counter", "mac", "--strict", "--compat", "spikingjelly")  # SpikingJelly's strictness
    assert compat.exit_code == 1 and library(demo, "mac", compat="spikingjelly").unsupported.iloc[0]["op"] in compat.stderr


def test_min_coverage(demo):
    assert run(demo, "--counter", "mac", "--min-coverage", "0").exit_code == 0
    assert run(demo, "--min-coverage", "100%").exit_code == 0  # the demo is fully covered
    failing = run(demo, "--counter", "mac", "--min-coverage", "100%", "--compat", "spikingjelly")
    assert failing.exit_code == 1 and failing.stderr.count("\n") == 1 and "mac" in failing.stderr
    assert run(demo, "--counter", "mac", "--min-coverage", "0.01").exit_code == 0
    assert run(demo, "--counter", "mac", "--min-coverage", "1.5").exit_code == 2


def test_unknown_counter_is_one_line_exit_2(demo):
    result = run(demo, "--counter", "flop,bogus")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1 and "bogus" in result.stderr
    assert "Traceback" not in result.output


def test_selection_options_reach_the_library(demo):
    ops = json.loads(run(demo, "--counter", "flop", "--ops", "aten.addmm", "--format", "json").stdout)
    assert ops["counters"]["flop"]["total"] == FC1_ADDMM_FLOP + FC2_ADDMM_FLOP
    fc1 = json.loads(run(demo, "--counter", "flop", "--module", "SpikingMLP.fc1", "--format", "json").stdout)
    expected = library(demo, "flop", module="SpikingMLP.fc1").totals()["flop"]
    assert fc1["counters"]["flop"]["total"] == expected
    assert set(fc1["counters"]["flop"]["by_scope"]) == {"Global", "SpikingMLP", "SpikingMLP.fc1"}

    ignored = json.loads(run(demo, "--counter", "flop", "--ignore-module", "LIF", "--format", "json").stdout)
    scopes = ignored["counters"]["flop"]["by_scope"]
    assert "SpikingMLP.sn1" not in scopes and "SpikingMLP.fc1" in scopes
    assert ignored["counters"]["flop"]["total"] == library(demo, "flop", ignore_modules=["LIF"]).totals()["flop"]
    # by SpikingJelly's measure (every op without a rule a gap), leaving LIF out leaves out
    # its covered elementwise ops, so the share covered drops
    ignored, everything = (json.loads(run(demo, "--counter", "flop", "--format", "json", "--compat", "spikingjelly",
                                          *extra).stdout)["counters"]["flop"] for extra in (["--ignore-module", "LIF"], []))
    assert ignored["coverage_calls"] < everything["coverage_calls"]
