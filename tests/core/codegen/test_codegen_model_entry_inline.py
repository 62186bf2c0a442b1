"""The model entry's runners call every kernel out of line (inlining them made builds superlinear)."""
from __future__ import annotations

import re

from core.codegen.build import optimized_llvm_ir
from tests.core.lowering.test_kernel_dedup import _executable, _layers
from core.target import get_target


def test_runners_call_each_kernel_instead_of_inlining_it():
    exe = _executable(_layers(2))
    text = optimized_llvm_ir(list(exe.funcs), get_target("native"), exe.plan)
    kernel_names = {f.name for f in exe.funcs}
    for runner in ("kiln_graph_run", "kiln_graph_profile"):
        body = re.search(rf"define [^\n]*@{runner}\(.*?\n}}", text, re.S).group(0)
        called = re.findall(r"call void @(\w+)\(", body)
        assert [c for c in called if c in kernel_names] == [c.func for c in exe.plan.calls]
