#!/bin/sh
# Slurm epilog (slurm.conf: Epilog=/etc/slurm/epilog.d/gpuwarden-epilog.sh): removes the job
# from the job mapping directory (see prolog.sh). It leaves other jobs on the same GPU, and
# never fails the epilog (a failing epilog drains the node). Runs with no PATH, as root.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
set -u
umask 022
dir="${GPUWARDEN_JOB_DIR:-/run/gpuwarden/jobs}"
[ -n "${SLURM_JOB_ID:-}" ] && [ -d "$dir" ] || exit 0
lock() {
    if command -v flock >/dev/null 2>&1; then flock 9; fi
}
for file in "$dir"/*; do
    [ -f "$file" ] && [ ! -L "$file" ] || continue
    case "$(basename "$file")" in *[!0-9]*) continue ;; esac
    (
        lock
        if grep -qx "$SLURM_JOB_ID" "$file"; then
            grep -vx "$SLURM_JOB_ID" "$file" > "$file.new" || true
            mv "$file.new" "$file"
        fi
    ) 9>>"$dir/.lock" 2>/dev/null || true
done
exit 0
