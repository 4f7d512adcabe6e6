# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_gpuwarden_global_optspecs
    string join \n config= h/help V/version
end

function __fish_gpuwarden_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_gpuwarden_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_gpuwarden_using_subcommand
    set -l cmd (__fish_gpuwarden_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c gpuwarden -n "__fish_gpuwarden_needs_command" -l config -d 'Config file (default: /etc/gpuwarden/config.yaml when it exists, else built-in defaults). `run`, `check` and `probe` run with it; `events` and `report` read its state.path, `health` its local_api.socket' -r -F
complete -c gpuwarden -n "__fish_gpuwarden_needs_command" -s h -l help -d 'Print help'
complete -c gpuwarden -n "__fish_gpuwarden_needs_command" -s V -l version -d 'Print version'
complete -c gpuwarden -n "__fish_gpuwarden_needs_command" -f -a "run" -d 'Run the daemon: poll every GPU and serve Prometheus metrics'
complete -c gpuwarden -n "__fish_gpuwarden_needs_command" -f -a "check" -d 'Poll every GPU once and print what needs attention. Exit 0: healthy; 1: findings; 2: no GPU read'
complete -c gpuwarden -n "__fish_gpuwarden_needs_command" -f -a "probe" -d 'Run the CUDA probe on one GPU now: bf16 GEMM, FP32 FMA, HBM copy and pinned PCIe bandwidth, compared with what the model should reach. Exit 0: passed (or no expected values for this model); 1: a test failed; 2: could not run; 3: the GPU is busy'
complete -c gpuwarden -n "__fish_gpuwarden_needs_command" -f -a "rules" -d 'The operator\'s own health rules (health.custom_rules)'
complete -c gpuwarden -n "__fish_gpuwarden_needs_command" -f -a "events" -d 'Print the health journal\'s events (read-only; also while the daemon runs). Exit 2 when the journal cannot be read'
complete -c gpuwarden -n "__fish_gpuwarden_needs_command" -f -a "report" -d 'Print one GPU\'s evidence packet for a vendor case (RMA) from the journal: identity, XID timeline, ECC and row remapping, probes, slowdowns, NVLink, and what NVIDIA\'s documents say to do. Exit 1: no such GPU in the journal; 2: the journal cannot be read'
complete -c gpuwarden -n "__fish_gpuwarden_needs_command" -f -a "health" -d 'Print the running daemon\'s health verdict (asked over its local socket, never by polling the GPUs again). Exit 0: no GPU unhealthy; 1: a GPU or the node is unhealthy; 2: unknown (the daemon does not answer); 3: the idle node\'s scheduled validation runs (keep new work off it; nothing is wrong). The first line is short, for node-problem-detector and Slurm\'s HealthCheckProgram'
complete -c gpuwarden -n "__fish_gpuwarden_needs_command" -f -a "copy-binary" -d 'Copy this binary to DIR/gpuwarden (mode 0755): how a Kubernetes init container hands gpuwarden to node-problem-detector\'s container, as gpuwarden\'s image has no shell or cp'
complete -c gpuwarden -n "__fish_gpuwarden_needs_command" -f -a "journal-worker" -d 'The daemon\'s journal worker: one request on stdin, one answer on stdout (internal; the daemon runs it, see src/journal/store/worker.rs)'
complete -c gpuwarden -n "__fish_gpuwarden_needs_command" -f -a "xid" -d 'XID errors: look up a code, or find XIDs in kernel-log text'
complete -c gpuwarden -n "__fish_gpuwarden_needs_command" -f -a "config" -d 'Work with config files'
complete -c gpuwarden -n "__fish_gpuwarden_needs_command" -f -a "man" -d 'Write gpuwarden\'s man pages (roff), gpuwarden(1) and one per command (gpuwarden-run(1), ...), made from these same definitions, into DIR (the Debian package installs them: `man gpuwarden`)'
complete -c gpuwarden -n "__fish_gpuwarden_needs_command" -f -a "completions" -d 'Print the shell completion script for bash, zsh or fish (the Debian package installs each where its shell looks: /usr/share/bash-completion/completions/gpuwarden, /usr/share/zsh/vendor-completions/_gpuwarden, /usr/share/fish/vendor_completions.d/)'
complete -c gpuwarden -n "__fish_gpuwarden_needs_command" -f -a "demo" -d 'Put a fault into the running demo (an XID, a hot, lost or slow GPU, a port down) to follow its story through health, the page, events and the report'
complete -c gpuwarden -n "__fish_gpuwarden_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand run" -l listen -d 'Listen address, overriding the config\'s `listen`: HOST:PORT, IP:PORT, [IPv6]:PORT or :PORT (every IPv4 address)' -r
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand run" -l config -d 'Config file (default: /etc/gpuwarden/config.yaml when it exists, else built-in defaults). `run`, `check` and `probe` run with it; `events` and `report` read its state.path, `health` its local_api.socket' -r -F
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand run" -l demo -d 'Run over eight simulated GPUs (needs the simulated NVML library; see README)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand run" -s h -l help -d 'Print help'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand check" -l config -d 'Config file (default: /etc/gpuwarden/config.yaml when it exists, else built-in defaults). `run`, `check` and `probe` run with it; `events` and `report` read its state.path, `health` its local_api.socket' -r -F
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand check" -l json -d 'Print JSON instead of a table'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand check" -l demo -d 'Check the simulated GPUs of the demo: the running demo\'s (the newest), as they are now, where one runs; else a fresh one'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand check" -s h -l help -d 'Print help'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand probe" -l gpu -d 'The GPU\'s index, as in `gpuwarden check` and the `gpu` label' -r
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand probe" -l tests -d 'Comma-separated tests (gemm_bf16, fma_fp32, hbm_copy, pcie_h2d, pcie_d2h); default: the config\'s probe.tests' -r
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand probe" -l gpus -d 'With --collective: only these GPUs (comma-separated indexes). One GPU alone has no bus to measure, but shows that NCCL loads, runs and sums right' -r
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand probe" -l config -d 'Config file (default: /etc/gpuwarden/config.yaml when it exists, else built-in defaults). `run`, `check` and `probe` run with it; `events` and `report` read its state.path, `health` its local_api.socket' -r -F
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand probe" -l json -d 'Print the report as JSON'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand probe" -l force -d 'Probe even when the GPU runs compute processes or is busy'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand probe" -l collective -d 'Instead of one GPU\'s tests: an all-reduce across every GPU of the node through NCCL, its bus bandwidth (every GPU must be idle unless --force)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand probe" -l settings-from-stdin -d 'Read the NVML and probe settings as JSON from stdin (how the daemon starts its scheduled probes, with the settings it runs with)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand probe" -s h -l help -d 'Print help'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand rules; and not __fish_seen_subcommand_from test help" -l config -d 'Config file (default: /etc/gpuwarden/config.yaml when it exists, else built-in defaults). `run`, `check` and `probe` run with it; `events` and `report` read its state.path, `health` its local_api.socket' -r -F
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand rules; and not __fish_seen_subcommand_from test help" -s h -l help -d 'Print help'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand rules; and not __fish_seen_subcommand_from test help" -f -a "test" -d 'Test rules: a rule file is run once over this node\'s snapshot (or the demo\'s) and every rule\'s outcome printed; a test file (rule_files, tests) runs them over its scenarios and checks what fires. Exit 1 when a rule fails or an expectation does not hold, 78 when a rule does not compile'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand rules; and not __fish_seen_subcommand_from test help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand rules; and __fish_seen_subcommand_from test" -l config -d 'Config file (default: /etc/gpuwarden/config.yaml when it exists, else built-in defaults). `run`, `check` and `probe` run with it; `events` and `report` read its state.path, `health` its local_api.socket' -r -F
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand rules; and __fish_seen_subcommand_from test" -l demo -d 'Run a rule file over the simulated GPUs of the demo'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand rules; and __fish_seen_subcommand_from test" -s h -l help -d 'Print help'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand rules; and __fish_seen_subcommand_from help" -f -a "test" -d 'Test rules: a rule file is run once over this node\'s snapshot (or the demo\'s) and every rule\'s outcome printed; a test file (rule_files, tests) runs them over its scenarios and checks what fires. Exit 1 when a rule fails or an expectation does not hold, 78 when a rule does not compile'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand rules; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand events" -l state -d 'The journal to read, instead of the config\'s state.path' -r -F
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand events" -l since -d 'Only events since this long ago (30m, 7d) or this Unix time' -r
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand events" -l gpu -d 'Only this GPU: its index (as `gpuwarden check` shows it) or its UUID' -r
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand events" -l kind -d 'Only these kinds, comma-separated' -r -f -a "xid\t'An XID, counted once whichever sources saw it (details: code, name, severity, sources, the kernel-log line)'
xid_storm\t'More reports of one XID on one GPU than are recorded one by one (a storm): their count'
health\t'The health verdict changed (from, to, findings)'
probe\t'A probe finished (each test\'s measured and expected value, pass)'
ecc\t'The uncorrectable ECC count changed'
row_remap\t'Row remapping: pending, failed, or the remapped rows changed'
recovery_action\t'The driver\'s recovery action changed (none, GPU reset, node reboot, drain...)'
nvlink\t'NVLink errors grew, or links went down or came back'
pcie\t'The PCIe replay counter as read at a GPU\'s first sight and at each start'
slowdown\t'A thermal or power-brake slowdown episode (start, duration)'
lost\t'The GPU stopped answering (fell off the bus)'
back\t'A lost GPU answers again'
pci_missing\t'A GPU on the PCI bus that no backend enumerates'
persistence\t'gpuwarden turned persistence mode on'
inventory\t'Driver, VBIOS, board part number or InfoROM of a GPU: first seen, or changed'
board_swap\t'A different GPU (another UUID and serial) at a PCI address: a board swap'
clear\t'An operator cleared a GPU after a repair (`gpuwarden health clear`): who (uid, pid, command), why, and the findings it let go of and those still present'
daemon\t'The daemon started or stopped'
nic\t'A network adapter first seen in this run or changed (firmware, board), or a port\'s findings raised or cleared (journal/writer/nic_rows.rs)'
sxid\t'An NVSwitch error (SXID) from the kernel log: code, switch, severity, the line'
validation\t'A GPU\'s validation (a probe before return to service) began, passed, failed or was skipped (details: the whole validation)'
remediation\t'An unhealthy GPU\'s next remediation step as advised, a reset or reboot mark that automatic remediation made, and its outcome'
sdc\t'The probe\'s correctness canary found a GPU computing wrong (the evidence), or a GPU model\'s agreement digest was first given or replaced (docs/probe.md, "Silent data corruption")'
memtest\t'The probe\'s HBM pattern test found a GPU\'s memory reading back wrong: the passes, the failing offsets and what they held (docs/probe.md, "HBM patterns")'
collective\t'An all-reduce across the node\'s GPUs: its GPUs, path, bus bandwidth and verdict (docs/probe.md, "The GPUs together")'"
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand events" -l limit -d 'At most this many (the newest)' -r
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand events" -l demo-pid -d 'Read the journal of the demo running as this pid' -r
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand events" -l config -d 'Config file (default: /etc/gpuwarden/config.yaml when it exists, else built-in defaults). `run`, `check` and `probe` run with it; `events` and `report` read its state.path, `health` its local_api.socket' -r -F
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand events" -l all -d 'Also the baselines: each counter\'s reading at first sight and at each start (left out by default: they say where a count stood, not that anything happened)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand events" -l json -d 'Print JSON instead of lines'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand events" -l demo -d 'Read the journal of the demo running now (`gpuwarden run --demo`; with several, the newest, said on stderr)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand events" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand report" -l state -d 'The journal to read, instead of the config\'s state.path' -r -F
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand report" -l gpu -d 'The GPU: its index or UUID' -r
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand report" -l nic -d 'A network adapter instead of a GPU: its name (mlx5_0), for a cable, transceiver or adapter case' -r
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand report" -l demo-pid -d 'Read the journal of the demo running as this pid' -r
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand report" -l config -d 'Config file (default: /etc/gpuwarden/config.yaml when it exists, else built-in defaults). `run`, `check` and `probe` run with it; `events` and `report` read its state.path, `health` its local_api.socket' -r -F
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand report" -l json -d 'Print the report as JSON'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand report" -l markdown -d 'Print the report as Markdown (for a ticket or a vendor case)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand report" -l demo -d 'Read the journal of the demo running now (`gpuwarden run --demo`; with several, the newest, said on stderr)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand report" -s h -l help -d 'Print help'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and not __fish_seen_subcommand_from clear scheduler-report help" -l socket -d 'The daemon\'s socket (default: the config\'s local_api.socket)' -r -F
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and not __fish_seen_subcommand_from clear scheduler-report help" -l demo-pid -d 'Ask the demo running as this pid' -r
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and not __fish_seen_subcommand_from clear scheduler-report help" -l config -d 'Config file (default: /etc/gpuwarden/config.yaml when it exists, else built-in defaults). `run`, `check` and `probe` run with it; `events` and `report` read its state.path, `health` its local_api.socket' -r -F
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and not __fish_seen_subcommand_from clear scheduler-report help" -l json -d 'Print the verdict (or the clear\'s answer) as JSON'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and not __fish_seen_subcommand_from clear scheduler-report help" -l demo -d 'Ask the demo running now (`gpuwarden run --demo`; with several, the newest, said on stderr)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and not __fish_seen_subcommand_from clear scheduler-report help" -s h -l help -d 'Print help'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and not __fish_seen_subcommand_from clear scheduler-report help" -f -a "clear" -d 'After a repair: count the GPU healthy again from now on (its fatal XIDs, failed probe and held findings from before no longer count) and record who and why in the journal. A finding whose condition still holds (a lost GPU, a pending row remap) comes back at the next poll, and this says so. Root (or gpuwarden\'s user), over the local socket only. Exit 0: the clear was taken (nothing left, or only the validation it started, which keeps the GPU out until its probe passes); 1: a finding whose condition still holds is present (it cannot be cleared until it is mended); 2: not cleared (the daemon did not answer, or refused: no such GPU); 64: no usable reason'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and not __fish_seen_subcommand_from clear scheduler-report help" -f -a "scheduler-report" -d 'What the Slurm health check saw, told to the daemon (deploy/slurm/healthcheck.sh runs it; alias `report`): its drain guard\'s decision, who drained the node. Served as gpuwarden_drain_guard_* (alert GpuwardenDrainGuardActive). Exit 0: kept; 2: not taken'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and not __fish_seen_subcommand_from clear scheduler-report help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and __fish_seen_subcommand_from clear" -l gpu -d 'The GPU: its index, UUID or PCI address' -r
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and __fish_seen_subcommand_from clear" -l nic -d 'A network adapter instead (mlx5_0): after a new cable or transceiver, its ports\' flaps and error growth count from now on, and their held findings are let go of' -r
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and __fish_seen_subcommand_from clear" -l reason -d 'What was repaired, a ticket: kept in the journal' -r
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and __fish_seen_subcommand_from clear" -l socket -d 'The daemon\'s socket (default: the config\'s local_api.socket)' -r -F
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and __fish_seen_subcommand_from clear" -l demo-pid -d 'Ask the demo running as this pid' -r
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and __fish_seen_subcommand_from clear" -l config -d 'Config file (default: /etc/gpuwarden/config.yaml when it exists, else built-in defaults). `run`, `check` and `probe` run with it; `events` and `report` read its state.path, `health` its local_api.socket' -r -F
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and __fish_seen_subcommand_from clear" -l skip-validation -d 'Let a GPU that was unhealthy back into service without the probe that otherwise must pass first (`health.validate_after_clear`); ends a pending or failed validation. Recorded in the journal with who and why'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and __fish_seen_subcommand_from clear" -l json -d 'Print the verdict (or the clear\'s answer) as JSON'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and __fish_seen_subcommand_from clear" -l demo -d 'Ask the demo running now (`gpuwarden run --demo`; with several, the newest, said on stderr)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and __fish_seen_subcommand_from clear" -s h -l help -d 'Print help'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and __fish_seen_subcommand_from scheduler-report" -l guard -d 'refused: not drained, max_drained nodes already drained by gpuwarden; allowed' -r -f -a "refused\t''
allowed\t''"
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and __fish_seen_subcommand_from scheduler-report" -l guard-drained -d 'Nodes of this node\'s partitions drained with a gpuwarden: reason' -r
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and __fish_seen_subcommand_from scheduler-report" -l guard-nodes -d 'Nodes in those partitions' -r
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and __fish_seen_subcommand_from scheduler-report" -l guard-max -d 'max_drained as the program has it (5, 10%)' -r
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and __fish_seen_subcommand_from scheduler-report" -l node -d 'Who drained the node, as Slurm shows it now' -r -f -a "gpuwarden\t''
other\t''
none\t''"
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and __fish_seen_subcommand_from scheduler-report" -l jobs -d 'Jobs running on the node (squeue)' -r
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and __fish_seen_subcommand_from scheduler-report" -l socket -d 'The daemon\'s socket (default: the config\'s local_api.socket)' -r -F
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and __fish_seen_subcommand_from scheduler-report" -l demo-pid -d 'Ask the demo running as this pid' -r
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and __fish_seen_subcommand_from scheduler-report" -l config -d 'Config file (default: /etc/gpuwarden/config.yaml when it exists, else built-in defaults). `run`, `check` and `probe` run with it; `events` and `report` read its state.path, `health` its local_api.socket' -r -F
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and __fish_seen_subcommand_from scheduler-report" -l json -d 'Print the verdict (or the clear\'s answer) as JSON'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and __fish_seen_subcommand_from scheduler-report" -l demo -d 'Ask the demo running now (`gpuwarden run --demo`; with several, the newest, said on stderr)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and __fish_seen_subcommand_from scheduler-report" -s h -l help -d 'Print help'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and __fish_seen_subcommand_from help" -f -a "clear" -d 'After a repair: count the GPU healthy again from now on (its fatal XIDs, failed probe and held findings from before no longer count) and record who and why in the journal. A finding whose condition still holds (a lost GPU, a pending row remap) comes back at the next poll, and this says so. Root (or gpuwarden\'s user), over the local socket only. Exit 0: the clear was taken (nothing left, or only the validation it started, which keeps the GPU out until its probe passes); 1: a finding whose condition still holds is present (it cannot be cleared until it is mended); 2: not cleared (the daemon did not answer, or refused: no such GPU); 64: no usable reason'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and __fish_seen_subcommand_from help" -f -a "scheduler-report" -d 'What the Slurm health check saw, told to the daemon (deploy/slurm/healthcheck.sh runs it; alias `report`): its drain guard\'s decision, who drained the node. Served as gpuwarden_drain_guard_* (alert GpuwardenDrainGuardActive). Exit 0: kept; 2: not taken'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand health; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand copy-binary" -l config -d 'Config file (default: /etc/gpuwarden/config.yaml when it exists, else built-in defaults). `run`, `check` and `probe` run with it; `events` and `report` read its state.path, `health` its local_api.socket' -r -F
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand copy-binary" -s h -l help -d 'Print help'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand journal-worker" -l config -d 'Config file (default: /etc/gpuwarden/config.yaml when it exists, else built-in defaults). `run`, `check` and `probe` run with it; `events` and `report` read its state.path, `health` its local_api.socket' -r -F
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand journal-worker" -s h -l help -d 'Print help'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand xid; and not __fish_seen_subcommand_from explain scan help" -l config -d 'Config file (default: /etc/gpuwarden/config.yaml when it exists, else built-in defaults). `run`, `check` and `probe` run with it; `events` and `report` read its state.path, `health` its local_api.socket' -r -F
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand xid; and not __fish_seen_subcommand_from explain scan help" -s h -l help -d 'Print help'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand xid; and not __fish_seen_subcommand_from explain scan help" -f -a "explain" -d 'Print what an XID code means, its severity and what to do. Exit 1 for a code not in the catalog'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand xid; and not __fish_seen_subcommand_from explain scan help" -f -a "scan" -d 'Print one JSON object per XID found in kernel-log text (raw /dev/kmsg records, dmesg, dmesg -T, journalctl -k, syslog); reads stdin when no FILE is given'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand xid; and not __fish_seen_subcommand_from explain scan help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand xid; and __fish_seen_subcommand_from explain" -l config -r -F
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand xid; and __fish_seen_subcommand_from explain" -s h -l help -d 'Print help'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand xid; and __fish_seen_subcommand_from scan" -l config -r -F
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand xid; and __fish_seen_subcommand_from scan" -s h -l help -d 'Print help'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand xid; and __fish_seen_subcommand_from help" -f -a "explain" -d 'Print what an XID code means, its severity and what to do. Exit 1 for a code not in the catalog'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand xid; and __fish_seen_subcommand_from help" -f -a "scan" -d 'Print one JSON object per XID found in kernel-log text (raw /dev/kmsg records, dmesg, dmesg -T, journalctl -k, syslog); reads stdin when no FILE is given'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand xid; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand config; and not __fish_seen_subcommand_from check help" -l config -d 'Config file (default: /etc/gpuwarden/config.yaml when it exists, else built-in defaults). `run`, `check` and `probe` run with it; `events` and `report` read its state.path, `health` its local_api.socket' -r -F
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand config; and not __fish_seen_subcommand_from check help" -s h -l help -d 'Print help'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand config; and not __fish_seen_subcommand_from check help" -f -a "check" -d 'Validate a config file; errors name file, line and column. Exit 78 (EX_CONFIG) when invalid'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand config; and not __fish_seen_subcommand_from check help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand config; and __fish_seen_subcommand_from check" -l config -r -F
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand config; and __fish_seen_subcommand_from check" -s h -l help -d 'Print help'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand config; and __fish_seen_subcommand_from help" -f -a "check" -d 'Validate a config file; errors name file, line and column. Exit 78 (EX_CONFIG) when invalid'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand config; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand man" -l config -r -F
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand man" -s h -l help -d 'Print help'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand completions" -l config -r -F
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand completions" -s h -l help -d 'Print help'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand demo; and not __fish_seen_subcommand_from inject help" -l config -r -F
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand demo; and not __fish_seen_subcommand_from inject help" -s h -l help -d 'Print help'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand demo; and not __fish_seen_subcommand_from inject help" -f -a "inject" -d 'Put a fault into the running demo as the real thing would show it: an XID in its kernel log, a hot, lost or slow GPU in its simulated NVML and CUDA, a network port down; or `--undo` them. Then watch `gpuwarden health --demo`, the status page and `gpuwarden events --demo` (docs/fault-end-to-end.md walks through one)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand demo; and not __fish_seen_subcommand_from inject help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand demo; and __fish_seen_subcommand_from inject" -l gpu -d 'The GPU (0 to 7) for --xid, --hot, --slow-probe, --wrong-results, --bad-hbm and --lost' -r
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand demo; and __fish_seen_subcommand_from inject" -l xid -d 'An XID by code (79: fallen off the bus; 48: double-bit ECC; 13: an application\'s fault): its line in the demo\'s kernel log. With 79 the GPU is lost as well: it answers nothing until `--undo`' -r
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand demo; and __fish_seen_subcommand_from inject" -l port-down -d 'A network port down, by adapter (mlx5_0 to mlx5_7)' -r
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand demo; and __fish_seen_subcommand_from inject" -l demo-pid -d 'The demo running as this pid (default: the newest; its log names its pid)' -r
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand demo; and __fish_seen_subcommand_from inject" -l config -r -F
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand demo; and __fish_seen_subcommand_from inject" -l hot -d 'The GPU over its slowdown temperature, its clocks slowed for heat'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand demo; and __fish_seen_subcommand_from inject" -l slow-probe -d 'The GPU\'s HBM at 40 % of its rate under the probe: its next probe (the validation after a clear) fails'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand demo; and __fish_seen_subcommand_from inject" -l wrong-results -d 'The GPU computes one element of every GEMM wrong, by a bit: its next probe\'s correctness canary finds it (sdc_suspect)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand demo; and __fish_seen_subcommand_from inject" -l bad-hbm -d 'A bit of the GPU\'s HBM stuck: its next probe\'s pattern test finds it (hbm_pattern_errors)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand demo; and __fish_seen_subcommand_from inject" -l lost -d 'The GPU lost: every NVML call answers "GPU is lost"'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand demo; and __fish_seen_subcommand_from inject" -l undo -d 'The scenario and the ports as the demo started (XIDs stay in the kernel log)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand demo; and __fish_seen_subcommand_from inject" -s h -l help -d 'Print help'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand demo; and __fish_seen_subcommand_from help" -f -a "inject" -d 'Put a fault into the running demo as the real thing would show it: an XID in its kernel log, a hot, lost or slow GPU in its simulated NVML and CUDA, a network port down; or `--undo` them. Then watch `gpuwarden health --demo`, the status page and `gpuwarden events --demo` (docs/fault-end-to-end.md walks through one)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand demo; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand help; and not __fish_seen_subcommand_from run check probe rules events report health copy-binary journal-worker xid config man completions demo help" -f -a "run" -d 'Run the daemon: poll every GPU and serve Prometheus metrics'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand help; and not __fish_seen_subcommand_from run check probe rules events report health copy-binary journal-worker xid config man completions demo help" -f -a "check" -d 'Poll every GPU once and print what needs attention. Exit 0: healthy; 1: findings; 2: no GPU read'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand help; and not __fish_seen_subcommand_from run check probe rules events report health copy-binary journal-worker xid config man completions demo help" -f -a "probe" -d 'Run the CUDA probe on one GPU now: bf16 GEMM, FP32 FMA, HBM copy and pinned PCIe bandwidth, compared with what the model should reach. Exit 0: passed (or no expected values for this model); 1: a test failed; 2: could not run; 3: the GPU is busy'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand help; and not __fish_seen_subcommand_from run check probe rules events report health copy-binary journal-worker xid config man completions demo help" -f -a "rules" -d 'The operator\'s own health rules (health.custom_rules)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand help; and not __fish_seen_subcommand_from run check probe rules events report health copy-binary journal-worker xid config man completions demo help" -f -a "events" -d 'Print the health journal\'s events (read-only; also while the daemon runs). Exit 2 when the journal cannot be read'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand help; and not __fish_seen_subcommand_from run check probe rules events report health copy-binary journal-worker xid config man completions demo help" -f -a "report" -d 'Print one GPU\'s evidence packet for a vendor case (RMA) from the journal: identity, XID timeline, ECC and row remapping, probes, slowdowns, NVLink, and what NVIDIA\'s documents say to do. Exit 1: no such GPU in the journal; 2: the journal cannot be read'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand help; and not __fish_seen_subcommand_from run check probe rules events report health copy-binary journal-worker xid config man completions demo help" -f -a "health" -d 'Print the running daemon\'s health verdict (asked over its local socket, never by polling the GPUs again). Exit 0: no GPU unhealthy; 1: a GPU or the node is unhealthy; 2: unknown (the daemon does not answer); 3: the idle node\'s scheduled validation runs (keep new work off it; nothing is wrong). The first line is short, for node-problem-detector and Slurm\'s HealthCheckProgram'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand help; and not __fish_seen_subcommand_from run check probe rules events report health copy-binary journal-worker xid config man completions demo help" -f -a "copy-binary" -d 'Copy this binary to DIR/gpuwarden (mode 0755): how a Kubernetes init container hands gpuwarden to node-problem-detector\'s container, as gpuwarden\'s image has no shell or cp'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand help; and not __fish_seen_subcommand_from run check probe rules events report health copy-binary journal-worker xid config man completions demo help" -f -a "journal-worker" -d 'The daemon\'s journal worker: one request on stdin, one answer on stdout (internal; the daemon runs it, see src/journal/store/worker.rs)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand help; and not __fish_seen_subcommand_from run check probe rules events report health copy-binary journal-worker xid config man completions demo help" -f -a "xid" -d 'XID errors: look up a code, or find XIDs in kernel-log text'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand help; and not __fish_seen_subcommand_from run check probe rules events report health copy-binary journal-worker xid config man completions demo help" -f -a "config" -d 'Work with config files'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand help; and not __fish_seen_subcommand_from run check probe rules events report health copy-binary journal-worker xid config man completions demo help" -f -a "man" -d 'Write gpuwarden\'s man pages (roff), gpuwarden(1) and one per command (gpuwarden-run(1), ...), made from these same definitions, into DIR (the Debian package installs them: `man gpuwarden`)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand help; and not __fish_seen_subcommand_from run check probe rules events report health copy-binary journal-worker xid config man completions demo help" -f -a "completions" -d 'Print the shell completion script for bash, zsh or fish (the Debian package installs each where its shell looks: /usr/share/bash-completion/completions/gpuwarden, /usr/share/zsh/vendor-completions/_gpuwarden, /usr/share/fish/vendor_completions.d/)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand help; and not __fish_seen_subcommand_from run check probe rules events report health copy-binary journal-worker xid config man completions demo help" -f -a "demo" -d 'Put a fault into the running demo (an XID, a hot, lost or slow GPU, a port down) to follow its story through health, the page, events and the report'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand help; and not __fish_seen_subcommand_from run check probe rules events report health copy-binary journal-worker xid config man completions demo help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand help; and __fish_seen_subcommand_from rules" -f -a "test" -d 'Test rules: a rule file is run once over this node\'s snapshot (or the demo\'s) and every rule\'s outcome printed; a test file (rule_files, tests) runs them over its scenarios and checks what fires. Exit 1 when a rule fails or an expectation does not hold, 78 when a rule does not compile'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand help; and __fish_seen_subcommand_from health" -f -a "clear" -d 'After a repair: count the GPU healthy again from now on (its fatal XIDs, failed probe and held findings from before no longer count) and record who and why in the journal. A finding whose condition still holds (a lost GPU, a pending row remap) comes back at the next poll, and this says so. Root (or gpuwarden\'s user), over the local socket only. Exit 0: the clear was taken (nothing left, or only the validation it started, which keeps the GPU out until its probe passes); 1: a finding whose condition still holds is present (it cannot be cleared until it is mended); 2: not cleared (the daemon did not answer, or refused: no such GPU); 64: no usable reason'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand help; and __fish_seen_subcommand_from health" -f -a "scheduler-report" -d 'What the Slurm health check saw, told to the daemon (deploy/slurm/healthcheck.sh runs it; alias `report`): its drain guard\'s decision, who drained the node. Served as gpuwarden_drain_guard_* (alert GpuwardenDrainGuardActive). Exit 0: kept; 2: not taken'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand help; and __fish_seen_subcommand_from xid" -f -a "explain" -d 'Print what an XID code means, its severity and what to do. Exit 1 for a code not in the catalog'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand help; and __fish_seen_subcommand_from xid" -f -a "scan" -d 'Print one JSON object per XID found in kernel-log text (raw /dev/kmsg records, dmesg, dmesg -T, journalctl -k, syslog); reads stdin when no FILE is given'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand help; and __fish_seen_subcommand_from config" -f -a "check" -d 'Validate a config file; errors name file, line and column. Exit 78 (EX_CONFIG) when invalid'
complete -c gpuwarden -n "__fish_gpuwarden_using_subcommand help; and __fish_seen_subcommand_from demo" -f -a "inject" -d 'Put a fault into the running demo as the real thing would show it: an XID in its kernel log, a hot, lost or slow GPU in its simulated NVML and CUDA, a network port down; or `--undo` them. Then watch `gpuwarden health --demo`, the status page and `gpuwarden events --demo` (docs/fault-end-to-end.md walks through one)'
