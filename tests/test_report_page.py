"""The HTML report as a page: its findings are the numbers it shows, per-step and per-rank
views appear when the trace has several steps and ranks (from the one run of the counters),
every trace string is escaped, nothing is fetched, and its tables sort and filter in a real
headless Chromium."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from html.parser import HTMLParser

import pytest
import torch
from spikingjelly.activation_based import neuron
from torch import nn

from spiketrace.analyze import Analysis
from spiketrace.analyze.present.report import build_report, findings, page, write_report
from spiketrace.capture import Recorder, record_training_step

STAGE = "<b>fwd</b>"  # a user's stage name: must show as text, never as markup
NOTE = "<script>alert('x')</script> & co"


@pytest.fixture(scope="module")
def multi(tmp_path_factory):
    """3 training steps on each of 2 ranks (rank 1 sees bigger batches), into one trace."""
    path = tmp_path_factory.mktemp("page") / "multi"
    for rank in range(2):
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(8, 12), neuron.IFNode(v_threshold=0.2), nn.Linear(12, 3), neuron.IFNode())
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        inputs = [(torch.rand(4 + 2 * step + rank, 8) > 0.5).float() for step in range(3)]
        with Recorder(path, model=net, optimizer=optimizer, rank=rank, world_size=2, metadata={"note": NOTE}) as rec:
            for x in inputs:
                optimizer.zero_grad()
                with rec.stage(STAGE, phase="forward"):
                    out = net(x)
                with rec.stage("backward"):
                    out.sum().backward()
                with rec.stage("optimizer"):
                    optimizer.step()
                with rec.suspend():
                    for module in net:
                        getattr(module, "reset", lambda: None)()
                rec.step()
    return path


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """One training step on one rank; the second IF never reaches its threshold (a dead layer)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(12, 16), neuron.IFNode(v_threshold=0.05), nn.Linear(16, 4), neuron.IFNode(v_threshold=1e9))
    path = tmp_path_factory.mktemp("page") / "single"
    record_training_step(path, net, (torch.rand(8, 12) > 0.5).float(), target=torch.randint(0, 4, (8,)),
                         loss_fn=nn.functional.cross_entropy, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    return path


def finding(context: dict, headline: str) -> str:
    return next(f["detail"] for f in context["findings"] if f["headline"] == headline)


def column(table, name: str) -> list:
    index = table.columns.index(name)
    return [row[index] for row in table.rows]


def test_findings_are_numbers_the_page_shows(single):
    with Analysis(single) as analysis:
        context = page(analysis, model="neuromc")
        html = build_report(analysis, model="neuromc")
    components = {row[0].text: row for row in context["components"].rows}  # top level: share of the total
    assert finding(context, "memory dominates").startswith(f"{components['memory'][2].text} of the energy is memory")
    layers = context["layers"]
    largest = max(layers.rows, key=lambda row: row[2].value)
    assert finding(context, "largest layer").startswith(f"{largest[0].text} ({largest[1].text}) takes {largest[3].text}")
    stages = max(context["stages"].rows, key=lambda row: row[1].value)
    assert finding(context, "largest stage").startswith(f"{stages[0].text} takes {stages[2].text}")
    rates = context["rates"]
    dead = [f"{s.text} ({c.text})" for s, c, ones in zip(column(rates, "scope"), column(rates, "class"), column(rates, "ones"))
            if ones.value == 0]
    assert dead == ["Sequential.3 (IFNode)"]
    assert finding(context, "dead layer") == "Sequential.3 (IFNode) never fired (spike rate 0)"
    uncosted = context["left_out"]
    assert finding(context, "uncosted work").endswith(", ".join(c.text for c in column(uncosted, "name")))
    for f in context["findings"]:  # and each is on the page, escaped
        assert f"<strong>{f['headline']}</strong>: {f['detail']}".replace("'", "&#x27;") in html
    assert "Per step" not in html and "Per rank" not in html  # one step, one rank: no such views


def test_each_finding_by_hand():
    base = {"model": "compute", "total": 100.0, "layers": [], "stages": {}, "dead": [], "uncosted": [], "outside": {},
            "uncovered": [], "groups": []}

    def said(**given) -> dict[str, str]:
        return {f["headline"]: f["detail"] for f in findings(**{**base, **given})}
    # memory 60 of 100 pJ (its children are not top level); compute parts 40
    rows = [("mac_pj", 0, 30.0, 0.3), ("ac_pj", 0, 10.0, 0.1), ("memory_pj", 0, 60.0, 0.6), ("parameter_memory_pj", 1, 60.0, 1.0)]
    assert said(components=rows)["memory dominates"] == "60.0% of the energy is memory traffic (60.000 pJ of 100.000 pJ)"
    rows = [("mac_pj", 0, 55.0, 0.55), ("memory_pj", 0, 45.0, 0.45)]
    assert said(components=rows)["mac dominates"].startswith("55.0% of the energy is mac")
    rows = [("mac_pj", 0, 40.0, 0.4), ("ac_pj", 0, 20.0, 0.2), ("memory_pj", 0, 40.0, 0.4)]
    assert not [h for h in said(components=rows) if h.endswith("dominates")]  # nothing over half
    assert said(components=[], total=0.0)["nothing costed"].startswith("the compute model costed none")
    shown = said(components=[], layers=[("Net.fc1", "Linear", 83.0), ("Net.fc2", "Linear", 17.0)],
                 stages={"forward": 30.0, "backward": 70.0}, dead=["Net.sn1 (LIF)", "Net.sn2 (LIF)"],
                 uncosted=["aten.neg.default"], outside={"backward": 3, "optimizer": 1}, uncovered=["aten.foo"],
                 groups=[{"name": "step", "what": "energy", "values": {"0": 100.0, "1": 150.0, "2": 120.0}}])
    assert shown["largest layer"] == "Net.fc1 (Linear) takes 83.0% of the energy (83.000 pJ)"
    assert shown["largest stage"] == "backward takes 70.0% of the energy (70.000 pJ)"
    assert shown["dead layers"] == "Net.sn1 (LIF), Net.sn2 (LIF) never fired (spike rate 0)"
    assert shown["uncosted work"] == "1 kind of work the compute model did not cost: aten.neg.default"
    assert shown["outside the model's scope"].endswith("holds backward (3 ops), optimizer (1 op), which it does not cost in full")
    assert shown["ops without a rule"] == "1 op of a counter's kind have no rule: aten.foo"
    assert shown["per step"] == "energy from 100.000 pJ (step 0) to 150.000 pJ (step 1) (50.0% more)"


def test_per_step_and_per_rank_views_from_one_run_of_the_counters(multi, engine_calls):
    seen = engine_calls
    with Analysis(multi) as analysis:
        context = page(analysis, model="neuromc")
        report = analysis.energy("neuromc")
        assert seen == {"neuromc": 1, "counters": 1}  # the views come from the page's one grouped run
        for group, n in (("step", 3), ("rank", 2)):
            expected = analysis.counts(["flop"], by=(group,)).frame
            expected = expected[expected["scope"] == "Global"].groupby(group)["value"].sum()
            view = next(v for v in context["groups"] if v["name"] == group)
            assert [c.value for c in column(view["table"], "flop")] == [float(v) for v in expected]
            assert len(view["table"].rows) == n and len(view["series"]["bars"]) == n
            energies = getattr(report, f"energy_by_{group}", None)
            if energies:  # a model that splits its energy so: the column and the finding use it
                shown = [c.value for c in column(view["table"], "energy")]
                assert shown == pytest.approx([energies[str(k)] for k in expected.index])
                low = min(energies, key=energies.get)
                assert f"({group} {low})" in finding(context, f"per {group}").split(" to ")[0]
        total = analysis.counts().totals()["flop"]
    assert column(context["counts"], "flop")[0].value == total  # Global, summed over steps and ranks
    assert [a for a, _ in context["nav"] if a.startswith("per-")] == ["per-step-view", "per-rank-view"]


def test_trace_strings_are_escaped_and_nothing_is_fetched(multi, tmp_path):
    page_text = write_report(multi, tmp_path / "r.html", model="neuromc").read_text()
    assert "&lt;b&gt;fwd&lt;/b&gt;" in page_text and STAGE not in page_text
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; co" in page_text and "<script>alert" not in page_text
    links = re.findall(r'\b(?:src|href)\s*=\s*"([^"]*)"', page_text)
    assert links and all(link.startswith(("data:image/png;base64,", "#")) for link in links)
    assert not re.search(r"<link\b|@import|url\(|fetch\(|XMLHttpRequest|<iframe", page_text)
    assert len(re.findall(r"<script>", page_text)) == 1  # the page's own, inline
    ids = re.findall(r'\bid="([^"]*)"', page_text)
    assert len(ids) == len(set(ids))  # a sort or filter link finds the one element it names


class Rows(HTMLParser):
    """The rows of one table of a dumped DOM: (hidden, [(text, data-value)])."""

    def __init__(self, table_id: str):
        super().__init__()
        self.table_id, self.inside, self.rows, self.cell, self.headers = table_id, False, [], None, {}

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self.inside = attrs.get("id") == self.table_id
        elif self.inside and tag == "th":
            self.headers[attrs.get("data-column")] = attrs.get("aria-sort")
        elif self.inside and tag == "tr" and self.headers:
            self.rows.append(("hidden" in attrs, []))
        elif self.inside and tag == "td":
            self.cell = [attrs.get("data-value"), ""]

    def handle_data(self, data):
        if self.cell is not None:
            self.cell[1] += data

    def handle_endtag(self, tag):
        if tag == "td" and self.cell is not None:
            self.rows[-1][1].append((self.cell[1].strip(), self.cell[0]))
            self.cell = None
        elif tag == "table":
            self.inside = False


def rows_of(text: str, table_id: str) -> Rows:
    parser = Rows(table_id)
    parser.feed(text)
    return parser


def test_tables_sort_on_a_click_and_filter_in_headless_chromium(multi, tmp_path):
    binary = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if binary is None:
        if os.environ.get("SPIKETRACE_REQUIRE_BROWSER"):
            pytest.fail("SPIKETRACE_REQUIRE_BROWSER is set but no chromium is installed")
        pytest.skip("no chromium here (.ci/run installs Debian's chromium)")
    out = write_report(multi, tmp_path / "r.html", model="neuromc")
    flop = list(rows_of(out.read_text(), "counts").headers).index("flop")
    written = [float(cells[flop][1]) for _, cells in rows_of(out.read_text(), "counts").rows]
    assert written != sorted(written, reverse=True)  # as written, not yet largest first: sorting must move rows
    # the hash replays a click on the flop header (descending: numbers largest first) and a filter
    url = out.as_uri() + "#sort=counts:flop:desc&filter=counts:IFNode"
    flags = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=3000", "--dump-dom"]
    dom = subprocess.run([*flags, url], capture_output=True, text=True, timeout=120, check=False).stdout
    assert 'data-errors=""' in re.search(r"<body([^>]*)>", dom).group(1)  # no script or console error
    table = rows_of(dom, "counts")
    assert table.headers["flop"] == "descending" and table.headers["scope"] == "none"
    values = [float(cells[flop][1]) for _, cells in table.rows]
    assert sorted(values) == sorted(written) and values == sorted(values, reverse=True)
    shown = [cells[0][0] for hidden, cells in table.rows if not hidden]
    hidden = [cells[0][0] for hidden, cells in table.rows if hidden]
    assert shown == ["Sequential.1", "Sequential.3"] or shown == ["Sequential.3", "Sequential.1"]
    assert "Global" in hidden and "Sequential.0" in hidden
    assert "2 of 6 rows" in dom  # the filter says how many rows it kept
