"""Rules users add: for their own ops (`mylib::fused_lif`), for aten ops we do not cover, or
to override a shipped rule (with a warning). Like torch's `register_flop_formula`,
SpikingJelly's `extra_rules` and fvcore's handles, but offline: a trace captured before the
rule existed serves it, since rules read the facts every trace holds.

    from spiketrace.analyze.counters import register_rule
    register_rule("mylib::fused_lif", "flop", "4 * o0_numel")     # SQL over the op's facts

or a file passed to `spiketrace counts TRACE --rules my_rules.toml`:

    [flop]
    "mylib::fused_lif" = "4 * o0_numel"
    [mac]
    "mylib::spiking_matmul" = "CASE WHEN a0_is01 THEN 0 ELSE a0_numel / a0_shape[-1] * prod(a1_shape) END"

A rule is a SQL expression over the op_facts vocabulary of analyze/counters/facts.py
(`a0_numel`, `o0_shape[2]`, `a1_is01`, `tensor_bytes`, `kwarg(...)` macros ...), the
language of every shipped rule; it is checked when registered. (Python functions over Arrow
columns are not taken: a SQL rule runs in the same vectorised pass as the shipped ones.)
"""

from __future__ import annotations

import tomllib
import warnings
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from spiketrace.analyze.counters.facts import columns_of, compile_rule

# counter -> op -> rule, consulted by engine.rules_of after the shipped table
USER_RULES: dict[str, dict[str, str]] = {}


class RuleError(ValueError):
    """A user rule is malformed: the message names the counter, the op (and the file)."""


def op_name(op: str) -> str:
    """The name the trace records: `mylib::op` -> `mylib.op.default`, `aten::mm` -> `aten.mm.default`."""
    name = op.replace("::", ".")
    return name if name.count(".") >= 2 else f"{name}.default"


def register(op: str, counter: str, rule: str, counters: Mapping[str, ModuleType], where: str = "register_rule") -> str:
    """Add `rule` (SQL over the op's facts) for `op` to `counter` (one of `counters`, the
    per-op counter modules); returns the op's trace name. Overriding a shipped rule warns; a
    rule that is not text, or reads nothing and is no constant, fails."""
    if counter not in counters:
        raise RuleError(f"{where}: no per-op counter {counter!r}; choose from {', '.join(counters)}")
    if not isinstance(rule, str) or not rule.strip():
        raise RuleError(f"{where}: {counter} rule for {op!r} must be a SQL expression (text), got {rule!r}")
    name = op_name(op)
    compiled = compile_rule(rule)
    if not columns_of(compiled) and not any(ch.isdigit() for ch in rule):
        raise RuleError(f"{where}: {counter} rule for {name!r} reads no fact of the op ({rule!r})")
    if name in counters[counter].RULES:
        warnings.warn(f"{where}: {counter} rule for {name} overrides the shipped one", UserWarning, stacklevel=2)
    USER_RULES.setdefault(counter, {})[name] = rule
    return name


def load(path: str | Path, counters: Mapping[str, ModuleType]) -> list[tuple[str, str]]:
    """Register every rule of a TOML file ([counter] tables of "op" = "rule"); returns the
    (counter, op) pairs. Errors name the file, the counter and the op."""
    path = Path(path)
    try:
        document = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise RuleError(f"{path}: no such rules file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as problem:
        raise RuleError(f"{path}: not valid TOML: {problem}") from None
    added = []
    for counter, table in document.items():
        if not isinstance(table, dict):
            raise RuleError(f"{path}: [{counter}] must be a table of \"op\" = \"rule\"")
        for op, rule in table.items():
            added.append((counter, register(op, counter, rule, counters, where=str(path))))
    return added


def clear_rules() -> None:
    """Forget every user rule (tests, notebooks that try several)."""
    USER_RULES.clear()
