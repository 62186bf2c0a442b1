"""Op facts: each pass's per-op rules, registered in one table and read from it (`op_facts(op)` lists an op's)."""
from __future__ import annotations

import enum
import importlib
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, TypeVar

from .ops import OpDef, Pattern, all_ops, get_op, one_per_output_element

RuleT = TypeVar("RuleT", bound=Callable)


class Fact(enum.Enum):
    """One question a pass asks about an op beyond its OpDef (core/graph/ops.py: type inference, fusion pattern,
    constant folding, FLOPs): what it asks and the modules whose rules answer it (imported to list them).

    A pass registers its rules here (`@op_rule(Fact.LAYOUT, "Conv")`, the function staying in the pass's module) and
    looks them up here (`rule_for(op, Fact.LAYOUT)`). A fact may have an elementwise default, the rule of every
    ELEMWISE or BROADCAST op without its own, which an op may `decline`. `python -m core.graph.op_facts` prints the
    table of every op's facts (docs/op_facts.md, kept true by tests/core/graph/test_graph_op_facts.py)."""

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


@dataclass(frozen=True)
class OpFacts:
    """Everything one op declares: its OpDef and, per fact, the rule that answers it ("module.function")."""

    op_def: OpDef
    rules: Mapping[Fact, str]  # facts without a rule are absent
    elementwise: frozenset[Fact]  # those answered by the fact's elementwise default
    declined: Mapping[Fact, str]  # fact -> why not


def load_all() -> None:
    """Imports every module that registers rules (a pass registers its own when it is imported)."""
    for fact in Fact:
        for module in fact.modules:
            importlib.import_module(module)


def _where(rule: Callable) -> str:
    """"module.function"; a rule made by a function of the module names its maker ("padding._first_input_only()")."""
    maker, made = rule.__qualname__.split(".<locals>.")[0], "<locals>" in rule.__qualname__
    return f"{rule.__module__.rpartition('.')[2]}.{maker}{'()' if made else ''}"


def op_facts(op: str) -> OpFacts:
    """Every fact `op` has, once every rule module is loaded."""
    load_all()
    rules, elementwise = {}, set()
    for fact in Fact:
        rule = rule_for(op, fact)
        if rule is not None:
            rules[fact] = " + ".join(_where(r) for r in own_rules(op, fact)) or _where(rule)
            if not own_rules(op, fact):
                elementwise.add(fact)
    declined = {fact: why for (fact, name), why in _DECLINED.items() if name == op}
    return OpFacts(get_op(op), rules, frozenset(elementwise), declined)


def facts_table() -> str:
    """Every registered op and its facts as a Markdown table (docs/op_facts.md); `*` marks an elementwise default."""
    header = ["op", "pattern", "fold", "flops"] + [fact.name.lower() for fact in Fact]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for op in sorted(all_ops()):
        facts = op_facts(op)
        cells = [op, facts.op_def.pattern.name, "yes" if facts.op_def.fold else "",
                 "" if facts.op_def.flops is one_per_output_element else "own"]
        for fact in Fact:
            cell = facts.rules.get(fact, "")
            cells.append(f"{cell}*" if fact in facts.elementwise else facts.declined.get(fact, cell))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def facts_document() -> str:
    """docs/op_facts.md: what each fact asks and where its rules live, then the table."""
    legend = "\n".join(f"- `{fact.name.lower()}`: {fact.question} ({', '.join(f'`{m}`' for m in fact.modules)})"
                       for fact in Fact)
    return (f"# Op facts\n\nGenerated by `python -m core.graph.op_facts > docs/op_facts.md` (core/graph/op_facts.py); "
            f"README \"Adding an op\" says what to do with it.\n\n- `pattern`, `fold`, `flops`: the op's OpDef "
            f"(core/graph/op_defs/): fusion kind, numpy constant folding, FLOPs counted its own way (blank: one per "
            f"output element)\n{legend}\n\nA cell names the rule (`module.function`); `*` marks the fact's "
            f"elementwise default, other words why an op has none. A blank cell: the pass keeps the node as it is, "
            f"or refuses it by name.\n\n"
            + facts_table())


if __name__ == "__main__":
    # As a script this file is __main__, a second copy: the passes register into core.graph.op_facts.
    from core.graph.op_facts import facts_document as document

    print(document(), end="")
