#!/usr/bin/env bash
# The GPU checks, in one run on a machine with an NVIDIA GPU, a compiler, CMake, Ninja, and a
# Python whose PyTorch has CUDA and which has Hugging Face `transformers` (no gRPC needed):
#   1. writes the Transformers reference fixtures (tests/data/hf_reference/make_fixtures.py);
#   2. builds the gRPC-free part of specdec against PyTorch's CUDA libtorch
#      (-DSPECDEC_DEVICE_CHECKS=ON) with the header/library Debian packages of .devdeps/;
#   3. runs the tests labelled `gpu` and the reference comparison on the GPU;
#   4. runs the one-row product benchmark (cuBLAS against specdec's kernels), the GPU model
#      benchmark (Qwen3-0.6B and -4B shapes, bf16, random weights; then without and with the
#      vector products, and without and with specdec's other CUDA kernels) and `specdec bench` on
#      the embedded pack, and both again in the row-independent mode (cuda_ops.h);
#   5. builds and runs the remaining unit tests of that build (CPU code on the GPU machine's CPU).
#
#   scripts/gpu_checks.sh --fetch   (on a Debian 12 machine) downloads the packages into .devdeps/
#                                   and copies ../shared/models/stories260K into .devshared/
#   scripts/gpu_checks.sh [OUT]     (on the GPU machine) writes its logs and results into OUT
#                                   (default $OUT, else /tmp/specdec-gpu-checks)
#   scripts/gpu_checks.sh --build   (on the GPU machine) only builds build-gpu/ (specdec-train,
#                                   the `specdec` CLI without `generate`, the benchmarks, tests)
set -uo pipefail
cd "$(dirname "$0")/.."
pkgs="libabsl-dev libabsl20220623 nlohmann-json3-dev libcli11-dev libpcre2-dev libpcre2-8-0
      libgtest-dev libgmock-dev"
mode=checks
case "${1:-}" in
  --fetch)
    mkdir -p .devdeps .devshared/models .devshared/datasets
    (cd .devdeps && apt-get download $pkgs)
    cp -r ../shared/models/stories260K .devshared/models/
    cp -r ../shared/datasets/humaneval .devshared/datasets/
    exit 0
    ;;
  --build) mode=build out=/tmp/specdec-gpu-build ;;
  *) out=${1:-${OUT:-/tmp/specdec-gpu-checks}} ;;
esac
mkdir -p "$out"
jobs=$(nproc)
start=$(date +%s)
stamp() { echo "[$(($(date +%s) - start)) s] $*"; }

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  lscpu | grep -E "Model name|^CPU\(s\)"
  echo "CPUs with avx512_bf16: $(grep -c avx512_bf16 /proc/cpuinfo)"
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'
  c++ --version | head -1
  cmake --version | head -1
  git log -1 --format='specdec %h %s' 2>/dev/null || true
} >"$out/build.log" 2>&1
cat "$out/build.log"

# 1. Fixtures, beside the build.
if [ "$mode" = checks ]; then
  (python3 tests/data/hf_reference/make_fixtures.py /tmp/hf_reference >"$out/fixtures.log" 2>&1 &&
    tar -C /tmp -cf "$out/hf_reference.tar" hf_reference) &
  fixtures_pid=$!
fi

# 2. Build.
root=/tmp/specdec-devroot
mkdir -p "$root"
for f in .devdeps/*.deb; do dpkg -x "$f" "$root"; done
lib="$root/usr/lib/x86_64-linux-gnu"
[ -e ../shared ] || ln -s "$PWD/.devshared" ../shared
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
stamp configure
cmake -S . -B build-gpu -G Ninja -DSPECDEC_DEVICE_CHECKS=ON -DSPECDEC_USE_CCACHE=OFF \
  -DSPECDEC_MALLOC=system -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$root/usr;$lib/cmake;$torch_prefix" \
  -DPCRE2_INCLUDE_DIR="$root/usr/include" -DPCRE2_LIBRARY="$lib/libpcre2-8.so" \
  -DCMAKE_CUDA_ARCHITECTURES=90 >>"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
export LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}"
if [ "$mode" = build ]; then
  cmake --build build-gpu -j "$jobs" 2>&1 | tail -5
  echo "export LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  exit 0
fi
gpu_targets="transformer_cuda_test cuda_ops_test decoder_cuda_test hf_reference_test specdec-model-bench
  specdec-cuda-linear-bench specdec"
stamp build $gpu_targets
cmake --build build-gpu -j "$jobs" --target $gpu_targets >>"$out/build.log" 2>&1 ||
  { grep -E "error|Error" "$out/build.log" | head -30; exit 1; }

# 3. GPU tests, then the Transformers comparison on the GPU and on this machine's CPU.
stamp gpu tests
# Verbose: the tests print what they measured (differences, graphs captured).
ctest --test-dir build-gpu -L gpu -V -j 4 --timeout 300 >"$out/gpu_tests.log" 2>&1
grep -E "tests passed|tests failed|Failed|\*\*\*|max \||f32|bf16|tau|near-tie|DFlash|graphs" \
  "$out/gpu_tests.log" | grep -v "^[0-9]*: \[ RUN" | head -60
# A crashed test again under cuda-gdb, for its backtrace.
for name in $(grep -E "^\s+[0-9]+ - .*(SEGFAULT|Child aborted)" "$out/gpu_tests.log" | awk '{print $3}'); do
  bin=build-gpu/tests/common/model/transformer_cuda_test
  [[ $name == Decoder* ]] && bin=build-gpu/tests/common/engine/decoder_cuda_test
  timeout 120 cuda-gdb -batch -ex run -ex bt --args "$bin" --gtest_filter="$name" 2>&1 |
    grep -E "^#|signal|SIG" | head -25 | tee -a "$out/gpu_tests.log"
done
wait "$fixtures_pid" || { stamp "fixtures failed"; tail -30 "$out/fixtures.log"; }
if [ -d /tmp/hf_reference/qwen3 ]; then
  cp -r /tmp/hf_reference/qwen3 /tmp/hf_reference/llama tests/data/hf_reference/
  for device in cpu cuda; do
    SPECDEC_TEST_DEVICE=$device build-gpu/tests/common/model/hf_reference_test 2>&1 |
      sed "s/^/[$device] /" | tee -a "$out/gpu_tests.log" | grep -E "f32|bf16|theta|PASSED|FAILED"
  done
fi

# 4. Speed (SPECDEC_SKIP_BENCH=1 leaves it out).
if [ "${SPECDEC_SKIP_BENCH:-0}" != 1 ]; then
stamp bench
# The products of a step (1 row) and of a verify (17 rows), per matrix: cuBLAS and specdec's
# kernels in every shape.
build-gpu/bench/specdec-cuda-linear-bench --rows 1,17 --json "$out/linear_bench.json" 2>&1 |
  tee -a "$out/bench.log"
# SPECDEC_MODEL_BENCH=0 leaves the model benchmark out, SPECDEC_BENCH_UNFUSED=0 its second run.
if [ "${SPECDEC_MODEL_BENCH:-1}" = 1 ]; then
build-gpu/bench/specdec-model-bench --device cuda --sizes qwen3-0.6b,qwen3-4b --dtypes bf16 \
  --cuda-graphs "${SPECDEC_BENCH_GRAPHS:-on,off}" --context 512 --reps 30 \
  --json "$out/gpu_bench.json" 2>&1 | tee "$out/bench.log"
fi
# The one-row products on cuBLAS ("off") and on the vector products ("on": the default shape; a
# number: that shape, cuda_kernels.h), in turn: SPECDEC_BENCH_VECTOR_SHAPES (empty: none).
if [ "${SPECDEC_MODEL_BENCH:-1}" = 1 ]; then
  for v in ${SPECDEC_BENCH_VECTOR_SHAPES-off on off on}; do
    rows=1 shape=-1
    [ "$v" = off ] && rows=0
    [[ $v =~ ^[0-9]+$ ]] && shape=$v
    SPECDEC_CUDA_VECTOR_LINEAR_MAX_ROWS=$rows SPECDEC_CUDA_VECTOR_LINEAR_SHAPE=$shape \
      build-gpu/bench/specdec-model-bench --device cuda --sizes qwen3-0.6b,qwen3-4b --dtypes bf16 \
      --cuda-graphs on --context 512 --reps 30 2>&1 | sed "s/^/[vector products $v] /" |
      tee -a "$out/bench.log"
  done
fi
# The row-independent products in every pass of up to 64 rows, in each shape named in
# SPECDEC_BENCH_ROWS_SHAPES (cuda_kernels.h; default: none), then cuBLAS's again.
if [ "${SPECDEC_MODEL_BENCH:-1}" = 1 ] && [ -n "${SPECDEC_BENCH_ROWS_SHAPES:-}" ]; then
  for v in $SPECDEC_BENCH_ROWS_SHAPES off; do
    rows=64 shape=$v
    [ "$v" = off ] && rows=0 shape=-1
    SPECDEC_CUDA_ROWS_LINEAR_MAX_ROWS=$rows SPECDEC_CUDA_ROWS_LINEAR_SHAPE=$shape \
      build-gpu/bench/specdec-model-bench --device cuda --sizes qwen3-0.6b,qwen3-4b --dtypes bf16 \
      --cuda-graphs on --context 512 --reps 30 2>&1 | sed "s/^/[row-independent products $v] /" |
      tee -a "$out/bench.log"
  done
fi
# The row-independent mode (SPECDEC_CUDA_ROW_INDEPENDENT=1, cuda_ops.h): its price
# (SPECDEC_BENCH_ROW_INDEPENDENT=0 leaves it out, here and on the pack below).
if [ "${SPECDEC_MODEL_BENCH:-1}" = 1 ] && [ "${SPECDEC_BENCH_ROW_INDEPENDENT:-1}" = 1 ]; then
  SPECDEC_CUDA_ROW_INDEPENDENT=1 build-gpu/bench/specdec-model-bench --device cuda \
    --sizes qwen3-0.6b,qwen3-4b --dtypes bf16 --cuda-graphs on --context 512 --reps 30 2>&1 |
    sed "s/^/[row-independent mode] /" | tee -a "$out/bench.log"
fi
# The same graphed passes without specdec's own CUDA kernels (ATen's operators in their place),
# then with them again, for what the kernels buy against the spread between runs.
if [ "${SPECDEC_MODEL_BENCH:-1}" = 1 ] && [ "${SPECDEC_BENCH_UNFUSED:-1}" = 1 ]; then
  for kernels in 0 1; do
    SPECDEC_CUDA_KERNELS=$kernels build-gpu/bench/specdec-model-bench --device cuda \
      --sizes qwen3-0.6b,qwen3-4b --dtypes bf16 --cuda-graphs on --context 512 --reps 30 \
      --json "$out/gpu_bench_kernels$kernels.json" 2>&1 | sed "s/^/[kernels $kernels] /" |
      tee -a "$out/bench.log"
  done
  # The row-independent products (opt-in) in place of cuBLAS's (table only, in bench.log).
  SPECDEC_CUDA_ROWS_LINEAR_MAX_ROWS=64 build-gpu/bench/specdec-model-bench --device cuda \
    --sizes qwen3-0.6b,qwen3-4b --dtypes bf16 --cuda-graphs on --context 512 --reps 30 2>&1 |
    sed "s/^/[row-independent products] /" | tee -a "$out/bench.log"
  # The own attention kernel at every row count of a fixed pass (table only).
  SPECDEC_CUDA_ATTENTION_MAX_ROWS=64 build-gpu/bench/specdec-model-bench --device cuda \
    --sizes qwen3-0.6b,qwen3-4b --dtypes bf16 --cuda-graphs on --context 512 --reps 30 2>&1 |
    sed "s/^/[own attention, all rows] /" | tee -a "$out/bench.log"
fi
# The pack with CUDA graphs (the default) and without, in turn (SPECDEC_PACK_GRAPHS="1": with
# graphs only).
pack=models/specdec-pycode
for graphs in ${SPECDEC_PACK_GRAPHS:-1 0}; do
  SPECDEC_CUDA_GRAPHS=$graphs build-gpu/cli/specdec bench --device cuda --target $pack/target \
    --draft $pack/draft --dflash $pack/dflash --policy $pack/policy \
    --methods DFLASH,DFLASH_ADAPTIVE,DRAFT_CHAIN,DYSPEC_TREE,NGRAM \
    --prompts ../shared/datasets/humaneval/HumanEval.jsonl.gz $pack/eval/heldout_prompts.txt \
    --max-prompts "${SPECDEC_PACK_PROMPTS:-10}" -n 128 --json "$out/pack_bench_graphs$graphs.json" \
    2>&1 | tee -a "$out/bench.log"
done
# The pack in the row-independent mode, bf16 and f32 (the table only, in bench.log): its =AR
# column counts the completions equal to AR's.
if [ "${SPECDEC_BENCH_ROW_INDEPENDENT:-1}" = 1 ]; then
  for dtype in bf16 f32; do
    SPECDEC_CUDA_ROW_INDEPENDENT=1 build-gpu/cli/specdec bench --device cuda --dtype $dtype \
      --target $pack/target --draft $pack/draft --dflash $pack/dflash --policy $pack/policy \
      --methods DFLASH,DFLASH_ADAPTIVE,DRAFT_CHAIN,DYSPEC_TREE,NGRAM \
      --prompts ../shared/datasets/humaneval/HumanEval.jsonl.gz $pack/eval/heldout_prompts.txt \
      --max-prompts "${SPECDEC_PACK_PROMPTS:-10}" -n 128 2>&1 | sed "s/^/[row-independent $dtype] /" |
      tee -a "$out/bench.log"
  done
fi
fi

# 5. The rest of the build's unit tests (CPU code, built against the CUDA libtorch);
# SPECDEC_REST_BUILD_S=0 leaves them out.
[ "${SPECDEC_REST_BUILD_S:-240}" = 0 ] && { rm -f "$out/hf_reference.tar"; stamp done; exit 0; }
stamp build all
if timeout "${SPECDEC_REST_BUILD_S:-240}" cmake --build build-gpu -j "$jobs" >>"$out/build.log" 2>&1; then
  stamp unit tests
  timeout 240 ctest --test-dir build-gpu -L unit -j "$jobs" --timeout 100 --output-on-failure \
    >"$out/unit_tests.log" 2>&1
  tail -15 "$out/unit_tests.log"
else
  stamp "the full build did not finish in time; unit tests not run"
fi
rm -f "$out/hf_reference.tar"  # the fixtures are committed; at most 8 files come back
stamp done
