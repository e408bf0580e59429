#!/usr/bin/env bash
# Builds meshtest, meshtrain and their tests under AddressSanitizer + UBSan (preset `asan`,
# build/asan) and runs the harness tests and a few multi-rank trainer tests with them.
# Every process a test starts (meshtest, each meshtrain rank, the fake trainer) writes any
# sanitizer report to build/asan/reports/; the script fails if one exists, even when the
# report came from a rank whose failure a test expected.
# Usage: ci/sanitize.sh [CTEST ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/asan/build.ninja ] || cmake --preset asan >/dev/null
targets=(meshtest meshtrain fake_trainer harness_unit_tests harness_run_tests trainer_cli_tests
         trainer_data_parallel_tests trainer_checkpoint_tests)
if ! cmake --build --preset asan --target "${targets[@]}" > build/asan/build.log 2>&1; then
  grep -E -A5 "error|FAILED" build/asan/build.log | head -n 40
  echo "sanitize: the asan build failed (build/asan/build.log)"
  exit 1
fi
reports=$PWD/build/asan/reports
rm -rf "$reports" && mkdir -p "$reports"
# LibTorch and Gloo are not instrumented; their one-time allocations at exit are not ours.
export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1"
export LSAN_OPTIONS="suppressions=$PWD/ci/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1"
# 1. Every harness test, except: the paths test's real meshtrain runs (ci/test.sh runs them unsanitized);
#    the rank out of memory (ASan reserves terabytes of address space for its shadow, so no
#    `ulimit -v` run can start under it); harness_install (it builds the unsanitized harness preset); the gigabyte of log (it bounds meshtest's RSS, which
#    ASan's 256 MB quarantine outgrows). Suites of unbuilt executables (*_NOT_BUILT) are left out.
# 2. A few multi-rank trainer tests: FSDP, DDP and mixed precision over 4 ranks, a killed rank,
#    a resume, corrupt and unwritable checkpoints, the harness contract files (every trainer
#    test under ASan takes 3 to 10 times as long; the 72 layouts would take an hour).
status=0
ctest --preset asan -j 2 --timeout 900 --output-junit "$PWD/build/asan/ctest-junit.xml" \
  -E '^(MeshtrainCli|DataParallel|Checkpoint\.|Layouts/|Forms/Paths|examples_pytorch|hf_numerics|workflows_validate|readme_quickstart|harness_install)|_NOT_BUILT|Run\.ARankOutOfMemory|Run\.AGigabyte|slurm/Slurm\.(ACpuSubset|SlurmsOwnTimeLimit)' \
  "$@" || status=1
ctest --preset asan -j 2 --timeout 900 --output-junit "$PWD/build/asan/ctest-junit-trainer.xml" \
  -R '^(MeshtrainCli\.(WritesTheHarnessContractFiles|AFailingRankRecordsItsErrorWhereTheLauncherAsks)|DataParallel\.(FsdpKeepsAQuarterOfTheBytesOnFourRanks|ReplicasEndBitwiseEqual|KilledRankMakesThePeersFailNotHang|MixedPrecisionComputesInBfloat16AndReducesInFloat32)|Checkpoint\.(ResumeOnTheSameMeshIsBitwiseEqual|CorruptInputsGiveOneClearErrorNamingFileAndKey|AnUnwritableCheckpointFolderIsRefusedBeforeTraining))$' \
  "$@" || status=1
if compgen -G "$reports/*" > /dev/null; then
  echo "sanitize: sanitizer reports (build/asan/reports/):"
  for f in "$reports"/*; do echo "== $f"; head -n 40 "$f"; done
  status=1
else
  echo "sanitize: no sanitizer report"
fi
exit $status
