#!/usr/bin/env bash
# One GPU session's checks, prepared to run on a lent GPU machine (H200: torch + CUDA toolkit, no fastapi) in
# under 9 minutes (the step limits below add up to 8m55s at most; the last session's steps took 3m40s, its models 93 s for
# 5 runs), from the repository root:   OUT=/some/dir bash bench/gpu_session.sh
# Each step's time limit can be set in seconds: T_TESTS, T_WGMMA_TESTS, T_WGMMA_GEMM, T_CONV, T_MODELS, T_GEMM,
# T_INT8, T_SASS. Everything is packed into $OUT/gpu_session.tgz at the end (the device tool brings back at most 8 files).
# (the device tool: run(command="bash bench/gpu_session.sh", timeout_s=560); it sets $OUT).
# Writes to $OUT: machine.txt, tests.txt (the GPU test files, pytest --noconftest), wgmma_tests.txt and
# gemm_wgmma.md/json (the sm_90a warpgroup GEMM's first GPU run: its own processes, so a fault of a kernel never run
# on a GPU before cannot spoil the other steps' CUDA contexts), conv.md/json (the implicit-GEMM
# conv against cuDNN, NHWC and NCHW), models.md/json (against PyTorch; Kiln device = the model as one CUDA graph on
# device buffers), gemm.md/json (TFLOP/s against cuBLAS), int8.md/json (int8 mma against dp4a and torch._int_mm),
# sass.md (ptxas and SASS per GEMM kernel, float and int8, cuobjdump's own counts there), and summary.txt. Each step has its own time limit so a slow one cannot starve the rest; the new
# measurements come first.
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
timeout ${T_TESTS:-70} $PY -m pytest --noconftest -q -p no:cacheprovider -n 8 -rfEs \
  tests/core/kernels/test_gpu_conv_mma.py tests/core/kernels/test_gpu_conv_group.py tests/core/runtime/test_cuda_gpu.py \
  tests/core/runtime/test_cuda_ranges_gpu.py \
  tests/core/kernels/test_gpu_gemm_mma.py tests/core/kernels/test_gpu_gemm_group.py tests/core/codegen/test_sass.py \
  tests/core/kernels/test_gpu_tensorcore.py tests/core/codegen/test_nvptx_gpu.py \
  tests/core/kernels/test_gpu_models.py tests/core/kernels/test_gpu_integer.py tests/core/tune/test_tune_gpu.py \
  tests/core/kernels/test_gpu_model_convs.py tests/core/kernels/test_gpu_epilogue.py \
  tests/core/kernels/test_gpu_gemm_mma_int8.py \
  > "$OUT/tests.txt" 2>&1
step "tests exit $? : $(tail -1 "$OUT/tests.txt")"

step "wgmma GEMM tests"
timeout ${T_WGMMA_TESTS:-25} $PY -m pytest --noconftest -q -p no:cacheprovider -n 4 -rfEs tests/core/kernels/test_gpu_gemm_wgmma.py \
  > "$OUT/wgmma_tests.txt" 2>&1
step "wgmma tests exit $? : $(tail -1 "$OUT/wgmma_tests.txt")"
step "wgmma GEMM against cuBLAS"
timeout ${T_WGMMA_GEMM:-40} $PY bench/bench_gpu_gemm.py -t "cuda -arch=sm_90" --kernels wgmma --dtypes fp16 bf16 \
  --sizes 2048 4096 8192 --json "$OUT/gemm_wgmma.json" > "$OUT/gemm_wgmma.md" 2> "$OUT/gemm_wgmma.log"
step "wgmma gemm exit $?"

step "convs against cuDNN"
timeout ${T_CONV:-70} $PY bench/bench_gpu_conv.py -t "cuda -arch=sm_90" --json "$OUT/conv.json" > "$OUT/conv.md" 2> "$OUT/conv.log"
step "conv exit $?"

step "models against PyTorch"
# What changed first: float32 convs as the SIMT implicit GEMM (resnet18/mobilenet_v2 fp32), split-K for the
# tensor-core convs of few tiles (resnet50 fp16 batch 1's layer4); then the rest of bench_gpu's DEFAULT_RUNS.
timeout ${T_MODELS:-200} $PY bench/bench_gpu.py -t "cuda -arch=sm_90" --rounds 15 --budget-s $(( ${T_MODELS:-200} * 2 / 3 )) --json "$OUT/models.json" \
  --runs resnet18:fp32:32 resnet50:fp16:1 resnet18:fp32:1 mobilenet_v2:fp32:32 resnet50:fp16:32 resnet18:fp16:32 \
  mobilenet_v2:fp16:32 resnet18:fp32+fp16:32 bert_base:fp16:32 resnet50:fp32:32 bert_base:fp32:1 bert_base:fp16:1 \
  mobilenet_v2:fp32:1 \
  > "$OUT/models.md" 2> "$OUT/models.log"
step "models exit $?"

step "GEMM against cuBLAS"
timeout ${T_GEMM:-55} $PY bench/bench_gpu_gemm.py -t "cuda -arch=sm_90" --kernels mma --json "$OUT/gemm.json" > "$OUT/gemm.md" 2> "$OUT/gemm.log"
step "gemm exit $?"

step "int8 GEMM: tensor cores against dp4a and torch._int_mm"
timeout ${T_INT8:-40} $PY bench/bench_gpu_int8.py -t "cuda -arch=sm_90" --json "$OUT/int8.json" \
  --shapes 4096x4096x4096 8192x8192x8192 4096x3072x768 8x4096x4096 > "$OUT/int8.md" 2> "$OUT/int8.log"
step "int8 exit $?"

step "SASS"
timeout ${T_SASS:-35} $PY bench/bench_gpu_sass.py --archs sm_90 --no-convs --no-wgmma > "$OUT/sass.md" 2>&1
step "sass exit $?"
cat "$OUT/conv.md" "$OUT/models.md" "$OUT/gemm.md" "$OUT/gemm_wgmma.md" "$OUT/int8.md" >> "$OUT/summary.txt" 2>/dev/null
step "done"
cat "$OUT/summary.txt"
(cd "$OUT" && tar czf /tmp/gpu_session.tgz --exclude gpu_session.tgz . && mv /tmp/gpu_session.tgz . && \
  find . -type f ! -name gpu_session.tgz ! -name summary.txt -delete)
exit 0
