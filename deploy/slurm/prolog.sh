#!/bin/sh
# Slurm prolog (slurm.conf: Prolog=/etc/slurm/prolog.d/gpuwarden-prolog.sh): records the job
# on each GPU it was given, in the job mapping directory gpuwarden reads
# (hpc_jobs.mapping_dir; dcgm-exporter's layout: one file per GPU index, a job id per line).
# Several jobs may share a GPU (time slicing, MPS): the id is appended, not written over.
# Runs as root on the compute node; SLURM_JOB_GPUS holds the job's GPU indices (0,2,...).
set -eu
dir="${GPUWARDEN_JOB_DIR:-/run/gpuwarden/jobs}"
gpus="${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}"
[ -n "${SLURM_JOB_ID:-}" ] && [ -n "$gpus" ] || exit 0
mkdir -p "$dir"
for gpu in $(echo "$gpus" | tr ',' ' '); do
    case "$gpu" in *[!0-9]*) continue ;; esac
    # One writer at a time per file: jobs start and end concurrently.
    (
        flock 9
        grep -qx "$SLURM_JOB_ID" "$dir/$gpu" 2>/dev/null || echo "$SLURM_JOB_ID" >> "$dir/$gpu"
    ) 9>"$dir/.lock"
done
exit 0
