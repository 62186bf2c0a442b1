"""Code generation: loop programs (TIR) -> LLVM IR -> optimized object -> shared library."""
from .build import assembly, build_cpu_library, lower_module, lower_to_llvm_ir, optimized_llvm_ir
from .kernel_library import KernelLibrary, load_kernels
from .model_entry import BufferRef, KernelCall, ModelPlan, validate_plan

__all__ = ["build_cpu_library", "lower_to_llvm_ir", "optimized_llvm_ir", "assembly", "lower_module", "load_kernels",
           "KernelLibrary", "BufferRef", "KernelCall", "ModelPlan", "validate_plan"]
