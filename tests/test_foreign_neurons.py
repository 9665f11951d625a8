"""snnTorch and Norse neurons, recognised from the trace's MROs (analyze/neurons.py) and costed
by every model that costs SpikingJelly's neurons: neuron_state, neuromorphic_memory_access
(and so the compute model), NeuroMC's soma, Lemaire's neuron term and SpikeSim's IF/LIF check.

Each framework's tiny net is captured as its users write it (a Linear feeding the neuron, the
state threaded through a loop of time steps, one stage per step) and one step is derived by
hand in the comments. Every other class of the table gets its mapping checked on one call.
SpikingJelly recognises BaseNode subclasses only, so compat="spikingjelly" sees none of them.
"""

from __future__ import annotations

import importlib
import math
import warnings

import norse.torch as norse
import pytest
import snntorch as snn
import torch
from spikingjelly.activation_based import neuron as sj_neuron
from torch import nn

from spiketrace.analyze import neurons, open_trace
from spiketrace.analyze.counters import count
from spiketrace.analyze.energy import energy, lemaire
from spiketrace.capture import Recorder

X = torch.tensor([[1.0, 0.0, 1.0]])  # binary, batch 1
WEIGHT = torch.tensor([[0.8, 0.5, 0.4], [0.2, 0.0, 0.3]])  # W x = [1.2, 0.5] every step


def linear() -> nn.Linear:
    fc = nn.Linear(3, 2, bias=False)
    with torch.no_grad():
        fc.weight.copy_(WEIGHT)
    return fc


class Net(nn.Module):
    """fc -> neuron; forward(x, *state) returns what the neuron returns (spikes, new state...)."""

    def __init__(self, cell: nn.Module):
        super().__init__()
        self.fc, self.lif = linear(), cell

    def forward(self, x, *state):
        return self.lif(self.fc(x), *state)


def record_steps(path, net, first_state, steps=2):
    """One stage per time step; the state each call returns is handed to the next."""
    state, outputs = first_state, []
    with Recorder(path, model=net) as recorder:
        for t in range(1, steps + 1):
            with recorder.stage(f"step{t}", phase="forward"), torch.no_grad():
                out = net(X, *state)
            state = tuple(out[1:]) if isinstance(out[1], torch.Tensor) else (out[1],)
            outputs.append(out)
    return outputs


def neuron_metrics(trace, stage, **options):
    result = count(trace, ["neuron_state"], stage=stage, **options)
    return result.details_of("neuron_state", "metrics").get("Net.lif", {})


def state_bytes(trace, stage, **options):
    counted = count(trace, ["neuromorphic_memory_access"], stage=stage, **options).spikingjelly(
        "neuromorphic_memory_access")["Global"]
    return counted["neuron_state_read_bytes"], counted["neuron_state_write_bytes"]


def quiet_energy(trace, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return energy(trace, **options)


def soma_of(trace, **options):
    report = quiet_energy(trace, model="neuromc", **options)
    return report, report.primitive_counts["by_op"].get("soma.forward")


def lemaire_neuron_calls(trace, **options):
    activity = lemaire.activity(trace, **options)
    calls = activity.calls[activity.calls["role"] == "neuron"]
    accesses = activity.accesses[activity.accesses["module"] == "Net.lif"]
    return activity, calls, dict(zip(accesses["access"], accesses["bytes"].astype(int)))


def sj_soma_energy(tmp_path) -> float:
    """NeuroMC's soma energy of a SpikingJelly LIFNode with the same (1, 2) output: the soma's
    cost depends on the output's loop dims alone, so a foreign neuron's must equal it."""
    model = nn.Sequential(linear(), sj_neuron.LIFNode())
    with Recorder(tmp_path / "sj", model=model) as recorder, recorder.stage("forward"), torch.no_grad():
        model(X)
    with open_trace(tmp_path / "sj") as trace:
        return quiet_energy(trace, model="neuromc").energy_by_module["Sequential.1"]


SOMA_STEP = {"mux": 2, "add": 2, "mul": 2, "comp": 6, "sqrt": 0}  # NeuroMC soma on OKBT = 1*1*2*1*1 = 2
NOTHING = {"state_reads": 0, "state_writes": 0}


# -- snnTorch Leaky ------------------------------------------------------------------------------

def test_snntorch_leaky_hand_derived(tmp_path):
    # Leaky(beta=0.5, threshold=1, reset "subtract"): mem = beta * mem + x - R * threshold, R the
    # previous step's spike (snntorch _neurons/leaky.py). x = W [1, 0, 1] = [1.2, 0.5].
    # Step 1: mem (init_leaky's zeros(0)) is recreated by zeros_like(x): 0; R = [0, 0];
    #   mem = [1.2, 0.5], S = [1, 0]. Step 2: R = [1, 0]; mem = [0.6, 0.25] + [1.2, 0.5] - [1, 0]
    #   = [0.8, 0.75], S = [0, 0].
    net = Net(snn.Leaky(beta=0.5))
    outputs = record_steps(tmp_path / "trace", net, (net.lif.init_leaky(),))
    assert [o[0].tolist() for o in outputs] == [[[1.0, 0.0]], [[0.0, 0.0]]]
    with open_trace(tmp_path / "trace") as trace:
        described = neurons.describe(trace).iloc[0]
        assert (described["framework"], described["kind"], described["potentials"], described["states"],
                described["decay"], described["threshold"], described["reset"]) == \
            ("snntorch", "LIF", 1, 1, 0.5, 1.0, "subtract")
        # neuron_state, step 2 (mem handed in: [1.2, 0.5], 8 bytes; a state-writing op's output is
        # state while alive; bytes read/written, ops in elements). snnTorch's ops, in order:
        #   mem_reset: sub(mem, threshold)          reads 8, writes 8, add 2, dense 2 (the 0-dim
        #                                           threshold is broadcast: no spike gate)
        #              gt(mem - threshold, 0)       reads 8, comp 2; _to_copy/clone of the bool: no state
        #   mul(clamp(beta), mem)                   reads 8, writes 8, mul 2, dense 2
        #   add(beta * mem, x)                      reads 8, writes 8, add 2, dense 2
        #   mul(R, threshold)                       no state
        #   sub(base, R * threshold)                gate R * threshold = [1, 0] (binary, nnz 1):
        #                                           reads 1 * 4, writes 1 * 4, add 2, reset 2, triggered 2
        #   fire: sub(mem, threshold)               reads 8, writes 8, add 2, dense 2
        #         gt(mem - threshold, 0)            reads 8, comp 2; mul(S, graded_spikes_factor): no state
        # = reads 8+8+8+8+4+8+8 = 52, writes 8+8+8+4+8 = 36, adds 8, muls 2, comps 4, reset 2,
        #   spike-triggered 2, timestep-dense 8.
        step2 = {"state_reads": 52, "state_writes": 36, "state_adds": 8, "state_muls": 2, "state_comps": 4,
                 "state_nonlinear_ops": 0, "state_reset_ops": 2, "state_select_ops": 0, "spike_triggered_ops": 2,
                 "timestep_dense_ops": 8}
        assert neuron_metrics(trace, "step2") == step2
        # Step 1 is the same but for the reset subtract, gated by R = [0, 0]: reads 0, writes 0
        # (zeros_like created mem, as SpikingJelly's first full_like creates v).
        assert neuron_metrics(trace, "step1") == {**step2, "state_reads": 48, "state_writes": 32}
        # neuromorphic_memory_access: its one state variable (mem) read and written once a step,
        # numel(S) * 4 bytes = 2 * 4 = 8 each.
        assert state_bytes(trace, "step2") == (8, 8)
        # NeuroMC: one soma fragment per call, B = T = 1, C = K = 2: mux, add, mul 2, comp 3 * 2.
        report, soma = soma_of(trace, stage="step2")
        assert soma == SOMA_STEP
        assert [f["loop_dims"] for f in report.mapping_summary if f["op_name"] == "soma.forward"] == \
            [{"B": 1, "T": 1, "C": 2, "K": 2, "OY": 1, "OX": 1, "FY": 1, "FX": 1, "G": 1}]
        assert report.warnings == []  # its ops are the soma's: nothing uncosted
        assert math.isclose(report.energy_by_module["Net.lif"], sj_soma_energy(tmp_path), rel_tol=1e-12)
        # Lemaire (SpikingJelly's LIF neuron rule), per call: mac = numel(S) = 2 (the leak),
        # ac = nnz(S) (the reset), read/write potential numel(S) * 4 = 8 bytes each, write_out nnz(S) * 4.
        activity, calls, accesses = lemaire_neuron_calls(trace, stage="step1")
        assert (calls["mac"].tolist(), calls["ac"].tolist()) == ([2], [1])
        assert accesses == {"read_potential_bytes": 8, "write_potential_bytes": 8, "write_out_bytes": 4}
        assert activity.warnings == [] and activity.unsupported == []
        _, calls, accesses = lemaire_neuron_calls(trace, stage="step2")
        assert (calls["mac"].tolist(), calls["ac"].tolist()) == ([2], [0])
        assert accesses == {"read_potential_bytes": 8, "write_potential_bytes": 8, "write_out_bytes": 0}
        # SpikeSim: a LIF neuron, so no "not IF/LIF" warning
        assert not [w for w in quiet_energy(trace, model="spikesim").warnings if "IF/LIF" in w]


def test_snntorch_state_kept_inside_counts_alike(tmp_path):
    """init_hidden=True keeps mem in the module: the same ops read and write the same state."""
    net = Net(snn.Leaky(beta=0.5, init_hidden=True))
    with Recorder(tmp_path / "trace", model=net) as recorder:
        for t in (1, 2):
            with recorder.stage(f"step{t}", phase="forward"), torch.no_grad():
                net(X)
    with open_trace(tmp_path / "trace") as trace:
        assert neuron_metrics(trace, "step2")["state_reads"] == 52
        assert neuron_metrics(trace, "step1")["state_reads"] == 48


# -- Norse LIFCell -------------------------------------------------------------------------------

def norse_cell() -> norse.LIFCell:
    # dt * tau_mem_inv = dt * tau_syn_inv = 0.5; v_leak = v_reset = 0, v_th = 1
    return norse.LIFCell(norse.LIFParameters(tau_mem_inv=torch.tensor(500.0), tau_syn_inv=torch.tensor(500.0)))


def test_norse_lifcell_hand_derived(tmp_path):
    # lif_feed_forward_step (norse/torch/functional/lif.py): i' = i + x; v' = v + dt tau_mem_inv
    # ((v_leak - v) + i'); i'' = i' - dt tau_syn_inv i'; S = heaviside(v' - v_th);
    # v'' = (1 - S) v' + S v_reset. Step 1 (state None: v = clone(v_leak) = 0, 0-dim; i = zeros):
    #   i' = [1.2, 0.5], v' = [0.6, 0.25], i'' = [0.6, 0.25], S = [0, 0].
    # Step 2: i' = [1.8, 0.75], v' = [0.6, 0.25] + 0.5 * [1.2, 0.5] = [1.2, 0.5], S = [1, 0],
    #   v'' = [0, 0.5], i'' = [0.9, 0.375].
    net = Net(norse_cell())
    outputs = record_steps(tmp_path / "trace", net, ())
    assert [o[0].tolist() for o in outputs] == [[[0.0, 0.0]], [[1.0, 0.0]]]
    with open_trace(tmp_path / "trace") as trace:
        described = neurons.describe(trace).iloc[0]
        assert (described["framework"], described["kind"], described["potentials"], described["states"],
                described["decay"], described["threshold"], described["reset"]) == \
            ("norse", "CUBA LIF", 2, 2, 0.5, 1.0, "value")
        # neuron_state, step 2 (state (v, i) handed in, 8 bytes each). Norse's ops, in order:
        #   add(i, x)                   i'      reads 8, writes 8, add 2, dense 2
        #   mul(dt, tau_mem_inv)                0-dim parameters: no state
        #   sub(v_leak, v)                      reads 8, writes 8, add 2, dense 2 (v_leak: a parameter, no gate)
        #   add(v_leak - v, i')                 reads 8 + 8, writes 8, add 2, dense 2
        #   mul(dt * tau_mem_inv, ...)  dv      reads 8, writes 8, mul 2, dense 2
        #   add(v, dv)                  v'      reads 8 + 8, writes 8, add 2, dense 2
        #   mul(-dt, tau_syn_inv)               no state
        #   mul(..., i')                di      reads 8, writes 8, mul 2, dense 2
        #   add(i', di)                 i''     reads 8 + 8, writes 8, add 2, dense 2
        #   sub(v', v_th)                       reads 8, writes 8, add 2, dense 2
        #   gt(v' - v_th, 0)            S       reads 8, comp 2; _to_copy, rsub(S, 1): no state
        #   mul(1 - S, v')                      gate 1 - S = [0, 1] (nnz 1): reads 4, writes 4, mul 2, reset 2,
        #                                       triggered 2
        #   mul(S, v_reset)                     no state
        #   add((1 - S) v', S v_reset)  v''     gate S v_reset = [0, 0] (nnz 0): reads 0, writes 0, add 2,
        #                                       reset 2, triggered 2
        # = reads 8+8+16+8+16+8+16+8+8+4 = 100, writes 8 * 8 + 4 = 68, adds 7 * 2 = 14, muls 3 * 2 = 6,
        #   comps 2, reset 4, spike-triggered 4, timestep-dense 8 * 2 = 16.
        assert neuron_metrics(trace, "step2") == {
            "state_reads": 100, "state_writes": 68, "state_adds": 14, "state_muls": 6, "state_comps": 2,
            "state_nonlinear_ops": 0, "state_reset_ops": 4, "state_select_ops": 0, "spike_triggered_ops": 4,
            "timestep_dense_ops": 16}
        # Step 1 counts too: zeros / clone created the state (no state was handed in).
        assert neuron_metrics(trace, "step1")["state_writes"] > 0
        # neuromorphic_memory_access: two state variables (v, i), 2 * numel(S) * 4 = 16 bytes each way.
        assert state_bytes(trace, "step2") == (16, 16)
        # NeuroMC: one soma per output (membrane v); the current i is stated, not costed.
        report, soma = soma_of(trace, stage="step2")
        assert soma == SOMA_STEP
        assert math.isclose(report.energy_by_module["Net.lif"], sj_soma_energy(tmp_path), rel_tol=1e-12)
        assert [w for w in report.warnings if "NeuroMC's soma holds one membrane potential" in w] == [
            "Net.lif (LIFCell) integrates 2 state variables per step (i, v); NeuroMC's soma holds one membrane "
            "potential: it is costed as one soma per output element and step, the other state (i) is not costed"]
        # Lemaire, step 2: two potentials (i, v), both decaying (factors 0.5): mac = 2 * numel(S) = 4,
        # ac = nnz(S) = 1, read/write potential 2 * 2 * 4 = 16 bytes each, write_out 1 * 4 = 4.
        activity, calls, accesses = lemaire_neuron_calls(trace, stage="step2")
        assert (calls["mac"].tolist(), calls["ac"].tolist()) == ([4], [1])
        assert accesses == {"read_potential_bytes": 16, "write_potential_bytes": 16, "write_out_bytes": 4}
        assert len(activity.warnings) == 1 and "costed as 2 potentials" in activity.warnings[0]
        # SpikeSim models IF/LIF neurons only: a current-based LIF is listed, as SpikingJelly's PLIF is
        spikesim = quiet_energy(trace, model="spikesim")
        assert "Unsupported neuron modules found: lif (LIFCell)." in " ".join(spikesim.warnings)


# -- every class of the table: its mapping, on one call ---------------------------------------

CLASSES = {
    # class: (build, state handed in, kind, potentials, states, leak multiplies, reset, multi-step)
    "Leaky": (lambda: snn.Leaky(beta=1.0, reset_mechanism="zero"), (), "IF", 1, 1, 0, "zero", False),
    "Synaptic": (lambda: snn.Synaptic(alpha=0.9, beta=0.8), (), "CUBA LIF", 2, 2, 2, "subtract", False),
    "Alpha": (lambda: snn.Alpha(alpha=0.9, beta=0.8), (), "alpha", 3, 3, 3, "zero", False),
    "RLeaky": (lambda: snn.RLeaky(beta=0.9, linear_features=2), (), "LIF", 1, 2, 1, "subtract", False),
    "LIFBoxCell": (lambda: norse.LIFBoxCell(), (), "LIF", 1, 1, 1, "value", False),
    "LIF": (lambda: norse.LIF(), (), "CUBA LIF", 2, 2, 2, "value", True),
}


@pytest.mark.parametrize("name", list(CLASSES))
def test_every_class_is_mapped_and_costed(tmp_path, name):
    build, state, kind, potentials, states, leak, reset, multi_step = CLASSES[name]
    net = Net(build())
    x = X.repeat(2, 1, 1) if multi_step else X  # Norse's LIF: every step of a [T = 2, B, 3] input
    with Recorder(tmp_path / "trace", model=net) as recorder, recorder.stage("forward"), torch.no_grad():
        out = net(x, *state)
    spikes = out[0] if isinstance(out, tuple) else out
    with open_trace(tmp_path / "trace") as trace:
        row = neurons.describe(trace).iloc[0]
        assert (row["class_name"], row["kind"], row["potentials"], row["states"], row["leak_multiplies"],
                row["reset"], row["multi_step"]) == (name, kind, potentials, states, leak, reset, multi_step)
        assert neuron_metrics(trace, "forward")["state_writes"] > 0
        # each state variable read and written once per neuron and step
        assert state_bytes(trace, "forward") == (states * spikes.numel() * 4,) * 2
        _, soma = soma_of(trace)
        assert soma["mux"] == spikes.numel()  # one soma per neuron and step (T = 2 for Norse's LIF)
        _, calls, accesses = lemaire_neuron_calls(trace)
        assert calls["mac"].tolist() == [leak * spikes.numel()]
        assert accesses["read_potential_bytes"] == potentials * spikes.numel() * 4
        spikesim = " ".join(quiet_energy(trace, model="spikesim").warnings)
        assert ("Unsupported neuron modules" in spikesim) == (kind not in ("IF", "LIF"))


def test_compat_spikingjelly_sees_no_foreign_neuron(tmp_path):
    """SpikingJelly recognises BaseNode subclasses only: compat mode reproduces its numbers."""
    net = Net(snn.Leaky(beta=0.5))
    record_steps(tmp_path / "trace", net, (net.lif.init_leaky(),))
    with open_trace(tmp_path / "trace") as trace:
        assert neuron_metrics(trace, "step2", compat="spikingjelly") == {}
        assert state_bytes(trace, "step2", compat="spikingjelly") == (0, 0)
        _, soma = soma_of(trace, compat="spikingjelly")
        assert soma is None
        report = quiet_energy(trace, model="lemaire", compat="spikingjelly")
        assert report.warnings == ["Lemaire formulas do not support Leaky; its energy is omitted."]
        assert report.counts["mac"] == 0


def test_neuron_state_details_come_in_key_order(tmp_path):
    net = Net(snn.Leaky(beta=0.5))
    record_steps(tmp_path / "trace", net, (net.lif.init_leaky(),))
    with open_trace(tmp_path / "trace") as trace:
        details = count(trace, ["neuron_state"]).details
    keys = list(zip(details["family"], details["scope"]))
    assert keys == sorted(keys)


def test_table_names_real_classes():
    """Each class of the table names a class of the installed framework by its MRO name."""
    for name in neurons.NEURONS:
        module, _, qualname = name.rpartition(".")
        cls = getattr(importlib.import_module(module), qualname)
        assert f"{cls.__module__}.{cls.__qualname__}" == name
