#!/bin/sh
# Slurm HealthCheckProgram: drains this node while gpuwarden judges a GPU (or the node)
# unhealthy, and resumes it once every GPU is healthy again -- only a drain it made itself.
#
#   # slurm.conf
#   HealthCheckProgram=/usr/share/gpuwarden/slurm/healthcheck.sh
#   HealthCheckInterval=60          # seconds; a drain follows within this plus one poll
#   HealthCheckNodeState=ANY
#
# It asks the running daemon (`gpuwarden health`, over its root-only local socket; it never
# polls the GPUs itself). Its drain reason begins with "gpuwarden:" and names the GPU and the
# finding, e.g. "gpuwarden: GPU 0 xid_fatal". A node someone else drained (a reason that does
# not begin with "gpuwarden:") is never resumed and its reason never overwritten. When the
# daemon does not answer (exit 2: stopped, restarting) nothing changes: a restart must not
# drain a fleet. Like the prolog it runs as root with no PATH, and it always exits 0 (slurmd
# logs a failing health check but does not act on its exit code).
#
# Environment (for tests and unusual installs): GPUWARDEN (the binary), GPUWARDEN_SOCKET (the
# daemon's local_api.socket), SCONTROL and SINFO.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
set -u
gpuwarden=${GPUWARDEN:-gpuwarden}
scontrol=${SCONTROL:-scontrol}
sinfo=${SINFO:-sinfo}
node=${SLURMD_NODENAME:-$(hostname -s)}

say() {
    logger -t gpuwarden-healthcheck -- "$*" 2>/dev/null || echo "gpuwarden-healthcheck: $*" >&2
}

if [ -n "${GPUWARDEN_SOCKET:-}" ]; then
    verdict=$("$gpuwarden" health --socket "$GPUWARDEN_SOCKET" 2>/dev/null)
else
    verdict=$("$gpuwarden" health 2>/dev/null)
fi
code=$?
# The current drain reason ("none" when there is none); %E is the reason, -N per node.
reason=$("$sinfo" -h -N -n "$node" -o '%E' 2>/dev/null | head -n 1)
ours=no
case "$reason" in
    gpuwarden:*) ours=yes ;;
esac

case "$code" in
    1)
        # First line: "unhealthy: GPU 0 xid_fatal, GPU 3 gpu_lost".
        what=$(printf '%s\n' "$verdict" | head -n 1 | sed 's/^unhealthy: //' | cut -c1-200)
        new="gpuwarden: $what"
        if [ "$reason" = "none" ] || [ -z "$reason" ]; then
            "$scontrol" update nodename="$node" state=drain reason="$new" && say "drained $node: $what"
        elif [ "$ours" = yes ] && [ "$reason" != "$new" ]; then
            "$scontrol" update nodename="$node" reason="$new" && say "$node still drained: $what"
        fi
        ;;
    0)
        if [ "$ours" = yes ]; then
            "$scontrol" update nodename="$node" state=resume && say "resumed $node: every GPU healthy again"
        fi
        ;;
    *)
        say "gpuwarden's verdict is unknown (${verdict%%
*}); leaving $node as it is"
        ;;
esac
exit 0
