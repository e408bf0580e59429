# Sourced by ci/main.sh and ci/test.sh: `stage NAME COMMAND...` runs COMMAND and appends
# "NAME<TAB>SECONDS<TAB>EXIT" to $MESHTEST_STAGES (default build/ci-stages.tsv), which
# ci/stage-table.py prints as .ci/run's closing table. Returns COMMAND's exit status.
MESHTEST_STAGES=${MESHTEST_STAGES:-$PWD/build/ci-stages.tsv}
export MESHTEST_STAGES
stage() {
  local name=$1 start rc=0 tenths
  shift
  mkdir -p "$(dirname "$MESHTEST_STAGES")"
  start=$(date +%s%N)
  "$@" || rc=$?
  tenths=$(( ($(date +%s%N) - start) / 100000000 ))
  printf "%s\t%d.%d\t%d\n" "$(basename "$0" .sh): $name" $((tenths / 10)) $((tenths % 10)) "$rc" >> "$MESHTEST_STAGES"
  return $rc
}
