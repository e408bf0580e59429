# Sourced by ci/main.sh and ci/test.sh: `stage NAME COMMAND...` runs COMMAND and appends
# "NAME<TAB>SECONDS<TAB>EXIT<TAB>BUSY<TAB>CPU_SECONDS" to $MESHTEST_STAGES (default
# build/ci-stages.tsv), which ci/stage-table.py prints as .ci/run's closing table. BUSY is the
# percentage of the machine's CPU time that was not idle during the stage (/proc/stat): on two
# cores, a stage at 50 % left one idle; it counts whatever else runs on the machine too.
# CPU_SECONDS is the user + system time of the processes this script reaped during the stage,
# their children included (the kernel's own accounting, as `time` reports it): the stage's own
# work, the same on a busy machine as on an idle one, and comparable across machines of one kind
# where minutes are not (they differ by 2x). A background job counts in the stage that waits for
# it (ci/test.sh: the asan and fuzz builds and the fuzzers, in `fuzzing`). Returns COMMAND's exit status.
MESHTEST_STAGES=${MESHTEST_STAGES:-$PWD/build/ci-stages.tsv}
export MESHTEST_STAGES
# The machine's CPU ticks so far: "BUSY TOTAL" (idle and waiting on I/O are not busy).
cpu_ticks() {
  local _cpu user nice system idle iowait irq softirq steal _rest
  read -r _cpu user nice system idle iowait irq softirq steal _rest < /proc/stat
  echo "$((user + nice + system + irq + softirq + steal)) $((user + nice + system + idle + iowait + irq + softirq + steal))"
}
# CPU ticks used by the reaped children of shell PID so far (cutime + cstime, fields 16 and 17
# of /proc/PID/stat).
children_ticks() {
  local stat
  stat=$(cat /proc/$1/stat)
  set -- ${stat##*) }  # the fields after the command name: state is field 3, so cutime is $14
  echo $(( ${14} + ${15} ))
}
stage() {
  local name=$1 start rc=0 tenths busy0 total0 busy1 total1 own0 own1 hz shell=$BASHPID
  shift
  mkdir -p "$(dirname "$MESHTEST_STAGES")"
  start=$(date +%s%N)
  read -r busy0 total0 <<< "$(cpu_ticks)"
  own0=$(children_ticks $shell)
  "$@" || rc=$?
  own1=$(children_ticks $shell)
  read -r busy1 total1 <<< "$(cpu_ticks)"
  tenths=$(( ($(date +%s%N) - start) / 100000000 ))
  hz=$(getconf CLK_TCK)
  printf "%s\t%d.%d\t%d\t%d\t%d.%02d\n" "$(basename "$0" .sh): $name" $((tenths / 10)) $((tenths % 10)) "$rc" \
    $(( total1 > total0 ? 100 * (busy1 - busy0) / (total1 - total0) : 0 )) \
    $(( (own1 - own0) / hz )) $(( (own1 - own0) % hz * 100 / hz )) >> "$MESHTEST_STAGES"
  return $rc
}
