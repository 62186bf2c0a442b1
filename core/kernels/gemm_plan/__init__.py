"""The tensor-core GEMM plan as data and index functions (tiles, problem, implicit-GEMM conv geometry): below codegen, which emits it, and the cuda backend, which schedules it."""
