"""The named breakdown views (analyze/trace/sql_views/*.sql) against numbers computed another way:
raw Parquet read with pyarrow and pandas, forward hooks on the live model, and the Python API."""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap

import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner
from spikingjelly.activation_based import functional, layer, neuron
from torch import nn
from torch.utils.checkpoint import checkpoint

from spiketrace.analyze import open_trace
from spiketrace.analyze.cli import main
from spiketrace.analyze.trace.breakdown import module_breakdown
from spiketrace.analyze.trace.views import sql_views
from spiketrace.capture import Recorder
from spiketrace.capture.session.example import SpikeFunction
from tests.zoo import CASES, OPTIMIZERS, build, run_steps


def raw(trace_path, table) -> pd.DataFrame:
    parts = sorted((trace_path / table).rglob("*.parquet"))
    return pd.concat([pq.read_table(p).to_pandas() for p in parts], ignore_index=True)


@pytest.fixture(scope="module")
def sew_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("views") / "trace"
    case = CASES[4]  # SEW residual block, conv + BN + IF
    model, x = build(case)
    optimizer = OPTIMIZERS["sgd_momentum"](model.parameters())
    with Recorder(path, model=model, optimizer=optimizer) as recorder:
        run_steps(recorder, model, x, case, optimizer)
    return path


# Views with rows only where torch.distributed ran (tested in tests/real_jobs/test_distributed.py).
MULTI_PROCESS_VIEWS = {"collective_traffic"}


def test_every_view_has_a_header_and_runs(sew_trace):
    with open_trace(sew_trace) as trace:
        for name, (summary, _) in sql_views().items():
            assert summary.endswith("?"), name  # the header says what it answers
            rows = len(trace.sql(f"SELECT * FROM {name}"))
            assert rows == 0 if name in MULTI_PROCESS_VIEWS else rows > 0, name


def test_ops_per_phase_and_stage_match_the_raw_parquet(sew_trace):
    events = raw(sew_trace, "events")
    events["phase"] = events["phase"].astype(object).fillna("unlabeled")
    with open_trace(sew_trace) as trace:
        module_ops = trace.sql("SELECT phase, ops FROM module_ops WHERE scope = 'Global'")
        stages = trace.sql("SELECT stage, ops, steps FROM stage_summary")
        steps = trace.sql("SELECT step, ops, forward_ops FROM rank_steps ORDER BY step")
        families = trace.sql("SELECT family, category, sum(calls) AS calls FROM op_families GROUP BY ALL")
        breakdown = module_breakdown(trace).set_index("scope")
        per_scope = trace.sql("SELECT scope, sum(ops) FILTER (WHERE phase = 'forward') AS ops FROM module_ops GROUP BY scope")
    assert module_ops.set_index("phase")["ops"].to_dict() == events.groupby("phase").size().to_dict()
    assert stages.set_index("stage")["ops"].to_dict() == events.groupby("stage").size().to_dict()
    assert stages.set_index("stage")["steps"].to_dict() == events.groupby("stage")["step"].nunique().to_dict()
    assert steps["ops"].tolist() == events.groupby("step").size().tolist()
    assert steps["forward_ops"].tolist() == events[events["phase"] == "forward"].groupby("step").size().tolist()
    assert families["calls"].sum() == len(events)
    category = families.set_index("family")["category"]
    assert category["convolution"] == "convolution" and category["add"] == "elementwise"
    assert category["native_batch_norm"] == "normalization" and category["view"] == "view"
    for scope, ops in zip(per_scope["scope"], per_scope["ops"]):  # the Python API's breakdown
        assert breakdown.loc[scope, "forward_ops"] == (0 if pd.isna(ops) else ops)


class Probe:
    """Forward hooks on the live model: each neuron's output spikes, per call."""

    def __init__(self, model):
        self.outputs: dict[str, list[torch.Tensor]] = {}
        for name, module in model.named_modules():
            if isinstance(module, neuron.BaseNode):
                module.register_forward_hook(lambda m, i, o, name=name: self.outputs.setdefault(name, []).append(o.detach()))


def test_spike_rates_match_the_live_model(tmp_path):
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(8, 6), neuron.IFNode(), nn.Linear(6, 5), neuron.LIFNode())
    probe = Probe(model)
    x = torch.rand(4, 8) * 2
    with Recorder(tmp_path / "trace", model=model) as recorder:
        for _ in range(3):  # single-step: one call per time step
            model(x)
        recorder.step()
        functional.reset_net(model)
        model(x)
    with open_trace(tmp_path / "trace") as trace:
        layers = trace.sql("SELECT scope, ones, elements, spike_rate FROM layer_spike_rates").set_index("scope")
        steps = trace.sql("SELECT scope, time_step, ones, calls FROM step_spike_rates")
    for name, scope in (("1", "Sequential.1"), ("3", "Sequential.3")):
        spikes = torch.stack(probe.outputs[name])
        assert layers.loc[scope, "ones"] == int(spikes.sum())
        assert layers.loc[scope, "spike_rate"] == pytest.approx(int(spikes.sum()) / spikes.numel(), rel=1e-12)
        got = steps[steps["scope"] == scope].set_index("time_step")
        # time step t = the t-th call of a recorder step: calls 0, 1, 2 of step 0 and call 0 of step 1
        assert got.loc[0, "ones"] == int(spikes[0].sum() + spikes[3].sum()) and got.loc[0, "calls"] == 2
        assert got.loc[2, "ones"] == int(spikes[2].sum())


def test_multi_step_layers_have_per_time_step_rates(tmp_path):
    torch.manual_seed(2)
    model = nn.Sequential(layer.Linear(4, 3), neuron.IFNode(step_mode="m"))
    functional.set_step_mode(model, "m")
    probe = Probe(model)
    with Recorder(tmp_path / "trace", model=model):
        model(torch.rand(5, 2, 4) * 3)
    with open_trace(tmp_path / "trace") as trace:
        rows = trace.sql("SELECT time_step, ones, elements FROM step_spike_rates ORDER BY time_step")
    spikes = probe.outputs["1"][0]  # [T=5, N=2, 3]
    assert rows["time_step"].tolist() == [0, 1, 2, 3, 4]
    assert rows["ones"].tolist() == [int(spikes[t].sum()) for t in range(5)]
    assert rows["elements"].tolist() == [6] * 5


class Spiking(nn.Module):
    """A stateless spiking layer: its outputs are 0/1 and a checkpoint may recompute it freely."""

    def forward(self, x):
        return SpikeFunction.apply(x - 0.5)


class CheckpointedNet(nn.Module):
    def __init__(self, checkpointed: bool) -> None:
        super().__init__()
        self.checkpointed = checkpointed
        self.fc, self.spike, self.head = nn.Linear(8, 6), Spiking(), nn.Linear(6, 3)

    def block(self, x):
        return self.spike(self.fc(x))

    def forward(self, x):
        h = checkpoint(self.block, x, use_reentrant=False) if self.checkpointed else self.block(x)
        return self.head(h)


def test_spike_rates_count_a_recomputed_forward_once(tmp_path):
    """Activation checkpointing runs the spiking block's forward again in each backward; the
    rates are those of the same training without checkpointing (no backward-stage rows, no
    recomputed call taken for a later time step)."""
    views = {}
    for name, checkpointed in (("eager", False), ("checkpointed", True)):
        torch.manual_seed(3)
        model, x = CheckpointedNet(checkpointed), torch.rand(4, 8) * 2
        with Recorder(tmp_path / name, model=model) as recorder:
            for _ in range(3):  # three single-step calls of one recorder step: time steps 0, 1, 2
                with recorder.stage("forward"):
                    out = model(x)
                with recorder.stage("backward"):
                    out.sum().backward()
        with open_trace(tmp_path / name) as trace:
            recomputed = trace.sql("SELECT count(*) AS n FROM module_events WHERE recompute")["n"][0]
            views[name] = [trace.sql(f"SELECT * EXCLUDE (rank) FROM {view} ORDER BY ALL").to_dict("records")
                           for view in ("layer_spike_rates", "step_spike_rates")]
            views[name].append(module_breakdown(trace).set_index("scope")["spike_rate"].dropna().to_dict())
        assert recomputed == (4 * 3 if checkpointed else 0)  # fc and spike: pre and post hooks, per backward
    assert views["checkpointed"] == views["eager"]
    assert [row["time_step"] for row in views["eager"][1]] == [0, 1, 2]


def test_views_command_and_shell(tmp_path, sew_trace, monkeypatch):
    runner = CliRunner()
    listed = runner.invoke(main, ["views"])
    assert listed.exit_code == 0 and all(name in listed.output for name in sql_views())
    monkeypatch.setenv("PATH", str(tmp_path))  # no duckdb shell here
    missing = runner.invoke(main, ["sql", str(sew_trace)])
    assert missing.exit_code == 2 and "install the DuckDB CLI" in missing.output
    # a stand-in `duckdb` that runs the init script with the duckdb module, as the shell would
    fake = tmp_path / "duckdb"
    fake.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import json, sys, duckdb
        con = duckdb.connect()
        script = open(sys.argv[sys.argv.index("-init") + 1]).read()
        con.execute("\\n".join(l for l in script.splitlines() if not l.startswith(".")))
        print(json.dumps(con.execute("SELECT sum(ops) FROM module_ops WHERE scope = 'Global'").fetchone()[0]))
    """))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    pid = os.fork()
    if pid == 0:  # os.execv replaces the process: run the command in a child
        os.dup2(os.open(tmp_path / "out.txt", os.O_WRONLY | os.O_CREAT), 1)
        try:
            main(["sql", str(sew_trace)], standalone_mode=False)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert json.loads((tmp_path / "out.txt").read_text()) == len(raw(sew_trace, "events"))


def test_result_tables_equal_the_python_api(sew_trace):
    from spiketrace.analyze.counters import count
    from spiketrace.analyze.energy import energy
    from spiketrace.analyze.present.sql_tables import ensure_for_query

    with open_trace(sew_trace) as trace:
        ensure_for_query(trace, "SELECT * FROM counts JOIN energy_by_stage ON true", preset="compute-int8-45nm")
        counts = trace.sql("SELECT counter, sum(value) AS v FROM counts WHERE scope = 'Global' GROUP BY counter")
        stages = trace.sql("SELECT stage, pj, share FROM energy_by_stage").set_index("stage")
        modules = trace.sql("SELECT scope, pj FROM energy_by_module").set_index("scope")["pj"]
        report = energy(trace, "compute", "compute-int8-45nm")
        totals = count(trace).totals()
    assert dict(zip(counts["counter"], counts["v"].astype(int))) == totals
    for stage, pj in report.energy_by_stage.items():
        assert stages.loc[stage, "pj"] == pytest.approx(pj, rel=1e-12)
    assert stages["share"].sum() == pytest.approx(1.0)
    assert modules.to_dict() == pytest.approx(report.energy_by_module, rel=1e-12)
    result = CliRunner().invoke(main, ["sql", str(sew_trace), "SELECT round(sum(share), 6) AS s FROM energy_by_stage",
                                       "--format", "json"])
    assert json.loads(result.stdout) == [{"s": 1.0}]
