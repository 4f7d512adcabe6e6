#!/usr/bin/env python3
"""Writes gpuwarden's Grafana dashboards with grafana-foundation-sdk's typed builders.

    python3 dashboards/generate.py          # (re)write dashboards/*.json
    python3 dashboards/generate.py --check  # exit 1 if the committed JSON differs

The builders carry Grafana's dashboard schema, so a panel, query or variable that does not
fit it does not build; CI runs --check, so the committed JSON is always what they produce.
Every query runs against a live Prometheus in tests/all/dashboards.rs.
Needs: pip install 'grafana-foundation-sdk==1769699998!10.1.0'
"""
import json
import pathlib
import sys

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as model

HERE = pathlib.Path(__file__).resolve().parent
# Every panel and variable reads from the data source the user picks: no hard-coded uid.
DS = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
SEL = 'instance=~"$instance"'


def q(expr, legend="", instant=False):
    query = prometheus.Dataquery().expr(expr).legend_format(legend).datasource(DS)
    return query.instant() if instant else query


def ts(title, unit, *queries, description="", w=12, h=8):
    panel = timeseries.Panel().title(title).description(description).unit(unit).datasource(DS).span(w).height(h)
    for query in queries:
        panel = panel.with_target(query)
    return panel


def new_dashboard(title, uid, since):
    return (
        db.Dashboard(title).uid(uid).tags(["gpuwarden", "gpu"]).refresh("30s").time(since, "now").timezone("browser")
    )


def variables(dash, gpu=False):
    dash = dash.with_variable(db.DatasourceVariable("datasource").label("Data source").type("prometheus"))
    dash = dash.with_variable(
        db.QueryVariable("instance")
        .label("Node")
        .datasource(DS)
        .query("label_values(gpu_info, instance)")
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .multi(not gpu)
        .include_all(not gpu)
        .all_value(".*")
        .sort(model.VariableSort.ALPHABETICAL_ASC)
    )
    if not gpu:
        # Who uses the GPUs: a batch job (the job mapping directory) or a Kubernetes pod.
        for name, label, series, what in [
            ("job", "Batch job", "gpu_job_info", "hpc_job"),
            ("namespace", "Namespace", "gpu_pod_info", "namespace"),
            ("pod", "Pod", 'gpu_pod_info{namespace=~"$namespace"}', "pod"),
        ]:
            inner = series[:-1] + ',instance=~"$instance"}' if series.endswith("}") else series + '{instance=~"$instance"}'
            dash = dash.with_variable(
                db.QueryVariable(name)
                .label(label)
                .datasource(DS)
                .query(f"label_values({inner}, {what})")
                .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
                .multi(True)
                .include_all(True)
                .all_value(".*")
                .sort(model.VariableSort.ALPHABETICAL_ASC)
            )
    if gpu:
        dash = dash.with_variable(
            db.QueryVariable("gpu")
            .label("GPU")
            .datasource(DS)
            .query('label_values(gpu_info{instance=~"$instance"}, gpu)')
            .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(model.VariableSort.NUMERICAL_ASC)
        )
    return dash


def fleet():
    dash = variables(new_dashboard("gpuwarden: fleet", "gpuwarden-fleet", "now-6h"))
    # The overview dcgm-exporter's dashboard opens with: how busy, how full, how much power.
    dash = dash.with_row(db.Row("Overview"))
    for title, unit, expr in [
        ("GPU utilisation (average)", "percentunit", f'avg(gpu_utilization_ratio{{{SEL}}})'),
        ("Framebuffer memory used", "percentunit",
         f'sum(gpu_memory_used_bytes{{{SEL}}}) / sum(gpu_memory_total_bytes{{{SEL}}})'),
        ("Power drawn", "watt", f'sum(gpu_power_watts{{{SEL}}})'),
    ]:
        dash = dash.with_panel(
            stat.Panel().title(title).datasource(DS).unit(unit).span(4).height(5).with_target(q(expr, "", instant=True))
        )
    dash = dash.with_panel(
        ts("GPU utilisation by node", "percentunit", q(f'avg by (instance) (gpu_utilization_ratio{{{SEL}}})', "{{instance}}"),
           w=6, h=5)
    )
    dash = dash.with_panel(
        ts("Framebuffer memory used by node", "percentunit",
           q(f'sum by (instance) (gpu_memory_used_bytes{{{SEL}}}) / sum by (instance) (gpu_memory_total_bytes{{{SEL}}})',
             "{{instance}}"), w=6, h=5)
    )
    dash = dash.with_row(db.Row("Health"))
    dash = dash.with_panel(
        stat.Panel().title("GPUs by health").datasource(DS).span(6).height(5)
        .with_target(q(f"sum by (state) (instance_state:gpu_health:count{{{SEL}}})", "{{state}}", instant=True))
    )
    dash = dash.with_panel(
        table.Panel().title("Unhealthy or degraded GPUs, and why").datasource(DS).span(18).height(5)
        .with_target(q(f'gpu_health_reason{{{SEL}}} == 1', "", instant=True))
    )
    dash = dash.with_panel(
        ts("GPUs per health state, by node", "none",
           q(f'instance_state:gpu_health:count{{{SEL}}}', "{{instance}} {{state}}"), w=24, h=6)
    )
    dash = dash.with_row(db.Row("Thermals and clocks"))
    dash = dash.with_panel(
        ts("Temperature against slowdown threshold", "celsius",
           q(f'gpu_temperature_celsius{{sensor=~"gpu|junction",{SEL}}}', "{{instance}} GPU {{gpu}}"),
           q(f'max by (instance) (gpu_temperature_threshold_celsius{{threshold="slowdown",{SEL}}})', "{{instance}} slowdown"))
    )
    dash = dash.with_panel(
        ts("Headroom to slowdown (coolest margin per node)", "celsius",
           q(f'instance:gpu_slowdown_headroom_celsius:min{{{SEL}}}', "{{instance}}"))
    )
    dash = dash.with_panel(
        ts("GPUs with a clock-event reason active", "none",
           q(f'sum by (reason) (gpu_clock_event_active{{{SEL}}} == 1)', "{{reason}}"),
           description="Power capping under load is normal; thermal reasons are not.")
    )
    dash = dash.with_panel(
        ts("Time in each clock-event reason (driver counters)", "percentunit",
           q(f'sum by (reason) (rate(gpu_clock_event_seconds_total{{{SEL}}}[$__rate_interval]))', "{{reason}}"),
           description="Seconds per second summed over GPUs: catches violations between scrapes.")
    )
    dash = dash.with_row(db.Row("Errors"))
    dash = dash.with_panel(
        table.Panel().title("XIDs by code and GPU").datasource(DS).span(12).height(8)
        .with_target(q(f'sum by (instance, gpu, xid, severity) (gpu_xid_errors_total{{{SEL}}})', "", instant=True))
    )
    dash = dash.with_panel(
        table.Panel().title("What the driver asks for (recovery action)").datasource(DS).span(12).height(8)
        .description("GPUs whose driver asks for a GPU reset, a drain or a node reboot (alert GpuRecoveryActionRequired).")
        .with_target(q(f'gpu_recovery_action{{action!="none",{SEL}}} == 1', "", instant=True))
    )
    dash = dash.with_panel(
        ts("PCIe link width against max", "none",
           q(f'gpu_pcie_link_width_lanes{{{SEL}}}', "{{instance}} GPU {{gpu}}"),
           q(f'max by (instance) (gpu_pcie_link_width_max_lanes{{{SEL}}})', "{{instance}} max"))
    )
    dash = dash.with_row(db.Row("Workloads: pods and batch jobs"))
    # From the GPUs' own series, so the node, job and pod variables apply (the recording rules
    # the alerts use are per pod and job across the fleet).
    pods = 'gpu_pod_info{namespace=~"$namespace",pod=~"$pod"}'
    jobs = 'gpu_job_info{hpc_job=~"$job"}'
    energy = f'clamp_min(gpu_energy_joules_total{{{SEL}}} - gpu_energy_joules_total{{{SEL}}} offset 5m, 0) / 300'
    for title, unit, how, value in [
        ("GPU utilisation by pod and job", "percentunit", "avg", f'gpu_utilization_ratio{{{SEL}}}'),
        ("GPU power by pod and job", "watt", "sum", f'gpu_power_watts{{{SEL}}}'),
        ("GPU memory by pod and job", "bytes", "sum", f'gpu_memory_used_bytes{{{SEL}}}'),
        ("GPU energy rate by pod and job", "watt", "sum", f'({energy})'),
    ]:
        dash = dash.with_panel(
            ts(title, unit,
               q(f'{how} by (namespace, pod) ({value} * on(instance, uuid) group_right {pods})', "{{namespace}}/{{pod}}"),
               q(f'{how} by (hpc_job) ({value} * on(instance, uuid) group_right {jobs})', "job {{hpc_job}}"),
               description="From gpu_pod_info (kubelet) and gpu_job_info (job mapping directory) "
                           "joined on uuid; a shared GPU counts for each holder.",
               w=6)
        )
    for by, record, chosen in [("job", "hpc_job", 'hpc_job=~"$job"'), ("namespace", "namespace", 'namespace=~"$namespace"')]:
        dash = dash.with_panel(
            table.Panel().title(f"Energy (kWh) and GPU-hours by {by}, over the time range").datasource(DS).span(12).height(8)
            .description("From the gpuwarden.energy recording rules (one-minute samples, a shared GPU split evenly "
                         "among its holders); docs/energy.md bills a finished job the same way. Across the fleet: "
                         "a job's bill spans its nodes, so the node variable does not narrow it.")
            .with_target(q(f'sum by ({record}) (sum_over_time({record}:gpu_energy_joules:increase1m{{{chosen}}}[$__range])) / 3.6e6',
                           "kWh", instant=True))
            .with_target(q(f'sum by ({record}) (sum_over_time({record}:gpus:share{{{chosen}}}[$__range])) / 60',
                           "GPU-hours", instant=True))
        )
    dash = dash.with_panel(
        ts("SM and tensor activity by pod (GPM)", "percentunit",
           q(f'avg by (namespace, pod) (gpu_sm_active_ratio{{{SEL}}} * on(instance, uuid) group_right {pods})',
             "{{namespace}}/{{pod}} SM"),
           q(f'avg by (namespace, pod) (gpu_tensor_active_ratio{{{SEL}}} * on(instance, uuid) group_right {pods})',
             "{{namespace}}/{{pod}} tensor"),
           description="Whether a pod's GPUs do real work: busy kernels (utilisation) can still leave SMs and tensor cores idle.",
           w=24)
    )
    dash = dash.with_row(db.Row("Inside the GPUs (GPM, Hopper and newer)"))
    for title, family in [("SM active", "gpu_sm_active_ratio"), ("Tensor pipes active", "gpu_tensor_active_ratio"),
                          ("DRAM bandwidth used", "gpu_dram_active_ratio")]:
        dash = dash.with_panel(
            ts(title, "percentunit", q(f'{family}{{{SEL}}}', "{{instance}} GPU {{gpu}}"),
               description="Averages over poll.gpm_interval (30 s).", w=8)
        )
    dash = dash.with_row(db.Row("NVLink, fabric and MIG"))
    dash = dash.with_panel(
        ts("NVLinks down", "none",
           q(f'gpu_nvlink_links{{{SEL}}} - gpu_nvlink_links_up{{{SEL}}}', "{{instance}} GPU {{gpu}}"),
           description="Links the board has minus links up (alert GpuNvlinkDown).", w=8)
    )
    dash = dash.with_panel(
        ts("NVLink errors per minute", "none",
           q(f'sum by (instance, gpu, type) (rate(gpu_nvlink_errors_total{{{SEL}}}[$__rate_interval])) * 60',
             "{{instance}} GPU {{gpu}} {{type}}"),
           description="CRC, replay and recovery counters, read every 2 minutes (alert GpuNvlinkErrors).", w=8)
    )
    dash = dash.with_panel(
        ts("NVLink throughput", "Bps",
           q(f'sum by (instance, gpu, direction) (gpu_nvlink_bytes_per_second{{{SEL}}})', "{{instance}} GPU {{gpu}} {{direction}}"),
           description="GPM rate over all links of each GPU.", w=8)
    )
    dash = dash.with_panel(
        table.Panel().title("NVLink fabric (NVSwitch systems)").datasource(DS).span(12).height(6)
        .description("Registration with the fabric manager; anything but completed for long fires GpuFabricDegraded.")
        .with_target(q(f'gpu_fabric_state{{{SEL}}} == 1', "", instant=True))
    )
    dash = dash.with_panel(
        table.Panel().title("NVSwitch errors (SXIDs)").datasource(DS).span(12).height(6)
        .description("NVSwitch errors from the kernel log by switch, code and the driver's severity; a fatal one "
                     "makes the node unhealthy (NvswitchSxidFatal). `gpuwarden xid explain CODE` names the unit.")
        .with_target(q(f'gpu_nvswitch_sxid_errors_total{{{SEL}}}', "", instant=True))
    )
    dash = dash.with_panel(
        ts("Fabric manager up, by node", "none",
           q(f'gpu_fabric_manager_up{{{SEL}}}', "{{instance}}"),
           description="1 when nvidia-fabricmanager runs, on an HGX board's host (GpuFabricManagerDown).", w=12, h=6)
    )
    dash = dash.with_panel(
        table.Panel().title("MIG devices").datasource(DS).span(12).height(6)
        .description("GPU instance, compute instance, profile and MIG UUID of every MIG device.")
        .with_target(q(f'gpu_mig_instance_info{{{SEL}}}', "", instant=True))
    )
    dash = dash.with_row(db.Row("Network ports (InfiniBand and RoCE)"))
    dash = dash.with_panel(
        table.Panel().title("Network port findings").datasource(DS).span(12).height(8)
        .description("The node's findings about its ports: down, slow, flapping, erring, a narrowed adapter link "
                     "(alerts NicPortDown and NicPortDegraded; docs/health.md, Network ports).")
        .with_target(q(f'gpu_node_health_reason{{reason=~"nic_.*",{SEL}}} == 1', "", instant=True))
    )
    dash = dash.with_panel(
        ts("Ports not up, by node", "none",
           q(f'sum by (instance) (1 - nic_port_up{{{SEL}}})', "{{instance}}"),
           description="Ports not ACTIVE/LinkUp (nic_port_up 0).", w=12)
    )
    dash = dash.with_panel(
        ts("Port rate", "Bps",
           q(f'nic_port_speed_bytes{{{SEL}}}', "{{instance}} {{device}}/{{port}}"),
           description="Negotiated rate; a port below its siblings lost lanes (nic_rate_low).", w=8)
    )
    dash = dash.with_panel(
        ts("Port errors per minute", "none",
           q(f'sum by (instance, device, counter) (rate(nic_port_errors_total{{{SEL}}}[$__rate_interval])) * 60',
             "{{instance}} {{device}} {{counter}}"),
           description="The adapters' error counters (symbol errors, link downs, retries...).", w=8)
    )
    dash = dash.with_panel(
        ts("Flaps within the window", "none",
           q(f'nic_port_flaps{{{SEL}}}', "{{instance}} {{device}}/{{port}}"),
           description="Downs within network.flap_window; network.flaps of them is flapping.", w=8)
    )
    dash = dash.with_row(db.Row("Power and probes"))
    dash = dash.with_panel(
        ts("Power per node", "watt", q(f'instance:gpu_power_watts:sum{{{SEL}}}', "{{instance}}"))
    )
    dash = dash.with_panel(
        table.Panel().title("Probe results").datasource(DS).span(12).height(8)
        .description("Last scheduled CUDA probe per test: 1 pass, 0 fail (probe.schedule in the config; docs/probe.md).")
        .with_target(q(f'gpu_probe_pass{{{SEL}}}', "", instant=True))
    )
    dash = dash.with_row(db.Row("Stragglers and stalled jobs"))
    dash = dash.with_panel(
        table.Panel().title("Probe figures against the fleet's median for the model").datasource(DS).span(8).height(8)
        .description("Each GPU's last sustained probe figure divided by the median of its model's GPUs across the "
                     "fleet, per test; below 0.9 with at least 3 GPUs of the model is GpuProbeStraggler.")
        .with_target(q(f'gpu:gpu_probe_sustained:by_model{{{SEL}}} / on(name, test) group_left() '
                       'name_test:gpu_probe_sustained:median', "", instant=True))
    )
    dash = dash.with_panel(
        table.Panel().title("Jobs' GPUs: SM clock under load against the job's median").datasource(DS).span(8).height(8)
        .description("For each batch job's GPUs under load (utilization at least 50%), the SM clock divided by the "
                     "job's median; below 0.9 for 10 minutes is GpuJobStraggler (the alert names the clock-event reason).")
        .with_target(q(f'hpc_job_gpu:gpu_sm_clock_hertz:loaded{{{SEL}}} / on(hpc_job) group_left() '
                       'hpc_job:gpu_sm_clock_hertz:median', "", instant=True))
    )
    dash = dash.with_panel(
        table.Panel().title("GPUs spinning, not computing").datasource(DS).span(8).height(8)
        .description("Busy at least 95%, under 30% of the power limit, tensor pipes and DRAM under 5% active, with "
                     "the job or pod that holds them; 10 minutes of it is GpuJobStalled (a collective that never "
                     "completes). Thresholds measured on an H200: docs/validation.md, A stalled job.")
        .with_target(q(f'(gpu:gpu_spinning:bool{{{SEL}}} * on(instance, uuid) group_right() gpu_job_info) or '
                       f'(gpu:gpu_spinning:bool{{{SEL}}} * on(instance, uuid) group_right() gpu_pod_info)', "", instant=True))
    )
    dash = dash.with_row(db.Row("Remediation"))
    dash = dash.with_panel(
        table.Panel().title("Next steps, and what holds an automatic reset back").datasource(DS).span(8).height(8)
        .description("Each GPU's next remediation step (remediation.mode advise or auto), and with auto the guard "
                     "that holds its reset back (scheduler, processes, reset_budget, fleet_guard, paused); "
                     "docs/health.md, Remediation.")
        .with_target(q(f'gpu_remediation_next_step{{{SEL}}} == 1', "", instant=True))
        .with_target(q(f'gpu_remediation_held_back{{{SEL}}} == 1', "", instant=True))
    )
    dash = dash.with_panel(
        table.Panel().title("Nodes that need a reboot, or whose automatic remediation failed").datasource(DS)
        .span(8).height(8)
        .description("With remediation.mode auto, per node: 1 when it needs a reboot (gpuwarden never reboots: it "
                     "stays drained, reboot_required, until rebooted or the GPU is cleared) and 1 when automatic "
                     "remediation failed in this boot (GpuwardenRemediationFailed).")
        .with_target(q(f'gpuwarden_reboot_required{{{SEL}}}', "", instant=True))
        .with_target(q(f'gpuwarden_remediation_failed{{{SEL}}}', "", instant=True))
    )
    dash = dash.with_panel(ts("Automatic GPU resets within 24 hours", "none",
                              q(f'sum by (outcome) (gpu_remediation_resets{{{SEL}}})', "{{outcome}}"), w=8))
    return dash


def single_gpu():
    dash = variables(new_dashboard("gpuwarden: one GPU", "gpuwarden-gpu", "now-3h"), gpu=True)
    one = 'instance=~"$instance",gpu=~"$gpu"'
    dash = dash.with_panel(
        table.Panel().title("Identity and health").datasource(DS).span(24).height(4)
        .with_target(q(f'gpu_info{{{one}}}', "", instant=True))
        .with_target(q(f'gpu_health{{{one}}} == 1', "", instant=True))
    )
    dash = dash.with_panel(ts("Temperature", "celsius",
                              q(f'gpu_temperature_celsius{{{one}}}', "{{sensor}}"),
                              q(f'gpu_temperature_threshold_celsius{{{one}}}', "{{threshold}}")))
    dash = dash.with_panel(ts("Clocks", "hertz", q(f'gpu_clock_hertz{{{one}}}', "{{clock}}")))
    dash = dash.with_panel(ts("Power", "watt",
                              q(f'gpu_power_watts{{{one}}}', "draw"), q(f'gpu_power_limit_watts{{{one}}}', "limit")))
    dash = dash.with_panel(ts("Utilisation", "percentunit",
                              q(f'gpu_utilization_ratio{{{one}}}', "kernels"),
                              q(f'gpu_memory_copy_utilization_ratio{{{one}}}', "memory copies")))
    dash = dash.with_panel(ts("Memory", "bytes",
                              q(f'gpu_memory_used_bytes{{{one}}}', "used"), q(f'gpu_memory_total_bytes{{{one}}}', "total")))
    dash = dash.with_panel(ts("Clock-event reasons active", "none",
                              q(f'gpu_clock_event_active{{{one}}} == 1', "{{reason}}")))
    dash = dash.with_panel(ts("PCIe", "none",
                              q(f'gpu_pcie_link_generation{{{one}}}', "generation"),
                              q(f'gpu_pcie_link_width_lanes{{{one}}}', "width"),
                              q(f'rate(gpu_pcie_replay_errors_total{{{one}}}[$__rate_interval])', "replays/s")))
    dash = dash.with_panel(ts("Activity (GPM)", "percentunit",
                              q(f'gpu_graphics_active_ratio{{{one}}}', "graphics engine"),
                              q(f'gpu_sm_active_ratio{{{one}}}', "SM active"),
                              q(f'gpu_sm_occupancy_ratio{{{one}}}', "SM occupancy"),
                              q(f'gpu_tensor_active_ratio{{{one}}}', "tensor"),
                              q(f'gpu_dram_active_ratio{{{one}}}', "DRAM bandwidth")))
    dash = dash.with_panel(ts("Pipes (GPM)", "percentunit", q(f'gpu_pipe_active_ratio{{{one}}}', "{{pipe}}")))
    dash = dash.with_panel(ts("PCIe and NVLink bandwidth (GPM)", "Bps",
                              q(f'gpu_pcie_bytes_per_second{{{one}}}', "PCIe {{direction}}"),
                              q(f'gpu_nvlink_bytes_per_second{{{one}}}', "NVLink {{direction}}")))
    dash = dash.with_panel(ts("NVLinks and their errors", "none",
                              q(f'gpu_nvlink_links_up{{{one}}}', "links up"),
                              q(f'gpu_nvlink_errors_total{{{one}}}', "{{type}} errors"),
                              description="Errors summed over the links; per link with nvlink.per_link."))
    dash = dash.with_panel(ts("ECC errors and XIDs", "none",
                              q(f'gpu_ecc_errors_total{{{one}}}', "{{type}} {{scope}}"),
                              q(f'gpu_xid_errors_total{{{one}}}', "Xid {{xid}} ({{severity}})")))
    return dash


def render(builder):
    return json.dumps(builder.build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def main():
    outputs = {"gpuwarden-fleet.json": render(fleet()), "gpuwarden-gpu.json": render(single_gpu())}
    check = "--check" in sys.argv[1:]
    stale = []
    for name, text in outputs.items():
        path = HERE / name
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print("dashboards differ from what generate.py builds: " + ", ".join(stale) + "; run python3 dashboards/generate.py")
        sys.exit(1)


if __name__ == "__main__":
    main()
