"""Modules whose state an energy model leaves uncosted, named in every model's warnings.

A model costs a neuron's state update only for the classes of analyze/neurons.py it
recognises (none but SpikingJelly's under a reference compat). Anything else that keeps
state from one call to the next (a Norse or snnTorch neuron outside the table, a torch
RNNCell/LSTMCell/GRUCell or RNN layer, a SpikingJelly MemoryModule that is no neuron) is
costed at most by its ops, so its state would go unmentioned, or show only as the `zeros` /
`full` that created it. And a recognised neuron may compute products with its own weights
inside its call (Norse's LIFRecurrentCell: W_in x + W_rec z), which not every model costs.

`warnings(trace, model, compat)` words both, one line per module, with what the model does
cost of it (REACH, PRODUCT_REACH: data, one row per model). Each model's activity() adds
them to its warnings, so they reach its report, the CLI's text and JSON and the HTML page.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from spiketrace.analyze import neurons

# Base classes (in a module's stored MRO) that keep state between calls -> that state, in words.
STATEFUL_BASES = {
    "torch.nn.modules.rnn.RNNCellBase": "hidden state h; c too for an LSTMCell",
    "torch.nn.modules.rnn.RNNBase": "hidden state h; c too for an LSTM",
    "norse.torch.module.snn.SNNCell": "a Norse neuron's state",
    "norse.torch.module.snn.SNNRecurrentCell": "a Norse neuron's state and its last spikes",
    "norse.torch.module.snn.SNN": "a Norse neuron's state",
    "norse.torch.module.snn.SNNRecurrent": "a Norse neuron's state and its last spikes",
    "snntorch._neurons.neurons.SpikingNeuron": "an snnTorch neuron's state",
}
# SpikingJelly MemoryModules whose memory is a dropout mask, not a state that is integrated.
NOT_INTEGRATED = ("spikingjelly.activation_based.layer.dropout.Dropout",
                  "spikingjelly.activation_based.layer.dropout.Dropout2d",
                  "spikingjelly.activation_based.layer.dropout.DropConnectLinear")

# What a model costs of a stateful module that is no neuron to it.
REACH = {
    "compute": "its MAC/AC ops are costed, its state's memory traffic is not",
    "neuromc": "its GEMM and convolution ops are costed as trace fragments, its state update (a soma) is not",
    "lemaire": "its energy is omitted (Lemaire costs Linear/Conv layers and IF/LIF neurons)",
    "spikesim": "its energy is omitted (SpikeSim costs Conv2d crossbars and IF/LIF neurons)",
}
# What a model costs of the products a recognised neuron computes with its own weights (None: all).
PRODUCT_REACH = {
    "compute": "their MAC/AC are costed, their weights' reads are not (parameter memory is read for "
               "Conv/Linear modules only, as SpikingJelly reads it)",
    "neuromc": None,  # its GEMMs are mapped as trace fragments (neuromc/fallback.py EVENT_ROLES)
    "lemaire": "they are not costed (Lemaire costs the products of Linear/Conv modules only)",
    "spikesim": "they are not costed (SpikeSim costs Conv2d crossbars only)",
}

_MEMORIES = "a->'$.\"$memories\"'"

# In-model modules that ran a forward call in the selection (`{where}` over module_events) and
# keep state, with their MRO and memories; `{neuron}` is true for the neurons the model costs,
# `{ignored}` for modules the user skips.
CANDIDATES_SQL = f"""
WITH m AS (SELECT rank, module_id, path, class_name, mro, attributes AS a FROM modules WHERE in_model),
ran AS (SELECT DISTINCT rank, module_id FROM module_events WHERE kind = 'forward_pre' AND ({{where}})),
costed AS (SELECT rank, path FROM m WHERE {{neuron}})
SELECT DISTINCT m.path, m.class_name, m.mro,
       CASE WHEN json_type({_MEMORIES}) = 'ARRAY' THEN CAST({_MEMORIES} AS VARCHAR[]) END AS memories,
       {{neuron}} AS is_costed_neuron
FROM m JOIN ran USING (rank, module_id)
WHERE (list_has_any(m.mro, {neurons.quoted_list(STATEFUL_BASES)})
       OR list_has_any(m.mro, {neurons.quoted_list(neurons.NEURONS)})
       OR (coalesce(json_array_length({_MEMORIES}), 0) > 0
           AND NOT list_has_any(m.mro, {neurons.quoted_list(NOT_INTEGRATED)})))
  AND NOT EXISTS (SELECT 1 FROM costed c WHERE c.rank = m.rank AND starts_with(m.path, c.path || '.'))
  AND NOT {{ignored}}
ORDER BY m.path
"""


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _ignored(ignore_names) -> str:
    """SQL over `m`: the module, or a module it lies in, is one the user ignores (class or path)."""
    names = [n if isinstance(n, str) else f"{n.__module__}.{n.__qualname__}" for n in ignore_names or ()]
    if not names:
        return "false"
    listed = neurons.quoted_list(names)
    return f"""EXISTS (SELECT 1 FROM modules i WHERE i.rank = m.rank AND i.in_model
        AND (m.path = i.path OR starts_with(m.path, i.path || '.'))
        AND (list_has_any(i.mro, {listed}) OR list_contains({listed}, i.class_name)
             OR list_contains({listed}, i.path)))"""


def _state_of(row) -> str:
    """The state a module keeps, in words: its table row's, its memories', or its base's."""
    table = next((name for name in row.mro if name in neurons.NEURONS), None)
    if table is not None:
        model = neurons.NEURONS[table]
        return ", ".join((*model.potentials, *model.kept))
    memories = row.memories if isinstance(row.memories, (list, tuple, np.ndarray)) else ()  # NULL: none stored
    if len(memories):
        return ", ".join(str(name) for name in memories)
    return next(STATEFUL_BASES[name] for name in row.mro if name in STATEFUL_BASES)


def _why(compat: str | None) -> str:
    return (f" under compat={compat!r} (SpikingJelly recognises its BaseNode neurons only)"
            if compat in neurons.REFERENCE_COMPAT else "")


def uncosted_state(trace, model: str, compat: str | None = None, ignore_modules=(), where: str = "true") \
        -> pd.DataFrame:
    """One row per module whose state or own products `model` does not cost in full: path,
    class_name (short), what (state, products), reason. Only modules that ran in the selection
    `where` (SQL over module_events: the model's stage, step, rank and recompute filters): one
    that ran only outside it left nothing uncosted there."""
    query = (CANDIDATES_SQL.replace("{neuron}", neurons.is_neuron("m.mro", model, compat))
             .replace("{ignored}", _ignored(ignore_modules)).replace("{where}", where))
    rows = []
    for row in trace.sql(query).itertuples(index=False):  # one row per module of the model, not per event
        name = _short(row.class_name)
        if not row.is_costed_neuron:
            rows.append((row.path, name, "state",
                         f"{row.path} ({name}) keeps state from call to call ({_state_of(row)}) but is no neuron "
                         f"the {model} model costs{_why(compat)}: {REACH[model]}"))
            continue
        table = next(n for n in row.mro if n in neurons.NEURONS)
        products = neurons.NEURONS[table].products
        if products and PRODUCT_REACH.get(model):
            rows.append((row.path, name, "products",
                         f"{row.path} ({name}) computes {' and '.join(products)} products with its own weights "
                         f"inside the neuron: {PRODUCT_REACH[model]}"))
    return pd.DataFrame(rows, columns=["path", "class_name", "what", "reason"])


def warnings(trace, model: str, compat: str | None = None, ignore_modules=(), named=(), where: str = "true") \
        -> list[str]:
    """The lines naming what `model` leaves uncosted of stateful modules that ran in the
    selection `where`, but for the classes (short names) in `named`, which the model's own
    warnings already name with a reason."""
    frame = uncosted_state(trace, model, compat, ignore_modules, where)
    return [reason for name, reason in zip(frame["class_name"], frame["reason"]) if name not in set(named)]
