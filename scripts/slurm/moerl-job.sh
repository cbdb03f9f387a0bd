# moerl-job.sh — sourced by the sbatch scripts beside it: runs one moerl command as the job's
# payload so that a stop signal reaches it and the job comes back for what is left.
#
#   moerl_job_run CMD...   runs CMD in the background and waits. SIGTERM, SIGINT or SIGUSR1 to the
#                          batch shell (#SBATCH --signal=B:TERM@120, scancel, preemption) is passed
#                          on to it; moerl then finishes its current RL step, writes checkpoints and
#                          results, and exits with 75 ("preempted", sim/process/preempt.h). When that
#                          happens because the time limit is near, the job requeues itself
#                          (#SBATCH --requeue allows it); a scancel is not undone.
#                          Returns CMD's exit status.
#
# The header line of each attempt goes to the job's log, which --open-mode=append keeps across
# requeues (SLURM_RESTART_COUNT numbers the attempts).

MOERL_PREEMPTED=75

moerl_job_header() {
  echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ) job ${SLURM_JOB_ID:-?}${SLURM_ARRAY_TASK_ID:+ (array ${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID})}" \
       "attempt $(( ${SLURM_RESTART_COUNT:-0} + 1 )) on $(hostname): $*"
}

# Seconds until the job's time limit (a large number when it has none or squeue cannot say).
moerl_job_seconds_left() {
  local end
  end=$(squeue -h -j "${SLURM_JOB_ID}" -o %e 2>/dev/null)
  if [[ -z $end || $end == Unknown || $end == N/A ]] || ! end=$(date -d "$end" +%s 2>/dev/null); then
    echo 999999
    return
  fi
  echo $(( end - $(date +%s) ))
}

moerl_job_run() {
  moerl_job_header "$@"
  "$@" &
  local pid=$! rc=0
  trap 'kill -TERM '"$pid"' 2>/dev/null' TERM INT USR1
  wait "$pid" || rc=$?
  # A signal interrupts `wait` (status > 128) after the trap has passed it on: wait for moerl itself.
  while (( rc > 128 )) && kill -0 "$pid" 2>/dev/null; do
    rc=0
    wait "$pid" || rc=$?
  done
  trap - TERM INT USR1
  if (( rc == MOERL_PREEMPTED )); then
    local left
    left=$(moerl_job_seconds_left)
    echo "== moerl stopped cleanly (status $rc, preempted); ${left} s of the time limit left"
    if (( left < 300 )) && [[ -n ${SLURM_JOB_ID:-} ]]; then
      echo "== requeueing job ${SLURM_JOB_ID} to continue"
      scontrol requeue "${SLURM_JOB_ID}"
    fi
  fi
  return "$rc"
}
