#!/bin/sh
# Slurm prolog (slurm.conf: Prolog=/etc/slurm/prolog.d/gpuwarden-prolog.sh): records the job
# on each GPU it was given, in the job mapping directory gpuwarden reads
# (hpc_jobs.mapping_dir; dcgm-exporter's layout: one file per GPU index, a job id per line).
# Several jobs may share a GPU (time slicing, MPS): the id is appended, not written over.
#
# What Slurm gives a prolog (22.05, seen on a real slurmd; see README.md here):
# - It runs as root with no PATH at all: PATH is set below.
# - SLURM_JOB_GPUS is the GPUs' positions in gres.conf (0,1,...), not the device files'
#   numbers: list the GPUs in gres.conf in nvidia-smi's order (AutoDetect=nvml does) so a
#   position is the index gpuwarden's gpu="N" label shows.
# - Array tasks arrive with their own plain job id (SLURM_JOB_ID=1236, never 1234_2).
#
# It never fails: a prolog that exits non-zero drains the node and requeues the job, and
# recording which job uses which GPU is not worth that. A failure is logged (syslog through
# logger, else stderr, which slurmd logs) and the prolog exits 0; the job runs unattributed.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
set -u
# gpuwarden refuses a directory that others may write: keep the files 0755/0644.
umask 022
dir="${GPUWARDEN_JOB_DIR:-/run/gpuwarden/jobs}"
gpus="${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}"
[ -n "${SLURM_JOB_ID:-}" ] && [ -n "$gpus" ] || exit 0

complain() {
    logger -t gpuwarden-prolog "job $SLURM_JOB_ID: $*" 2>/dev/null || echo "gpuwarden-prolog: job $SLURM_JOB_ID: $*" >&2
}

if ! mkdir -p "$dir" 2>/dev/null; then
    complain "cannot create $dir; the job is not recorded"
    exit 0
fi
# One writer at a time per file (jobs start and end concurrently); without flock, write
# unlocked rather than not at all.
lock() {
    if command -v flock >/dev/null 2>&1; then flock 9; fi
}
for gpu in $(echo "$gpus" | tr ',' ' '); do
    case "$gpu" in '' | *[!0-9]*) continue ;; esac
    if ! (
        lock
        grep -qx "$SLURM_JOB_ID" "$dir/$gpu" 2>/dev/null || echo "$SLURM_JOB_ID" >> "$dir/$gpu"
    ) 9>>"$dir/.lock" 2>/dev/null; then
        complain "cannot record GPU $gpu in $dir"
    fi
done
exit 0
