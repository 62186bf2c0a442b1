#!/usr/bin/env bash
# One GPU session's checks, prepared to run on a lent GPU machine (H200: torch + CUDA toolkit, no fastapi) in
# under 8 minutes, from the repository root:   OUT=/some/dir bash bench/gpu_session.sh
# (the device tool: run(command="bash bench/gpu_session.sh", timeout_s=560); it sets $OUT).
# Writes to $OUT: machine.txt, tests.txt (the GPU test files, pytest --noconftest), sass.md (ptxas and SASS per
# GEMM kernel, cuobjdump's own counts there), gemm.md/json (TFLOP/s against cuBLAS), models.md/json (against
# PyTorch), and summary.txt. Each step has its own time limit so a slow one cannot starve the rest.
set -u
OUT=${OUT:-$(mktemp -d)}
export PYTHONPATH=$PWD
PY=${PYTHON:-python3}
start=$(date +%s)
step() { echo "[$(( $(date +%s) - start )) s] $*" | tee -a "$OUT/summary.txt"; }

step "machine"
{ nvidia-smi; $PY -c "import torch, onnx, onnxruntime, llvmlite, numpy; print(torch.__version__, torch.version.cuda,
  onnx.__version__, onnxruntime.__version__, llvmlite.__version__, numpy.__version__)"; which ptxas cuobjdump nvdisasm; } \
  > "$OUT/machine.txt" 2>&1

step "GPU tests"
timeout 120 $PY -m pytest --noconftest -q -p no:cacheprovider -n 8 -rfEs \
  tests/core/kernels/test_gpu_gemm_mma.py tests/core/kernels/test_gpu_gemm_group.py tests/core/codegen/test_sass.py \
  tests/core/kernels/test_gpu_tensorcore.py tests/core/codegen/test_nvptx_gpu.py tests/core/runtime/test_cuda_gpu.py \
  tests/core/kernels/test_gpu_models.py tests/core/kernels/test_gpu_integer.py tests/core/tune/test_tune_gpu.py \
  > "$OUT/tests.txt" 2>&1
step "tests exit $? : $(tail -1 "$OUT/tests.txt")"

step "SASS"
timeout 60 $PY bench/bench_gpu_sass.py --archs sm_90 > "$OUT/sass.md" 2>&1
step "sass exit $?"

step "GEMM against cuBLAS"
timeout 130 $PY bench/bench_gpu_gemm.py -t "cuda -arch=sm_90" --json "$OUT/gemm.json" > "$OUT/gemm.md" 2> "$OUT/gemm.log"
step "gemm exit $?"

step "models against PyTorch"
timeout 150 $PY bench/bench_gpu.py -t "cuda -arch=sm_90" --rounds 15 --budget-s 100 --json "$OUT/models.json" \
  > "$OUT/models.md" 2> "$OUT/models.log"
step "models exit $?"
cat "$OUT/gemm.md" "$OUT/models.md" >> "$OUT/summary.txt" 2>/dev/null
step "done"
exit 0
