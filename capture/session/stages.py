"""Stages: what a stage name means (its phase, SpikingJelly 2.0.0 NeuroMC's legacy options) and
its begin/end markers.

A stage's phase is what every analysis splits by (forward, backward, optimizer), so a name
is never filed under a phase by default: it is read word by word against PHASE_WORDS, a
table of the words people name their stages with, and a name whose phase cannot be told
(no phase word, or words of two phases) is refused unless `phase=` is given:

    rec.stage("bwd")              -> backward   (inferred)
    rec.stage("sgd_step")         -> optimizer  (inferred)
    rec.stage("eval_step")        -> forward    ("step" names the optimizer only alone)
    rec.stage("loss")             -> RecorderError: pass phase=...
    rec.stage("loss", phase="forward")

Words are split at anything that is not a letter and at camelCase humps ("ForwardPass",
"b1_t0_bwd" -> forward, pass; b, t, bwd). SpikingJelly's legacy tokens keep their meaning:
`b<N>` and `t<N>` (reuse_weights when N > 0, kept as b_index/t_index) and `without_bp_bn`
(no batch-norm backward; its "bp" is not read as backward). A name that spells a phase word
inside a longer one ("lossbackward") and has no phase word of its own is read by substring,
so names written for NeuroMC-style profilers keep their phase.
"""

from __future__ import annotations

import dataclasses
import re

from spiketrace.capture.context import RecordingContext, Stage

PHASES = ("forward", "backward", "optimizer")


class RecorderError(RuntimeError):
    """The recorder was used in a way it cannot honour."""


# Words that name a phase. Data, not code: add a word here and every stage name with it follows.
PHASE_WORDS: dict[str, tuple[str, ...]] = {
    "forward": (
        "forward", "fwd", "fw", "feedforward", "inference", "infer", "eval", "evaluate", "evaluation",
        "predict", "prediction", "test", "testing", "validate", "validation", "val",
    ),
    "backward": (
        "backward", "bwd", "bw", "bp", "backprop", "backpropagate", "backpropagation", "grad", "grads",
        "gradient", "gradients",
    ),
    "optimizer": (
        "optimizer", "optimiser", "optim", "opt", "optimize", "optimise", "optimization", "update", "updates",
        "sgd", "adam", "adamw", "nadam", "radam", "adagrad", "adadelta", "adamax", "rmsprop", "lamb", "lars",
        "lion", "momentum",
    ),
}
# Words that name a phase only when no word of PHASE_WORDS does ("sgd_step" and "step" are the
# optimizer; "eval_step" is forward).
WEAK_PHASE_WORDS: dict[str, str] = {"step": "optimizer"}
# Words that say a stage spans several phases: without a phase word, such a name is refused.
MIXED_WORDS = ("train", "training", "iteration", "iter", "epoch", "loop", "all", "full")
# Phrases read as one word before the name is split ("zero_grad" is the optimizer's call).
PHASE_PHRASES: dict[str, str] = {"zero_grad": "optimizer", "zerograd": "optimizer", "no_grad": "forward"}
# Phase words found inside a longer word ("lossbackward"), where no word names a phase.
_SUBSTRINGS = {"backward": "backward", "backprop": "backward", "optimizer": "optimizer", "update": "optimizer"}

_WORD_PHASE = {word: phase for phase, words in PHASE_WORDS.items() for word in words}
_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
_LEGACY_B = re.compile(r"(?:^|[^a-z0-9])b(\d+)(?:[^a-z0-9]|$)")
_LEGACY_T = re.compile(r"(?:^|[^a-z0-9])t(\d+)(?:[^a-z0-9]|$)")
_WITHOUT_BN_BACKWARD = "without_bp_bn"


def name_words(name: str) -> list[str]:
    """The lowercase words of a stage name: legacy `without_bp_bn` left out, each phrase of
    PHASE_PHRASES read as its phase's word."""
    text = re.sub(_WITHOUT_BN_BACKWARD, " ", name, flags=re.IGNORECASE)
    for phrase, phase in PHASE_PHRASES.items():
        text = re.sub(phrase, f" {phase} ", text, flags=re.IGNORECASE)
    return [w.lower() for w in _WORDS.findall(text)]


def recognised_words() -> str:
    """The phase words, for error messages: 'forward: forward, fwd, ...; backward: ...'."""
    strong = "; ".join(f"{phase}: {', '.join(words)}" for phase, words in PHASE_WORDS.items())
    weak = ", ".join(f"{word} ({phase}, when alone)" for word, phase in WEAK_PHASE_WORDS.items())
    return f"{strong}; also {weak}"


def infer_phase(name: str) -> str:
    """The phase a stage name means, or RecorderError when the name does not say one."""
    words = name_words(name)
    phases = {_WORD_PHASE[w] for w in words if w in _WORD_PHASE}
    if not phases and not any(w in MIXED_WORDS for w in words):
        phases = {WEAK_PHASE_WORDS[w] for w in words if w in WEAK_PHASE_WORDS}
        if not phases:
            lowered = name.lower().replace(_WITHOUT_BN_BACKWARD, " ")
            phases = {phase for text, phase in _SUBSTRINGS.items() if text in lowered}
    if len(phases) == 1:
        return phases.pop()
    mixed = [w for w in words if w in MIXED_WORDS]
    why = (f"its words name several phases ({', '.join(sorted(phases))})" if phases
           else f"{mixed[0]!r} spans several phases" if mixed else "none of its words names a phase")
    raise RecorderError(
        f"stage({name!r}): cannot tell the phase from the name: {why}. Pass phase='forward', 'backward' "
        f"or 'optimizer' (rec.stage({name!r}, phase=...)), or name the stage with a recognised word: "
        f"{recognised_words()}"
    )


def _legacy_index(pattern: re.Pattern, name: str) -> int | None:
    match = pattern.search(name.lower())
    return int(match.group(1)) if match else None


class StageBook:
    """The stages of one trace: ids, and the options each name was first used with."""

    def __init__(self) -> None:
        self.options: dict[str, tuple] = {}
        self.next_id = 0
        self._made: dict[tuple, Stage] = {}  # (name, given options) -> the last stage made of them

    def open(self, name: str, phase: str | None, reuse_weights: bool | None, batch_norm_backward: bool | None) -> Stage:
        key = (name, phase, reuse_weights, batch_norm_backward)
        made = self._made.get(key)
        if made is not None:  # the same stage again (every step): only its id is new
            stage = dataclasses.replace(made, stage_id=self.next_id)
            self.next_id += 1
            return stage
        if phase is not None and phase not in PHASES:
            raise ValueError(f"stage({name!r}): phase must be one of {PHASES}, got {phase!r}")
        b_index, t_index = _legacy_index(_LEGACY_B, name), _legacy_index(_LEGACY_T, name)
        options = (
            phase or infer_phase(name),
            bool((b_index or 0) > 0 or (t_index or 0) > 0) if reuse_weights is None else bool(reuse_weights),
            (_WITHOUT_BN_BACKWARD not in name.lower()) if batch_norm_backward is None else bool(batch_norm_backward),
        )
        if self.options.setdefault(name, options) != options:
            raise ValueError(f"stage {name!r} was reused with different options: {self.options[name]} then {options}")
        stage = Stage(self.next_id, name, options[0], "explicit" if phase else "inferred", options[1], options[2],
                      b_index, t_index)
        self.next_id += 1
        if len(self._made) < 4096:
            self._made[key] = stage
        return stage


def write_marker(context: RecordingContext, kind: str, stage: Stage) -> None:
    """A `stage_markers` row ('begin' or 'end'); a failure is counted, never raised."""
    with context.lock:
        try:
            context.writer.tables["stage_markers"].append(
                seq=context.take_seq(),
                kind=kind,
                stage_id=stage.stage_id,
                name=stage.name,
                phase=stage.phase,
                phase_source=stage.phase_source,
                reuse_weights=stage.reuse_weights,
                batch_norm_backward=stage.batch_norm_backward,
                b_index=stage.b_index,
                t_index=stage.t_index,
                step=context.step_index,
            )
        except Exception as exc:  # noqa: BLE001 - a capture failure (capture/store/failures.py)
            context.report_failure("stage", stage.name, exc, context.seq - 1)
