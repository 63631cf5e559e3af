#!/usr/bin/env bash
# The test suites under sanitizers, each build in its own directory (gcc, ccache):
#   scripts/sanitize.sh asan [ctest args...]   ASan + UBSan (build-asan): every unit and
#                                              integration test
#   scripts/sanitize.sh tsan [ctest args...]   TSan (build-tsan): the concurrency tests
#                                              (TSAN_SUITES below)
# Extra arguments go to ctest (for example -R ClusterTest). What each run found and how it was
# fixed: docs/results/2026-11-25-sanitizers.md, docs/results/2026-11-26-tsan-grpc.md.
# Suppressions (libraries built without the sanitizer, abseil's mutex internals, never the
# project's own code): tests/sanitizers/.
# Environment: JOBS (build jobs, default nproc), SPECDEC_TSAN_GRPC. Exit status: the build's or
# ctest's.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:?usage: scripts/sanitize.sh asan|tsan [ctest args...]}
shift
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache} CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
supp=$PWD/tests/sanitizers
# The concurrency tests of the project's own primitives: the handle table, batching (the
# coalescer), cancellation (the signal, the step loop), admission, API-key limits, the tokenizer
# and chat templates on many threads, the kernels' compute pool. With SPECDEC_TSAN_GRPC=1 also the suites that serve over
# gRPC (session loop, services, in-process clusters, HTTP front), built in build-tsan-grpc against
# abseil and gRPC built with TSan (scripts/build_tsan_deps.sh, run first when its prefix is
# missing): with Debian's uninstrumented gRPC, TSan sees one side of gRPC's synchronization and
# reports races through it (docs/results/2026-11-25-sanitizers.md).
TSAN_TARGETS=(tokenizer_test step_loop_test chat_template_test handle_table_test
              batch_coalescer_test admission_test cancel_signal_test api_keys_test
              compute_pool_test)
TSAN_SUITES='ByteLevelBpeTest.EncodeIsThreadSafe|StepLoopTest|ChatTemplateTest|HandleTableTest|'\
'BatchCoalescerTest|AdmissionQueue|CancelSignalTest|ApiKeysTest|ComputePoolTest'
if [ "${SPECDEC_TSAN_GRPC:-0}" = 1 ]; then
  TSAN_TARGETS+=(session_loop_test server_test policy_service_test target_service_test
                 server_run_test drafter_service_test cluster_test request_contract_test
                 load_aware_test load_aware_hook_test replica_set_test http_front_test
                 http_tls_test tls_test tls_cluster_test)
  TSAN_SUITES+='|SessionLoopTest|ServerTest|PolicyServiceTest|TargetServiceTest|ServerRunTest|'\
'DrafterServiceTest|ClusterTest|RequestContractTest|LoadAwareSpeculation|ReplicaSetTest|'\
'LoadAwareHookTest|HttpFrontTest|HttpTlsTest|TlsTest|TlsClusterTest'
fi
case "$kind" in
  asan)
    dir=build-asan
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DSPECDEC_SANITIZE=address,undefined >/dev/null
    ninja -C "$dir" -j "${JOBS:-$(nproc)}"
    export ASAN_OPTIONS=detect_leaks=1:check_initialization_order=1:strict_init_order=1
    export LSAN_OPTIONS=suppressions=$supp/lsan.supp:print_suppressions=0
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    labels='unit|integration'
    filter=()
    ;;
  tsan)
    dir=build-tsan
    deps=()
    tsan_supp=$supp/tsan.supp
    if [ "${SPECDEC_TSAN_GRPC:-0}" = 1 ]; then
      prefix=$PWD/build-tsan-deps/prefix
      [ -f "$prefix/lib/cmake/grpc/gRPCConfig.cmake" ] || bash scripts/build_tsan_deps.sh
      dir=build-tsan-grpc
      deps=(-DCMAKE_PREFIX_PATH="$prefix")
      tsan_supp=$supp/tsan_grpc.supp
      export LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    fi
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DSPECDEC_SANITIZE=thread "${deps[@]}" >/dev/null
    ninja -C "$dir" -j "${JOBS:-$(nproc)}" "${TSAN_TARGETS[@]}"
    # Forward passes run on the calling thread, so that what TSan reports is the services'
    # threads (each still runs concurrently); the compute pool's workers are under TSan in
    # ComputePoolTest. libtorch's OpenMP runtime (ATen's own operators in CPU training) is not
    # instrumented: TSan cannot see its barriers.
    export SPECDEC_MAX_COMPUTE_THREADS=1
    export TSAN_OPTIONS=suppressions=$tsan_supp:halt_on_error=1:second_deadlock_stack=1
    labels='unit|integration'
    filter=(-R "^($TSAN_SUITES)")
    ;;
  *) echo "usage: scripts/sanitize.sh asan|tsan [ctest args...]" >&2; exit 2 ;;
esac
ctest --test-dir "$dir" -L "$labels" "${filter[@]}" --output-on-failure -j "$(nproc)" \
  --timeout 1800 "$@"
