#!/bin/sh
# A stand-in GPU reset for a lent GPU (never reset one): lists who holds an NVIDIA device file
# now, and fails if the daemon (our parent) still holds one. Used as remediation.reset_command
# by remediation-hold-check.sh and handover-check.sh.
# Usage: nvidia-holders.sh PCI_BUS_ID
echo "daemon pid $PPID; GPU $1"
for fd in /proc/[0-9]*/fd/*; do
    t=$(readlink "$fd" 2>/dev/null) || continue
    case "$t" in /dev/nvidia*) pid=${fd#/proc/}; pid=${pid%%/*}
        echo "held: pid $pid ($(cat /proc/$pid/comm 2>/dev/null)) $t" ;;
    esac
done | sort | uniq -c
if ls -l /proc/$PPID/fd 2>/dev/null | grep -q '/dev/nvidia'; then echo "THE DAEMON STILL HOLDS A DEVICE FILE"; exit 1; fi
echo "the daemon holds no /dev/nvidia* file"
