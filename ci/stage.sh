# Sourced by ci/main.sh and ci/test.sh: `stage NAME COMMAND...` runs COMMAND and appends
# "NAME<TAB>SECONDS<TAB>EXIT<TAB>BUSY" to $MESHTEST_STAGES (default build/ci-stages.tsv), which
# ci/stage-table.py prints as .ci/run's closing table. BUSY is the percentage of the machine's
# CPU time that was not idle during the stage (/proc/stat): on two cores, a stage at 50 % left
# one idle. Returns COMMAND's exit status.
MESHTEST_STAGES=${MESHTEST_STAGES:-$PWD/build/ci-stages.tsv}
export MESHTEST_STAGES
# The machine's CPU ticks so far: "BUSY TOTAL" (idle and waiting on I/O are not busy).
cpu_ticks() {
  local _cpu user nice system idle iowait irq softirq steal _rest
  read -r _cpu user nice system idle iowait irq softirq steal _rest < /proc/stat
  echo "$((user + nice + system + irq + softirq + steal)) $((user + nice + system + idle + iowait + irq + softirq + steal))"
}
stage() {
  local name=$1 start rc=0 tenths busy0 total0 busy1 total1
  shift
  mkdir -p "$(dirname "$MESHTEST_STAGES")"
  start=$(date +%s%N)
  read -r busy0 total0 <<< "$(cpu_ticks)"
  "$@" || rc=$?
  read -r busy1 total1 <<< "$(cpu_ticks)"
  tenths=$(( ($(date +%s%N) - start) / 100000000 ))
  printf "%s\t%d.%d\t%d\t%d\n" "$(basename "$0" .sh): $name" $((tenths / 10)) $((tenths % 10)) "$rc" \
    $(( total1 > total0 ? 100 * (busy1 - busy0) / (total1 - total0) : 0 )) >> "$MESHTEST_STAGES"
  return $rc
}
