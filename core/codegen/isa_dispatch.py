"""Multi-ISA libraries: per kernel, a dispatcher calling the variant that `kiln_isa_index` (runtime/kiln_isa.c) names."""
from __future__ import annotations

import dataclasses
from typing import Sequence

from llvmlite import ir

from .codegen_llvm import declare_kernel
from .kernel_objects import KernelObject
from .llvm_types import I32

ISA_INDEX = "kiln_isa_index"  # int32, set when the library loads (CPUID, or $KILN_ISA): the variant to run
DISPATCH_PREFIX = "kiln_isa_dispatch_"


def _isa_index(module: ir.Module) -> ir.GlobalVariable:
    if ISA_INDEX not in module.globals:
        ir.GlobalVariable(module, I32, ISA_INDEX)  # declared: defined by kiln_isa.c
    return module.globals[ISA_INDEX]


def declared_symbol(module: ir.Module, obj: KernelObject) -> ir.Function:
    return module.globals[obj.symbol] if obj.symbol in module.globals else declare_kernel(module, obj.func)


def kernel_dispatchers(module: ir.Module, variants: Sequence[dict[str, KernelObject]]) -> dict[str, ir.Function]:
    """Per kernel name, a function in `module` that calls the kernel's object code for the variant chosen at load
    (variant i: `variants[i]`, the order of the target's isa_variants and of kiln_isa.c's table). Kernels with one
    structural key share one dispatcher, as they share their objects."""
    index = _isa_index(module)
    found: dict[str, ir.Function] = {}
    for name, first in variants[0].items():
        symbol = DISPATCH_PREFIX + first.key[:24]
        if symbol not in module.globals:
            fn = declare_kernel(module, dataclasses.replace(first.func, name=symbol))
            b = ir.IRBuilder(fn.append_basic_block("entry"))
            chosen = b.load(index, typ=I32)
            blocks = [fn.append_basic_block(f"isa{i}") for i in range(len(variants))]
            switch = b.switch(chosen, blocks[0])
            for i, (block, objects) in enumerate(zip(blocks, variants)):
                if i:
                    switch.add_case(ir.Constant(I32, i), block)
                call = ir.IRBuilder(block)
                call.call(declared_symbol(module, objects[name]), list(fn.args), tail=True)
                call.ret_void()
        found[name] = module.globals[symbol]
    return found
