"""The spiking neurons the analysis recognises, as data: class (a name in the MRO the trace
stores) -> the neuron model it implements.

Every counter and energy model that costs neurons asks this table which modules are neurons
(`is_neuron`), and reads a neuron's model from `table_sql`: one row per neuron module with
its framework, kind, state variables, membrane decay, threshold and reset, read from the
attributes the capture stored (capture/modules/catalog.py). A class is recognised with its
subclasses (the most derived class of the table in a module's MRO gives its row).

SpikingJelly's `BaseNode` is costed by each model as SpikingJelly 2.0.0 costs it (the models
keep their own IF/LIF/PLIF rules for it); its row here describes it. snnTorch and Norse
neurons are costed by the models in default mode only: SpikingJelly recognises a neuron by
isinstance(BaseNode) alone, so `compat="spikingjelly"` (and Lemaire's `compat="qualia"`)
sees none of them, exactly as the reference does.

The models (source read: snnTorch 1.0.0 `_neurons/`, Norse 1.1.0 `torch/functional/lif*.py`),
per time step, x the input, S the spike:
* snnTorch Leaky: mem = clamp(beta, 0, 1) * mem + x - R * threshold (reset_mechanism
  "subtract"; "zero" sets mem to 0, "none" keeps it), R the previous step's spike: a LIF
  neuron without input decay. RLeaky adds a recurrent term recurrent(spk) (its own child
  module, a Linear/Conv2d costed as such, or a one-to-one V) and keeps its last spikes.
* snnTorch Synaptic: syn = clamp(alpha) * syn + x; mem = clamp(beta) * mem + syn - reset:
  a current-based LIF, two state variables.
* snnTorch Alpha: syn_exc = alpha * syn_exc + x; syn_inh = beta * syn_inh - x;
  mem = tau_alpha * (syn_exc + syn_inh), tau_alpha = ln(alpha) / (ln(beta) - ln(alpha)) + 1:
  three state variables (reset_mechanism "zero" by default).
* Norse LIFCell (one step per call) and LIF (every step of a [T, ...] input per call):
  i += x; v += dt * tau_mem_inv * ((v_leak - v) + i); i -= dt * tau_syn_inv * i;
  S = v > v_th; v = (1 - S) * v + S * v_reset: a current-based LIF, state (v, i).
* Norse LIFRecurrentCell (one step per call) and LIFRecurrent (every step per call): the same
  LIF (lif_step), with i += W_in x + W_rec z in place of i += x, z the previous step's spikes,
  kept as a third state tensor. Its two products are F.linear calls inside the neuron: aten
  GEMMs that every model costs as it costs GEMMs outside a Linear module (so no model may take
  them for the neuron's own work).
* Norse LIFBoxCell: v += dt * tau_mem_inv * (x + v_leak - v); S = v > v_th; reset to
  v_reset (p.reset_method reset_value) or by v_th (reset_subtract): a LIF neuron with input
  decay, state v.
"""

from __future__ import annotations

from dataclasses import dataclass

SPIKINGJELLY_BASE = "spikingjelly.activation_based.neuron.base_node.BaseNode"
SPIKINGJELLY_SIMPLE_BASE = "spikingjelly.activation_based.neuron.base_node.SimpleBaseNode"
# what SpikingJelly's NeuronStateCounter takes for the creation of a neuron's state
SPIKINGJELLY_MATERIALISATIONS = ("aten.full_like.default", "aten.zeros_like.default")


def _number(path: str) -> str:
    """SQL: the number at a JSON path of the attributes `a` (NULL when absent, or a list:
    a per-neuron value)."""
    return f"TRY_CAST(a{path} AS DOUBLE)"


def _unit(value: str) -> str:
    """SQL: the value clamped to [0, 1] as snnTorch clamps its decays (NULL stays NULL)."""
    return f"CASE WHEN {value} IS NOT NULL THEN least(greatest({value}, 0.0), 1.0) END"


_BETA, _ALPHA = _unit(_number("->>'beta'")), _unit(_number("->>'alpha'"))
_SNNTORCH_RESET = "a->>'reset_mechanism'"
_SNNTORCH_THRESHOLD = _number("->>'threshold'")
_DT = _number("->>'dt'")
_NORSE_MEMBRANE = "1.0 - " + _DT + " * " + _number("->'p'->>'tau_mem_inv'")
_NORSE_CURRENT = "1.0 - " + _DT + " * " + _number("->'p'->>'tau_syn_inv'")
_NORSE_THRESHOLD = _number("->'p'->>'v_th'")
_NORSE_MATERIALISATIONS = ("aten.zeros.default", "aten.clone.default", "aten.full.default")
_NORSE_BOX_RESET = """CASE WHEN a->'p'->'reset_method'->>'$."$function"' LIKE '%.reset_subtract' THEN 'subtract'
    ELSE 'value' END"""


@dataclass(frozen=True)
class NeuronModel:
    """What a neuron class implements. SQL fields are expressions over `a`, the module's
    attributes (JSON), and evaluate to NULL where the trace does not say."""

    framework: str
    kind: str  # IF, LIF, "CUBA LIF" (with a decaying synaptic current), alpha
    potentials: tuple[str, ...]  # the state variables integrated every step, membrane last
    kept: tuple[str, ...] = ()  # other tensors it keeps from step to step (RLeaky's last spikes)
    decay: str = "NULL"  # SQL: the membrane's factor per step (1: no leak)
    decays: tuple[str, ...] = ()  # SQL: each potential's factor per step; one other than 1 is a multiply
    threshold: str = "NULL"  # SQL: the firing threshold
    reset: str = "NULL"  # SQL: 'subtract' (by the threshold), 'zero', 'value' (to v_reset) or 'none'
    multi_step: bool = False  # a call runs every time step of a [T, ...] input
    materialisations: tuple[str, ...] = SPIKINGJELLY_MATERIALISATIONS  # ops creating its state
    counted_by: tuple[str, ...] | None = None  # only these models recognise it (None: all)
    products: tuple[str, ...] = ()  # products it computes with its own weights inside its call (energy/stateful.py)
    step_mode_attribute: bool = False  # multi-step when its step_mode attribute is 'm' (else by `multi_step`)


def _snntorch(kind, potentials, decays, kept=(), decay=_BETA) -> NeuronModel:
    return NeuronModel("snntorch", kind, potentials, kept, decay=decay, decays=decays,
                       threshold=_SNNTORCH_THRESHOLD, reset=_SNNTORCH_RESET)


def _norse_cuba(multi_step: bool, recurrent: bool = False) -> NeuronModel:
    return NeuronModel("norse", "CUBA LIF", ("i", "v"), ("z",) if recurrent else (), decay=_NORSE_MEMBRANE,
                       decays=(_NORSE_CURRENT, _NORSE_MEMBRANE), threshold=_NORSE_THRESHOLD, reset="'value'",
                       multi_step=multi_step, materialisations=_NORSE_MATERIALISATIONS,
                       products=("input", "recurrent") if recurrent else ())


_TAU_ALPHA = "NULL"  # mem = tau_alpha * (syn_exc + syn_inh): a multiply every step
_SPIKINGJELLY_LEAKY = "((a->'tau') IS NOT NULL OR (a->'decay_input') IS NOT NULL)"
_TAU = _number("->>'tau'")
_SPIKINGJELLY_DECAY = f"CASE WHEN {_TAU} > 0 THEN 1.0 - 1.0 / {_TAU} END"
_SPIKINGJELLY_RESET = ("CASE WHEN (a->'v_reset') IS NULL OR json_type(a->'v_reset') = 'NULL' THEN 'subtract' "
                       "ELSE 'value' END")

NEURONS: dict[str, NeuronModel] = {
    SPIKINGJELLY_BASE: NeuronModel(
        "spikingjelly", "IF", ("v",), decay=_SPIKINGJELLY_DECAY, decays=(_SPIKINGJELLY_DECAY,),
        threshold=_number("->>'v_threshold'"),
        reset=_SPIKINGJELLY_RESET),
    SPIKINGJELLY_SIMPLE_BASE: NeuronModel(
        "spikingjelly", "IF", ("v",), threshold=_number("->>'v_threshold'"), counted_by=("spikesim",)),
    "snntorch._neurons.leaky.Leaky": _snntorch("LIF", ("mem",), (_BETA,)),
    "snntorch._neurons.rleaky.RLeaky": _snntorch("LIF", ("mem",), (_BETA,), kept=("spk",)),
    "snntorch._neurons.synaptic.Synaptic": _snntorch("CUBA LIF", ("syn", "mem"), (_ALPHA, _BETA)),
    "snntorch._neurons.alpha.Alpha": _snntorch("alpha", ("syn_exc", "syn_inh", "mem"), (_ALPHA, _BETA, _TAU_ALPHA),
                                               decay=_TAU_ALPHA),  # its membrane is the currents' weighted sum
    "norse.torch.module.lif.LIFCell": _norse_cuba(multi_step=False),
    "norse.torch.module.lif.LIF": _norse_cuba(multi_step=True),
    "norse.torch.module.lif.LIFRecurrentCell": _norse_cuba(multi_step=False, recurrent=True),
    "norse.torch.module.lif.LIFRecurrent": _norse_cuba(multi_step=True, recurrent=True),
    "norse.torch.module.lif_box.LIFBoxCell": NeuronModel(
        "norse", "LIF", ("v",), decay=_NORSE_MEMBRANE, decays=(_NORSE_MEMBRANE,), threshold=_NORSE_THRESHOLD,
        reset=_NORSE_BOX_RESET,
        materialisations=_NORSE_MATERIALISATIONS),
}
# Hand-written neurons that declare what they are (capture/modules/declared.py), read by
# SpikingJelly's attribute names; costed as snnTorch's and Norse's are, in default mode only.
_DECLARED = "spiketrace.capture.modules.declared."
NEURONS[_DECLARED + "IFNeuron"] = NeuronModel(
    "declared", "IF", ("v",), decay="1.0", decays=("1.0",), threshold=_number("->>'v_threshold'"),
    reset=_SPIKINGJELLY_RESET, step_mode_attribute=True)
NEURONS[_DECLARED + "LIFNeuron"] = NeuronModel(
    "declared", "LIF", ("v",), decay=_SPIKINGJELLY_DECAY, decays=(_SPIKINGJELLY_DECAY,),
    threshold=_number("->>'v_threshold'"), reset=_SPIKINGJELLY_RESET, step_mode_attribute=True)
REFERENCE_COMPAT = ("spikingjelly", "qualia")  # compat modes in which only SpikingJelly's neurons count


def quoted_list(names) -> str:
    return "[" + ", ".join("'" + n.replace("'", "''") + "'" for n in names) + "]"


def classes(model: str, compat: str | None = None, *, foreign_only: bool = False) -> list[str]:
    """The neuron classes `model` recognises (a subclass counts too) under `compat`."""
    return [name for name, n in NEURONS.items()
            if (n.counted_by is None or model in n.counted_by)
            and not (compat in REFERENCE_COMPAT and n.framework != "spikingjelly")
            and not (foreign_only and n.framework == "spikingjelly")]


def is_neuron(mro: str, model: str, compat: str | None = None) -> str:
    """SQL: the module whose MRO column is `mro` is a neuron `model` costs under `compat`."""
    return f"list_has_any({mro}, {quoted_list(classes(model, compat))})"


def is_foreign(mro: str, model: str, compat: str | None = None) -> str:
    """SQL: an snnTorch or Norse neuron that `model` costs (never under a reference compat)."""
    names = classes(model, compat, foreign_only=True)
    return f"list_has_any({mro}, {quoted_list(names)})" if names else "false"


def is_multi_step(mro: str, model: str, compat: str | None = None) -> str:
    """SQL: a neuron whose every call runs all T steps of a [T, ...] input by its class (Norse's
    LIF); a SpikingJelly neuron says it with step_mode = 'm', read by the models themselves."""
    names = [name for name in classes(model, compat) if NEURONS[name].multi_step]
    return f"list_has_any({mro}, {quoted_list(names)})" if names else "false"


def _case(column: str, values: dict[str, str]) -> str:
    whens = " ".join(f"WHEN '{name}' THEN {value}" for name, value in values.items())
    return f"CASE {column} {whens} END"


def _changes(decays) -> str:
    """SQL: how many of the factors multiply (differ from 1, or are unknown)."""
    return " + ".join(f"(CASE WHEN coalesce({d}, 0.0) <> 1.0 THEN 1 ELSE 0 END)" for d in decays) or "0"


COLUMNS = ("rank", "module_id", "path", "class_name", "in_model", "neuron_class", "framework", "kind", "potentials",
           "states", "leak_multiplies", "decay", "threshold", "reset", "multi_step")


def table_sql(model: str, compat: str | None = None) -> str:
    """SQL: one row per neuron module `model` recognises under `compat`: rank, module_id, path,
    class_name, neuron_class (the table's class), framework, kind, potentials (how many state
    variables are integrated per step), states (those plus the other tensors kept), leak_multiplies
    (per neuron and step: the potentials whose factor differs from 1), decay, threshold, reset,
    multi_step (a call runs T steps: SpikingJelly's step_mode 'm', Norse's LIF)."""
    names = classes(model, compat)
    if not names:
        return f"SELECT {', '.join(f'NULL AS {c}' for c in COLUMNS)} WHERE false"
    column = "neuron_class"
    models = {name: NEURONS[name] for name in names}
    memories = "coalesce(json_array_length(a->'$.\"$memories\"'), 1)"
    sj = {name for name, n in models.items() if n.framework == "spikingjelly"}
    kind = {name: (f"CASE WHEN {_SPIKINGJELLY_LEAKY} THEN 'LIF' ELSE 'IF' END" if name in sj
                   else f"CASE WHEN {n.kind!r} = 'LIF' AND {_changes(n.decays)} = 0 THEN 'IF' ELSE {n.kind!r} END")
            for name, n in models.items()}
    potentials = {name: memories if name in sj else str(len(n.potentials)) for name, n in models.items()}
    states = {name: memories if name in sj else str(len(n.potentials) + len(n.kept)) for name, n in models.items()}
    leak = {name: (f"CASE WHEN {_SPIKINGJELLY_LEAKY} THEN 1 ELSE 0 END" if name in sj else _changes(n.decays))
            for name, n in models.items()}
    multi_step = {name: ("coalesce(a->>'step_mode', 's') = 'm'" if name in sj or n.step_mode_attribute
                         else str(n.multi_step).lower()) for name, n in models.items()}
    framework = {name: repr(n.framework) for name, n in models.items()}
    return f"""
SELECT rank, module_id, path, class_name, in_model, {column}, {_case(column, framework)} AS framework,
    {_case(column, kind)} AS kind,
    ({_case(column, potentials)})::BIGINT AS potentials, ({_case(column, states)})::BIGINT AS states,
    ({_case(column, leak)})::BIGINT AS leak_multiplies,
    {_case(column, {k: n.decay for k, n in models.items()})}::DOUBLE AS decay,
    {_case(column, {k: n.threshold for k, n in models.items()})}::DOUBLE AS threshold,
    {_case(column, {k: n.reset for k, n in models.items()})}::VARCHAR AS reset,
    {_case(column, multi_step)} AS multi_step
FROM (SELECT *, attributes AS a, list_filter(mro, lambda c: list_contains({quoted_list(names)}, c))[1] AS {column}
      FROM modules) m
WHERE {column} IS NOT NULL
"""


def materialisations(con, model: str, compat: str | None = None) -> dict[tuple[int, int], frozenset[str]]:
    """(rank, module_id) -> the ops that create the state of that neuron (neuron_state's replay)."""
    rows = con.execute(f"SELECT rank, module_id, neuron_class FROM ({table_sql(model, compat)})").fetchall()
    return {(int(r), int(m)): frozenset(NEURONS[c].materialisations) for r, m, c in rows}


def describe(trace, model: str = "neuron_state", compat: str | None = None):
    """The neuron modules the trace saw (`in_model`: of the bound model) and what each implements."""
    return trace.sql(f"SELECT * FROM ({table_sql(model, compat)}) ORDER BY rank, module_id")


def several_potentials(trace, model: str, compat: str | None = None) -> list[tuple[str, str, tuple[str, ...]]]:
    """(path, class name, potentials) of the model's neurons that integrate more than one state
    variable per step (snnTorch Synaptic and Alpha, Norse LIFCell and LIF): what formulas
    written for SpikingJelly's one-potential neurons cannot express as such."""
    rows = trace.sql(f"""SELECT path, class_name, neuron_class FROM ({table_sql(model, compat)})
                         WHERE in_model AND framework <> 'spikingjelly' AND potentials > 1 ORDER BY rank, module_id""")
    return [(path, name, NEURONS[cls].potentials) for path, name, cls in rows.itertuples(index=False)]
