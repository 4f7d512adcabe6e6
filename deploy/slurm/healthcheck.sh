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
# The fleet drain guard: with max_drained set (a count, or a percentage of the nodes in this
# node's partitions: 5, 10%), it does not drain this node when that many nodes of its
# partitions are already drained with a "gpuwarden:" reason; it logs "drain guard: N of M
# nodes already drained by gpuwarden" and the verdict stays unhealthy, so the alert still
# fires (GpuwardenDrainGuardActive, from what it reports to the daemon). Many nodes failing at
# once is more likely a driver, firmware or fabric event than that many broken GPUs, and
# draining them all would take the cluster down for it. Unset: no cap. Set it in the
# environment (GPUWARDEN_MAX_DRAINED) or in the program's config file (GPUWARDEN_SLURM_CONF,
# default /etc/gpuwarden/slurm-healthcheck.conf, a line max_drained=10%).
#
# LBNL NHC shares the one HealthCheckProgram slot: when it is installed (/usr/sbin/nhc or
# /usr/local/sbin/nhc, or named by GPUWARDEN_NHC; GPUWARDEN_NHC=none skips it) it runs first,
# as Slurm would run it, and drains and resumes with its own "NHC:" reason; this program then
# judges gpuwarden's verdict and never touches NHC's drain. While NHC finds a problem, a node
# gpuwarden drained is not resumed (its reason says NHC failed), and one NHC left undrained is
# drained with "gpuwarden: NHC failed (exit N)": the node stays out while either finds one.
#
# Environment (for tests and unusual installs): GPUWARDEN (the binary), GPUWARDEN_SOCKET (the
# daemon's local_api.socket), SCONTROL, SINFO, SQUEUE, GPUWARDEN_MAX_DRAINED, GPUWARDEN_SLURM_CONF,
# GPUWARDEN_SLURM_TIMEOUT (seconds each Slurm command may take, 30), GPUWARDEN_NHC.
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin${PATH:+:$PATH}
export PATH
set -u
gpuwarden=${GPUWARDEN:-gpuwarden}
scontrol=${SCONTROL:-scontrol}
sinfo=${SINFO:-sinfo}
squeue=${SQUEUE:-squeue}
node=${SLURMD_NODENAME:-$(hostname -s)}

# Slurm's clients wait for slurmctld as long as it takes, and slurmd waits for this program: a
# controller that hangs would hang every check. Each call is bounded (coreutils' timeout kills
# the command's whole process group); one that does not answer in time counts as failed, and a
# failed read changes nothing.
slurm_timeout=${GPUWARDEN_SLURM_TIMEOUT:-30}
case "$slurm_timeout" in '' | *[!0-9]*) slurm_timeout=30 ;; esac
bounded() {
    if command -v timeout >/dev/null 2>&1; then
        timeout -k 5 "$slurm_timeout" "$@"
    else
        "$@"
    fi
}

say() {
    logger -t gpuwarden-healthcheck -- "$*" 2>/dev/null || echo "gpuwarden-healthcheck: $*" >&2
}

# gpuwarden health with the socket, if one was named.
ask() {
    if [ -n "${GPUWARDEN_SOCKET:-}" ]; then
        "$gpuwarden" health "$@" --socket "$GPUWARDEN_SOCKET"
    else
        "$gpuwarden" health "$@"
    fi
}

# max_drained: the environment's, else the config file's last max_drained= line; only a
# whole number, or one with %, is taken.
max_drained=${GPUWARDEN_MAX_DRAINED:-}
conf=${GPUWARDEN_SLURM_CONF:-/etc/gpuwarden/slurm-healthcheck.conf}
if [ -z "$max_drained" ] && [ -f "$conf" ] && [ -r "$conf" ]; then
    max_drained=$(sed -n 's/^[[:space:]]*max_drained[[:space:]]*=[[:space:]]*\([0-9][0-9]*%\{0,1\}\)[[:space:]]*$/\1/p' "$conf" | tail -n 1)
fi
case "$max_drained" in
    '' | *[!0-9%]* | *%*%* | %*) [ -n "$max_drained" ] && say "max_drained=$max_drained is not a count or a percentage (5, 10%); no drain guard"; max_drained= ;;
esac

# Whether draining this node is allowed; when it is not, says why and tells the daemon (its
# gpuwarden_drain_guard_refused series, alert GpuwardenDrainGuardActive).
drain_allowed() {
    [ -n "$max_drained" ] || return 0
    partitions=$(bounded "$sinfo" -h -N -n "$node" -o '%R' 2>/dev/null | sort -u | paste -sd, -)
    listing=$([ -n "$partitions" ] && bounded "$sinfo" -h -N -p "$partitions" -o '%N|%E' 2>/dev/null)
    if [ -z "$listing" ]; then
        say "drain guard: cannot read the nodes of $node's partitions; not draining $node: $1"
        ask scheduler-report --guard refused --guard-drained 0 --guard-nodes 0 --guard-max "$max_drained" >/dev/null 2>&1
        return 1
    fi
    nodes=$(printf '%s\n' "$listing" | cut -d'|' -f1 | sort -u | grep -c .)
    drained=$(printf '%s\n' "$listing" | grep '|gpuwarden:' | cut -d'|' -f1 | sort -u | grep -c .)
    case "$max_drained" in
        *%) limit=$((nodes * ${max_drained%\%} / 100)); [ "$limit" -ge 1 ] || limit=1 ;;
        *) limit=$max_drained ;;
    esac
    if [ "$drained" -ge "$limit" ]; then
        say "drain guard: $drained of $nodes nodes already drained by gpuwarden (max_drained $max_drained); not draining $node: $1"
        ask scheduler-report --guard refused --guard-drained "$drained" --guard-nodes "$nodes" --guard-max "$max_drained" >/dev/null 2>&1
        return 1
    fi
    ask scheduler-report --guard allowed --guard-drained "$drained" --guard-nodes "$nodes" --guard-max "$max_drained" >/dev/null 2>&1
    return 0
}

# NHC first: it may drain or resume the node itself (with its own reason), so the state below
# is read after it. Bounded like the Slurm calls: slurmd kills this program after 60 s.
nhc=${GPUWARDEN_NHC:-}
if [ -z "$nhc" ]; then
    for candidate in /usr/sbin/nhc /usr/local/sbin/nhc; do
        if [ -x "$candidate" ]; then nhc=$candidate; break; fi
    done
fi
nhc_failed=
if [ -n "$nhc" ] && [ "$nhc" != none ]; then
    bounded "$nhc" >/dev/null 2>&1
    nhc_code=$?
    if [ "$nhc_code" -ne 0 ]; then
        nhc_failed="NHC failed (exit $nhc_code)"
        say "$nhc found a problem (exit $nhc_code); its own log says which"
    fi
fi

verdict=$(ask 2>/dev/null)
code=$?
# The current drain reason ("none" when there is none); %E is the reason, -N per node.
state=$(bounded "$sinfo" -h -N -n "$node" -o '%E' 2>/dev/null)
state_code=$?
reason=$(printf '%s\n' "$state" | head -n 1)
if [ "$state_code" -ne 0 ] || [ -z "$reason" ]; then
    [ "$state_code" -eq 124 ] && state_code="124: no answer within ${slurm_timeout} s"
    say "cannot read $node's state from sinfo (exit $state_code); changing nothing"
    exit 0
fi
ours=no
case "$reason" in
    gpuwarden:*) ours=yes ;;
esac

# Drains the node with the reason "gpuwarden: $1" (within the drain guard), or, on a node
# gpuwarden drained already, keeps its reason current. Never touches someone else's drain.
drain_as() {
    new="gpuwarden: $1"
    if [ "$reason" = "none" ]; then
        if drain_allowed "$1"; then
            bounded "$scontrol" update nodename="$node" state=drain reason="$new" && say "drained $node: $1"
        fi
    elif [ "$ours" = yes ] && [ "$reason" != "$new" ]; then
        bounded "$scontrol" update nodename="$node" reason="$new" && say "$node still drained: $1"
    fi
}

case "$code" in
    1)
        # First line: "unhealthy: GPU 0 xid_fatal (next: gpu_reset), GPU 3 gpu_lost (next: reboot_required)"
        # (the next step where remediation.mode is advise or auto).
        drain_as "$(printf '%s\n' "$verdict" | head -n 1 | sed 's/^unhealthy: //' | cut -c1-200)"
        ;;
    3)
        # The idle node's scheduled validation (probe.mode: node): no new work until it ends.
        # Nothing is wrong: the reason says so, and exit 0 afterwards resumes the node.
        drain_as validating
        ;;
    0)
        if [ -n "$nhc_failed" ]; then
            # gpuwarden finds nothing; NHC does. A drain of ours says so and stays; a node NHC
            # did not drain (it is not in Slurm mode, or it timed out) is drained for it.
            drain_as "$nhc_failed"
        elif [ "$ours" = yes ]; then
            bounded "$scontrol" update nodename="$node" state=resume && say "resumed $node: every GPU healthy again"
        fi
        ;;
    *)
        say "gpuwarden's verdict is unknown (${verdict%%
*}); leaving $node as it is"
        ;;
esac
# What Slurm shows of the node now, for the daemon: who drained it and how many jobs run
# there (gpuwarden_scheduler_*; what an automatic remediation would have to check first).
after=$(bounded "$sinfo" -h -N -n "$node" -o '%E' 2>/dev/null | head -n 1)
case "$after" in
    '') exit 0 ;;
    none) drained=none ;;
    gpuwarden:*) drained=gpuwarden ;;
    *) drained=other ;;
esac
if jobs=$(bounded "$squeue" -h -w "$node" -o %i 2>/dev/null); then
    ask scheduler-report --node "$drained" --jobs "$(printf '%s\n' "$jobs" | grep -c .)" >/dev/null 2>&1
else
    ask scheduler-report --node "$drained" >/dev/null 2>&1
fi
exit 0
