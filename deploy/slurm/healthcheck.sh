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
# finding, e.g. "gpuwarden: GPU 0 xid_fatal"; while the idle node's scheduled validation runs
# (`gpuwarden health` exits 3) it drains it as "gpuwarden: validating", and resumes it when the
# validation passes. A node someone else drained (a reason that does
# not begin with "gpuwarden:") is never resumed and its reason never overwritten. When the
# daemon does not answer (exit 2: stopped, restarting) nothing changes: a restart must not
# drain a fleet. When it cannot read the node's current state (sinfo fails, is missing or
# prints nothing) it changes nothing either: it could not tell an admin's drain from none.
# slurmd runs it as root with no PATH: it searches the standard directories, /usr/local ones
# included, then whatever PATH it was given. It always exits 0 (slurmd logs a failing health
# check but does not act on its exit code).
#
# Environment (for tests and unusual installs): GPUWARDEN (the binary), GPUWARDEN_SOCKET (the
# daemon's local_api.socket), SCONTROL and SINFO.
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin${PATH:+:$PATH}
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
state=$("$sinfo" -h -N -n "$node" -o '%E' 2>/dev/null)
state_code=$?
reason=$(printf '%s\n' "$state" | head -n 1)
if [ "$state_code" -ne 0 ] || [ -z "$reason" ]; then
    say "cannot read $node's state from sinfo (exit $state_code); changing nothing"
    exit 0
fi
ours=no
case "$reason" in
    gpuwarden:*) ours=yes ;;
esac

case "$code" in
    1)
        # First line: "unhealthy: GPU 0 xid_fatal, GPU 3 gpu_lost".
        what=$(printf '%s\n' "$verdict" | head -n 1 | sed 's/^unhealthy: //' | cut -c1-200)
        new="gpuwarden: $what"
        if [ "$reason" = "none" ]; then
            "$scontrol" update nodename="$node" state=drain reason="$new" && say "drained $node: $what"
        elif [ "$ours" = yes ] && [ "$reason" != "$new" ]; then
            "$scontrol" update nodename="$node" reason="$new" && say "$node still drained: $what"
        fi
        ;;
    3)
        # The idle node's scheduled validation (probe.mode: node): no new work until it ends.
        # Nothing is wrong: the reason says so, and exit 0 afterwards resumes the node.
        new="gpuwarden: validating"
        if [ "$reason" = "none" ]; then
            "$scontrol" update nodename="$node" state=drain reason="$new" && say "drained $node: scheduled validation"
        elif [ "$ours" = yes ] && [ "$reason" != "$new" ]; then
            "$scontrol" update nodename="$node" reason="$new" && say "$node still drained: scheduled validation"
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
