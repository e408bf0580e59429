#!/usr/bin/env bash
# A real Slurm cluster on this one host, for tests and local tries (docs/slurm.md):
# slurmctld plus two slurmd nodes (n1, n2; 8 CPU slots and 8 fake GPUs each), auth/none,
# all state under one folder. Debian 12's slurmctld/slurmd/slurm-client 22.05.
#
#   bash ci/slurm-local.sh start [DIR]   # installs what is missing, starts, waits for idle nodes
#   bash ci/slurm-local.sh stop  [DIR]   # cancels every job, stops the daemons
#   export SLURM_CONF=DIR/etc/slurm.conf  # how clients (srun, meshtest --launcher slurm) find it
#
# DIR defaults to /tmp/meshtest-slurm. Needs root (slurmd runs the tasks as their user).
# Ports: slurmctld on $MESHTEST_SLURM_PORT (default 6817), the nodes on the next two, so two
# clusters (two checkouts' tests) can run at once with different values.
set -euo pipefail
action=${1:?usage: slurm-local.sh start|stop [DIR]}
root=$(realpath -m "${2:-/tmp/meshtest-slurm}")
conf=$root/etc/slurm.conf
port=${MESHTEST_SLURM_PORT:-6817}
export SLURM_CONF=$conf

install_slurm() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v srun >/dev/null && return
  local sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client
}

write_config() {
  mkdir -p "$root"/{etc,state,run,log,spool/n1,spool/n2}
  local host; host=$(hostname -s)
  for n in n1 n2; do
    mkdir -p "$root/dev/$n"
    # GPU "devices": Slurm needs character devices to set CUDA_VISIBLE_DEVICES.
    for i in 0 1 2 3 4 5 6 7; do ln -sfn /dev/null "$root/dev/$n/nvidia$i"; done
  done
  cat >"$conf" <<EOF
ClusterName=meshtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
StateSaveLocation=$root/state
SlurmdSpoolDir=$root/spool/%n
SlurmctldPidFile=$root/run/slurmctld.pid
SlurmdPidFile=$root/run/slurmd-%n.pid
SlurmctldLogFile=$root/log/slurmctld.log
SlurmdLogFile=$root/log/slurmd-%n.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
SlurmdParameters=config_overrides
EnforcePartLimits=ALL
ReturnToService=2
KillWait=2
InactiveLimit=0
MinJobAge=600
GresTypes=gpu
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$((port + 1)) CPUs=8 Gres=gpu:8 State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$((port + 2)) CPUs=8 Gres=gpu:8 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  cat >"$root/etc/gres.conf" <<EOF
AutoDetect=off
NodeName=n1 Name=gpu File=$root/dev/n1/nvidia[0-7]
NodeName=n2 Name=gpu File=$root/dev/n2/nvidia[0-7]
EOF
}

start() {
  install_slurm
  stop_daemons quiet
  rm -rf "$root"
  write_config
  setsid slurmctld -D -f "$conf" >"$root/log/slurmctld.out" 2>&1 </dev/null &
  echo $! >"$root/run/slurmctld.started"
  for n in n1 n2; do
    setsid slurmd -D -N $n -f "$conf" >"$root/log/slurmd-$n.out" 2>&1 </dev/null &
    echo $! >"$root/run/slurmd-$n.started"
  done
  for _ in $(seq 300); do
    if [ "$(sinfo -h -o '%t' 2>/dev/null | sort -u)" = idle ] && [ "$(sinfo -h -N -o '%N' | sort -u | wc -l)" = 2 ]; then
      echo "slurm-local: 2 nodes idle; export SLURM_CONF=$conf"
      return
    fi
    sleep 0.1
  done
  echo "slurm-local: nodes did not become idle in 30 s:" >&2
  sinfo -N -l >&2 || true
  tail -n 20 "$root"/log/*.log >&2 || true
  stop_daemons quiet
  exit 1
}

stop_daemons() {
  [ -d "$root/run" ] || return 0
  local pids=()
  for f in "$root"/run/slurmd-n*.started "$root"/run/slurmctld.started; do
    [ -f "$f" ] || continue
    local p; p=$(cat "$f")
    # a stale file's pid may belong to another process by now
    case "$(cat /proc/"$p"/comm 2>/dev/null)" in slurmd|slurmctld) pids+=("$p") ;; esac
  done
  local controller; controller=$(cat "$root/run/slurmctld.started" 2>/dev/null || echo 0)
  rm -f "$root"/run/*.started
  [ ${#pids[@]} -gt 0 ] || return 0
  # scancel without a controller retries for about 20 s: only ask a live one
  if [[ " ${pids[*]} " == *" $controller "* ]]; then scancel --user="$(id -un)" 2>/dev/null || true; fi
  kill -TERM "${pids[@]}" 2>/dev/null || true
  for _ in $(seq 100); do
    local alive=0
    for p in "${pids[@]}"; do
      # a zombie counts as gone: PID 1 may reap it late
      if [ -e /proc/$p ] && ! grep -q '^State:.*Z' /proc/$p/status 2>/dev/null; then alive=1; fi
    done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  kill -KILL "${pids[@]}" 2>/dev/null || true
  [ "${1:-}" = quiet ] || echo "slurm-local: stopped"
}

case $action in
  start) start ;;
  stop) stop_daemons ;;
  *) echo "usage: slurm-local.sh start|stop [DIR]" >&2; exit 2 ;;
esac
