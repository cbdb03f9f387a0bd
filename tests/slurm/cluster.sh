# cluster.sh — sourced by tests/slurm/slurm_test.sh: a one-node SLURM on localhost in a temporary
# directory (munged, slurmctld, slurmd as root, no cgroups, no accounting), for the tests only.
#
#   cluster_start DIR   writes DIR/slurm.conf, starts the three daemons (their PIDs in
#                       CLUSTER_PIDS) and waits until the node is idle; exports SLURM_CONF.
#                       Returns 1 with the reason in CLUSTER_WHY when a daemon cannot start.
#   cluster_stop        stops the daemons by PID (TERM, then KILL after 10 s); safe to call twice.

CLUSTER_PIDS=()
CLUSTER_WHY=""

cluster_free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

cluster_start() {
  local d=$1 node cpus mem p1 p2 i
  node=$(hostname -s)
  cpus=$(nproc)
  mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
  p1=$(cluster_free_port)
  p2=$(cluster_free_port)
  mkdir -p "$d/state" "$d/spool" "$d/munge"
  chmod 700 "$d/munge"
  # munge: its own key and socket, so nothing of a system munge or SLURM is used or disturbed
  head -c 1024 /dev/urandom > "$d/munge/munge.key"
  chmod 400 "$d/munge/munge.key"
  munged --foreground --force --key-file="$d/munge/munge.key" --socket="$d/munge/munge.sock" \
         --pid-file="$d/munge/munged.pid" --log-file="$d/munge/munged.log" --seed-file="$d/munge/seed" \
         > "$d/munged.out" 2>&1 &
  CLUSTER_PIDS+=($!)
  for i in $(seq 50); do [[ -S $d/munge/munge.sock ]] && break; sleep 0.2; done
  if ! munge -n -S "$d/munge/munge.sock" 2>/dev/null | unmunge -S "$d/munge/munge.sock" > /dev/null 2>&1; then
    CLUSTER_WHY="munged does not start or answer: $(tail -n 3 "$d/munged.out" "$d/munge/munged.log" 2>/dev/null | tr '\n' ' ')"
    return 1
  fi
  cat > "$d/slurm.conf" <<CONF
# written by tests/slurm/cluster.sh: one node, localhost, root, no cgroups, no accounting
ClusterName=moerl-test
SlurmctldHost=${node}(127.0.0.1)
SlurmctldPort=${p1}
SlurmdPort=${p2}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=${d}/munge/munge.sock
StateSaveLocation=${d}/state
SlurmdSpoolDir=${d}/spool
SlurmctldPidFile=${d}/slurmctld.pid
SlurmdPidFile=${d}/slurmd.pid
SlurmctldLogFile=${d}/slurmctld.log
SlurmdLogFile=${d}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
MinJobAge=600
KillWait=30
InactiveLimit=0
NodeName=${node} NodeAddr=127.0.0.1 CPUs=${cpus} RealMemory=${mem} State=UNKNOWN
PartitionName=test Nodes=${node} Default=YES MaxTime=INFINITE State=UP
CONF
  export SLURM_CONF=$d/slurm.conf
  slurmctld -D -i -f "$d/slurm.conf" > "$d/slurmctld.out" 2>&1 &
  CLUSTER_PIDS+=($!)
  slurmd -D -f "$d/slurm.conf" -N "$node" > "$d/slurmd.out" 2>&1 &
  CLUSTER_PIDS+=($!)
  for i in $(seq 60); do
    if [[ $(sinfo -h -N -o %t 2>/dev/null) == idle ]]; then return 0; fi
    for p in "${CLUSTER_PIDS[@]}"; do
      if ! kill -0 "$p" 2>/dev/null; then
        CLUSTER_WHY="a SLURM daemon exited at start: $(tail -n 4 "$d"/slurmctld.out "$d"/slurmd.out "$d"/slurmctld.log "$d"/slurmd.log 2>/dev/null | grep -v '^$' | tail -n 6 | tr '\n' ' ')"
        return 1
      fi
    done
    sleep 0.5
  done
  CLUSTER_WHY="the node did not become idle in 30 s (sinfo: $(sinfo -h -N -o '%t %E' 2>&1 | tr '\n' ' '))"
  return 1
}

cluster_stop() {
  local p i alive
  # newest first: slurmd and slurmctld before the munged they authenticate through
  for (( i = ${#CLUSTER_PIDS[@]} - 1; i >= 0; i-- )); do kill -TERM "${CLUSTER_PIDS[i]}" 2>/dev/null; done
  for i in $(seq 20); do
    alive=0
    for p in "${CLUSTER_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    (( alive )) || break
    sleep 0.5
  done
  for p in "${CLUSTER_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  for p in "${CLUSTER_PIDS[@]}"; do wait "$p" 2>/dev/null; done
  CLUSTER_PIDS=()
}
