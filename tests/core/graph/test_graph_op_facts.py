"""Op facts: the table of every op's facts (docs/op_facts.md) is current, rules name real ops, every op has a kernel."""
from __future__ import annotations

import pytest

from core.graph.op_defs.control_flow import CONTROL_FLOW_OPS
from core.graph.op_facts import Fact, decline, elementwise_rule, op_rule, ops_with_facts, rule_for
from core.graph.op_facts_table import facts_document, op_facts
from core.graph.ops import all_ops
from core.kernels.registry import MissingKernelError, get_compute
from tests.test_layering import ROOT, imported_names

TABLE = ROOT / "docs" / "op_facts.md"


def test_the_table_of_every_ops_facts_is_current():
    """Adding an op (or a rule) changes this table: regenerate it and read your op's row, column by column."""
    assert TABLE.read_text() == facts_document(), \
        "docs/op_facts.md is stale: run `python -m core.graph.op_facts_table > docs/op_facts.md`, review your op's row"


def test_every_rule_names_a_registered_op_and_the_table_reads_every_rule_module():
    assert ops_with_facts() - set(all_ops()) == set()
    table_reads = {name for name, _ in imported_names(ROOT / "core" / "graph" / "op_facts_table.py")}
    assert {name for fact in Fact for name in fact.modules} <= table_reads


def test_the_table_lists_each_facts_answer():
    conv, relu, transpose = op_facts("Conv"), op_facts("Relu"), op_facts("Transpose")
    assert conv.rules[Fact.LAYOUT] == "alter_layout._conv" and Fact.LAYOUT_3D not in conv.rules
    assert conv.rules[Fact.FOLD_SCALE_BIAS] == "fold_scale_bias._fold_into_conv"
    assert relu.rules[Fact.BOUND] == "bound_rules._broadcast" and Fact.BOUND in relu.elementwise
    assert transpose.declined[Fact.PADDING_MERGED] == "lifts padding" and Fact.PADDING_MERGED not in transpose.rules
    assert op_facts("Reshape").rules[Fact.SIMPLIFY] == "simplify._same_shape + simplify._reshape_chain"
    assert op_facts("Softmax").rules[Fact.PADDING] == "padding._first_input_only()"


def test_an_op_gets_its_own_rule_else_the_elementwise_one_unless_it_declines():
    assert rule_for("Add", Fact.LAYOUT).__name__ == "_elementwise"  # BROADCAST pattern, no rule of its own
    assert rule_for("Softmax", Fact.LAYOUT) is None  # OPAQUE: no default
    assert rule_for("Expand", Fact.BOUND).__name__ == "_broadcast"
    assert rule_for("Transpose", Fact.PADDING_MERGED) is None  # declined: its plain rule, lifted, refuses merged axes
    assert rule_for("NoSuchOp", Fact.LAYOUT) is None


def test_a_fact_is_registered_once_per_op():
    with pytest.raises(ValueError, match="registered twice"):
        op_rule(Fact.LAYOUT, "Conv")(lambda rw, node: False)
    with pytest.raises(ValueError, match="declines it"):
        op_rule(Fact.PADDING_MERGED, "Transpose")(lambda node, graph, carried: [])
    with pytest.raises(ValueError, match="cannot also decline"):
        decline(Fact.LAYOUT, "Conv", why="no")
    with pytest.raises(ValueError, match="registered twice"):
        elementwise_rule(Fact.BOUND)(lambda node: [])


def test_every_op_has_a_kernel_compute():
    """The one fact kept with the kernels (core/kernels/registry.py: register_compute); a Fused node lowers its body,
    and If/Loop run their branches and bodies from the model entry (core/codegen/control_flow.py)."""
    missing = []
    for op in sorted(set(all_ops()) - {"Fused"} - CONTROL_FLOW_OPS):
        try:
            get_compute(op)
        except MissingKernelError:
            missing.append(op)
    assert missing == []
