# Sourced by all-features.sh and cost-vs-loop.sh: what "every
# feature on" means in the measurements (docs/performance.md), in one place.
# every_feature_yaml JOBS_DIR prints the config sections that turn on what the defaults leave
# off: dcgm-exporter's names, per-link NVLink series, per-process series, and a job mapping
# directory (JOBS_DIR). The journal is on at the defaults.
every_feature_yaml() {
  cat <<YAML
compat:
  dcgm_exporter: true
nvlink:
  per_link: true
processes:
  per_process: true
hpc_jobs:
  mapping_dir: $1
YAML
}
