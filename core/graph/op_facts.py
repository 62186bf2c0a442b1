"""Op facts: each pass's per-op rules, registered in one table and read from it (op_facts_table.py lists them)."""
from __future__ import annotations

import enum
from typing import Callable, Mapping, Optional, TypeVar

from .ops import Pattern, all_ops

RuleT = TypeVar("RuleT", bound=Callable)


class Fact(enum.Enum):
    """One question a pass asks about an op beyond its OpDef (core/graph/ops.py: type inference, fusion pattern,
    constant folding, FLOPs): what it asks and the modules whose rules answer it.

    A pass registers its rules here (`@op_rule(Fact.LAYOUT, "Conv")`, the function staying in the pass's module) and
    looks them up here (`rule_for(op, Fact.LAYOUT)`). A fact may have an elementwise default, the rule of every
    ELEMWISE or BROADCAST op without its own, which an op may `decline`. `python -m core.graph.op_facts_table`
    prints the table of every op's facts (docs/op_facts.md, kept true by tests/core/graph/test_graph_op_facts.py)."""

    SIMPLIFY = ("algebraic rewrites of the node, several tried in order", "core.graph.passes.simplify")
    FOLD_SCALE_BIAS = ("absorbs the per-channel Mul or Add after it into its constant weights",
                       "core.graph.passes.fold_scale_bias")
    LAYOUT = ("runs in NCHW[x]c inside a conv region (-O3)", "core.graph.passes.alter_layout",
              "core.graph.passes.alter_layout_int8")
    LAYOUT_3D = ("runs in NCDHW[x]c inside a 3-D conv region (-O3)", "core.graph.passes.alter_layout_3d")
    PADDING = ("which output axes a zero-padded input axis (shape buckets) maps to, its positions kept apart; "
               "used lifted, refusing a merged axis", "core.graph.padding")
    PADDING_MERGED = ("the same over an axis that may be merged with others (a Flatten of batch and sequence): what "
                      "padding.py runs; ops without one lift their PADDING rule", "core.graph.padding")
    BOUND = ("takes an input whose length along one axis is known only at run time", "core.graph.bound_rules",
             "core.graph.bound_rules_spatial")
    MULTI_BOUND = ("takes inputs with run-time lengths along several axes", "core.graph.bound_rules_multi",
                   "core.graph.bound_rules_spatial")

    @property
    def question(self) -> str:
        return self.value[0]

    @property
    def modules(self) -> tuple[str, ...]:
        return self.value[1:]


_RULES: dict[tuple[Fact, str], tuple[Callable, ...]] = {}
_ELEMENTWISE: dict[Fact, Callable] = {}
_DECLINED: dict[tuple[Fact, str], str] = {}  # (fact, op) -> why it has no rule, not even the elementwise one


def op_rule(fact: Fact, *ops: str) -> Callable[[RuleT], RuleT]:
    """Decorator: the function answers `fact` for each of `ops` (one rule per op; SIMPLIFY keeps a list)."""

    def wrap(rule: RuleT) -> RuleT:
        for op in ops:
            key = (fact, op)
            if key in _DECLINED or (key in _RULES and fact is not Fact.SIMPLIFY):
                raise ValueError(f"{fact.name} rule for {op} registered twice, or for an op that declines it")
            _RULES[key] = _RULES.get(key, ()) + (rule,)
        return rule

    return wrap


def op_rules(fact: Fact, rules: Mapping[str, Callable]) -> None:
    """Registers a whole table of `fact`'s rules (op -> rule) at once."""
    for op, rule in rules.items():
        op_rule(fact, op)(rule)


def elementwise_rule(fact: Fact) -> Callable[[RuleT], RuleT]:
    """Decorator: the function answers `fact` for every ELEMWISE or BROADCAST op without a rule of its own."""

    def wrap(rule: RuleT) -> RuleT:
        if fact in _ELEMENTWISE:
            raise ValueError(f"{fact.name} elementwise rule registered twice")
        _ELEMENTWISE[fact] = rule
        return rule

    return wrap


def decline(fact: Fact, *ops: str, why: str) -> None:
    """`ops` have no rule for `fact`, not even its elementwise one; `why` (a few words) is what the table shows."""
    for op in ops:
        if (fact, op) in _RULES:
            raise ValueError(f"{op} has a {fact.name} rule: it cannot also decline it")
        _DECLINED[(fact, op)] = why


def declined(op: str) -> dict[Fact, str]:
    """The facts `op` declines, with why."""
    return {fact: why for (fact, name), why in _DECLINED.items() if name == op}


def ops_with_facts() -> set[str]:
    """Every op name that some rule or decline names (each should be a registered op)."""
    return {op for _, op in (*_RULES, *_DECLINED)}


def own_rules(op: str, fact: Fact) -> tuple[Callable, ...]:
    """The rules `op` declares for `fact` itself (no default), in registration order."""
    return _RULES.get((fact, op), ())


def own_rule(op: str, fact: Fact) -> Optional[Callable]:
    rules = own_rules(op, fact)
    return rules[0] if rules else None


def rule_for(op: str, fact: Fact) -> Optional[Callable]:
    """The rule that answers `fact` for `op`: its own, else the elementwise one when the op's pattern is ELEMWISE or
    BROADCAST and it does not decline, else None (also for an op that is not registered)."""
    rule = own_rule(op, fact)
    if rule is not None or (fact, op) in _DECLINED or fact not in _ELEMENTWISE:
        return rule
    op_def = all_ops().get(op)
    return _ELEMENTWISE[fact] if op_def is not None and op_def.pattern <= Pattern.BROADCAST else None
