#!/bin/sh
# Slurm epilog (slurm.conf: Epilog=/etc/slurm/epilog.d/gpuwarden-epilog.sh): removes the job
# from the job mapping directory (see prolog.sh). It leaves other jobs on the same GPU, and
# never fails the epilog (a failing epilog drains the node).
set -u
dir="${GPUWARDEN_JOB_DIR:-/run/gpuwarden/jobs}"
[ -n "${SLURM_JOB_ID:-}" ] && [ -d "$dir" ] || exit 0
for file in "$dir"/*; do
    case "$(basename "$file")" in *[!0-9]*) continue ;; esac
    (
        flock 9
        if grep -qx "$SLURM_JOB_ID" "$file"; then
            grep -vx "$SLURM_JOB_ID" "$file" > "$file.new" || true
            mv "$file.new" "$file"
        fi
    ) 9>"$dir/.lock"
done
exit 0
