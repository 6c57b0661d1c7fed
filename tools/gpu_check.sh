#!/usr/bin/env bash
# Builds the CUDA extension on a GPU machine from this checkout and .gpu/ (tools/gpu_bundle.sh)
# and checks it in one go: the CUDA tests, then the GPU benchmarks. Each stage's log goes to
# $LOGS (default: build/gpu-check); a failing stage does not stop the later ones, and the
# script exits non-zero if any failed.
# Use: tools/gpu_check.sh [all|build|test|bench]   (BENCH_MODELS, CNN_MODELS, BENCH_STEPS,
#      TEST_WORKERS, TEST_FILTER override the defaults below; CNN_MODELS= skips the CNN run)
set -uo pipefail
cd "$(dirname "$0")/.."
STAGE=${1:-all}
LOGS=${LOGS:-build/gpu-check}
BENCH_MODELS=${BENCH_MODELS:-bert-base gpt2-small}
CNN_MODELS=${CNN_MODELS:-resnet50}
BENCH_STEPS=${BENCH_STEPS:-10}
TEST_WORKERS=${TEST_WORKERS:-8}
TEST_FILTER=${TEST_FILTER:-cuda}
PYTHON=${PYTHON:-python3}
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
failed=0

# The bundled packages, unpacked into a prefix (never over /).
if [ -d .gpu/debs ]; then
  prefix=/tmp/ortmodule-gpu-prefix
  mkdir -p "$prefix"
  for deb in .gpu/debs/*.deb; do dpkg -x "$deb" "$prefix"; done
  export PATH="$prefix/usr/bin:$PATH" CMAKE_PREFIX_PATH="$prefix/usr"
  export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  src=$(ls -d .gpu/protobuf-* 2>/dev/null | head -n 1)
  [ -n "$src" ] && export ORTMODULE_PROTOBUF_SRC="$PWD/$src"
fi
# The GPU's architecture (e.g. 90 for an H100), unless CUDAARCHS says.
if [ -z "${CUDAARCHS:-}" ] && command -v nvidia-smi >/dev/null; then
  CUDAARCHS=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d '.')
  export CUDAARCHS
fi

stage() {  # stage NAME COMMAND...: runs COMMAND with its output in $LOGS/NAME.log
  local name=$1; shift
  echo "== $name: $*"
  local start=$SECONDS
  "$@" 2>&1 | tee "$LOGS/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "== $name: exit $rc after $((SECONDS - start)) s"
  [ "$rc" = 0 ] || failed=1
  return "$rc"
}

if [ "$STAGE" = all ] || [ "$STAGE" = build ]; then
  "$PYTHON" -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, \
'GPU', torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)"
  stage build env ORTMODULE_CUDA=1 "$PYTHON" setup.py -q build_ext --inplace || exit 1
  stage import "$PYTHON" -c "import ortmodule._C as C; i = C.cuda_info(); \
print(len(i['kernels']), 'CUDA kernels,', i['device_count'], 'devices'); assert i['compiled']"
fi
if [ "$STAGE" = all ] || [ "$STAGE" = test ]; then
  workers=()
  "$PYTHON" -c "import xdist" 2>/dev/null && workers=(-n "$TEST_WORKERS")
  stage test "$PYTHON" -m pytest "${workers[@]}" -q -ra -p no:cacheprovider -k "$TEST_FILTER" \
    tests/python/test_cuda.py tests/python/test_fused_optim_cuda.py tests/python/test_ops.py \
    tests/python/test_low_precision_products.py tests/python/test_models_training.py \
    tests/python/test_transformers.py tests/python/test_autograd_boundary.py \
    tests/python/test_models_api.py tests/python/test_models_modes.py \
    tests/python/test_label_sparsity.py
fi
if [ "$STAGE" = all ] || [ "$STAGE" = bench ]; then
  # float32 (TF32 off for every runner), then bfloat16 autocast for every runner; the CNNs
  # in float32 with TF32 off (products and cuDNN convolutions alike).
  # shellcheck disable=SC2086
  stage bench-fp32 "$PYTHON" benchmarks/run.py --device cuda --models $BENCH_MODELS \
    --steps "$BENCH_STEPS" --warmup 2 --no-memory --adamw best --tf32 off
  if [ -n "$CNN_MODELS" ]; then
    # shellcheck disable=SC2086
    stage bench-cnn "$PYTHON" benchmarks/run.py --device cuda --models $CNN_MODELS \
      --steps "$BENCH_STEPS" --warmup 2 --no-memory --adamw best --tf32 off
  fi
  # shellcheck disable=SC2086
  stage bench-bf16 "$PYTHON" benchmarks/run.py --device cuda --models $BENCH_MODELS \
    --steps "$BENCH_STEPS" --warmup 2 --no-memory --adamw best --autocast bf16
fi
exit "$failed"
