"""llvmlite's process-wide state, shared by the CPU and NVPTX builders: one lock, target setup once, IR dumps."""
from __future__ import annotations

import sys
import threading

import llvmlite.binding as llvm

from ..debug import DEBUG

# llvmlite's global state (target registry, pass builders) is not documented as thread-safe.
LLVM_LOCK = threading.RLock()
_initialized = False


def initialize_llvm() -> None:
    """Registers every LLVM target and assembly printer, once; call it holding LLVM_LOCK."""
    global _initialized
    if not _initialized:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        _initialized = True


def print_ir(module, optimized: bool) -> None:
    """Prints `module`'s LLVM IR to stderr when DEBUG asks for it: 3 the optimized IR, 4 the unoptimized too."""
    if DEBUG.get() >= (3 if optimized else 4):
        print(str(module), file=sys.stderr)
