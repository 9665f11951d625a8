"""The paper and chip models' own options on `spiketrace recost`: the flags of `energy --model
paper|chip` (PAPER_FLAGS, CHIP_FLAGS), passed to the model's activity as `model_options`, so
a re-costing under many presets or a sweep maps the trace under the same convention as one
`energy` run. A flag of another model than the one costed is refused, naming it."""

from __future__ import annotations

import functools

import click

from spiketrace.analyze.cli.chip import chip_flags
from spiketrace.analyze.cli.paper import paper_flags

# model -> the options of its activity these flags give
MODEL_FLAGS = {
    "paper": ("mode", "first_layer", "non_spike", "matmul_rate", "samples", "time_steps"),
    "chip": ("step_time", "host", "samples", "time_steps"),
}
ALL_FLAGS = tuple(dict.fromkeys(name for names in MODEL_FLAGS.values() for name in names))


def _costed_model(model: str | None, presets, base) -> str | None:
    """The model recost will cost: --model, else the one the first named preset is of."""
    named = [p for p in (*presets, base) if p]
    if model is not None or not named:
        return model
    from spiketrace.analyze.energy import load_preset

    return load_preset(named[0]).model


def model_flags(command):
    """Adds the flags; the command gets `model_options`, the given ones, checked against the model."""

    @paper_flags
    @chip_flags
    @functools.wraps(command)
    def with_model_flags(*args, **kwargs):
        given = {name: value for name in ALL_FLAGS if (value := kwargs.pop(name)) is not None}
        model = _costed_model(kwargs["model"], kwargs["presets"], kwargs["base"])
        foreign = [name for name in given if name not in MODEL_FLAGS.get(model or "", ())]
        if foreign:
            owners = {name: "|".join(m for m, names in MODEL_FLAGS.items() if name in names) for name in foreign}
            raise click.UsageError(", ".join(f"--{name.replace('_', '-')}" for name in foreign) + ": options of "
                                   + " and ".join(sorted({f"--model {owners[n]}" for n in foreign}))
                                   + (f", not of --model {model}" if model else ""))
        return command(*args, model_options=given, **kwargs)

    return with_model_flags
