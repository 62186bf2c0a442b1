"""The LLVM environment both builders share: DEBUG=3 prints the optimized IR, DEBUG=4 the unoptimized IR too."""
from __future__ import annotations

import pytest

from core.codegen.llvm_env import print_ir
from core.debug import debug_level


@pytest.mark.parametrize("level,printed", [(2, []), (3, ["optimized"]), (4, ["unoptimized", "optimized"])])
def test_print_ir_follows_the_debug_level(capsys, level, printed):
    with debug_level(level):
        print_ir("unoptimized", optimized=False)
        print_ir("optimized", optimized=True)
    assert capsys.readouterr().err.split() == printed
