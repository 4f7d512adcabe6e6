#!/usr/bin/env bash
# Sets up what the tests need and runs every check and test: the README's test command, and
# what CI runs (.ci/run calls this script). No GPU needed.
#
# Debian 12 is what CI runs and what this was verified on; Ubuntu 24.04 takes the same apt
# packages except Chromium (there a snap; set CHROMIUM to another build of it). Run it as
# root or as a user who may sudo: the apt packages are installed with sudo when needed.
# Python packages go into a virtual environment under target/, never into the system's
# Python (Debian's refuses `pip install` outside one).
#
#   scripts/ci/test.sh            set up, then fmt, clippy, the MSRV check, the fuzz targets,
#                              every test, and the Debian package
#   SKIP_SETUP=1 scripts/ci/test.sh   the same without installing anything
set -euo pipefail
cd "$(dirname "$0")/../.."

step() { printf '\n== %s\n' "$*"; }

# Debian's prometheus (prometheus, promtool) and prometheus-alertmanager (amtool): the tests
# check our exposition, rules and configs with them and run a real Prometheus; Chromium
# renders the status page; librocm-smi64-1 is the real ROCm SMI library, which a test loads
# to show it fails cleanly on a machine without an AMD GPU; curl and openssl are the TLS
# client and certificate maker of tests/all/web.rs; python3-venv holds the Python packages.
# systemd and util-linux (unshare, nsenter): tests/all/systemd_real.rs boots a real systemd in a
# namespace of its own and runs the shipped unit there. slurmctld, slurmd, slurm-client and
# munge: tests/all/slurm_real.rs runs the shipped prolog and epilog under a real one-node Slurm.
# mmdebstrap, buildah, podman and runc build and run the OCI image (scripts/ci/image-check.sh;
# runc: crun refuses a hybrid cgroup layout); gcc-aarch64-linux-gnu, libc6-dev-arm64-cross and
# qemu-user-static cross-build for arm64 and run it (scripts/ci/arm64.sh); file checks the result.
# man-db renders the man pages as `man gpuwarden` shows them (tests/all/cli.rs, package.sh).
APT_PACKAGES=(prometheus prometheus-alertmanager chromium librocm-smi64-1 curl openssl python3-venv systemd util-linux
  slurmctld slurmd slurm-client munge mmdebstrap buildah podman runc gcc-aarch64-linux-gnu libc6-dev-arm64-cross
  qemu-user-static file man-db)
VENV=target/test-venv

if [ -z "${SKIP_SETUP:-}" ]; then
  step "system packages"
  # Ubuntu's chromium package is a snap: take Chromium from elsewhere there (CHROMIUM=...).
  if grep -qi '^ID=ubuntu' /etc/os-release 2>/dev/null; then
    APT_PACKAGES=("${APT_PACKAGES[@]/chromium/}")
  fi
  missing=()
  for package in "${APT_PACKAGES[@]}"; do
    [ -n "$package" ] || continue
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ]; then sudo=(); else sudo=(sudo); fi
    echo "installing: ${missing[*]}"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi

  step "python packages (in $VENV)"
  if [ ! -x "$VENV/bin/python3" ]; then
    mkdir -p target
    python3 -m venv "$VENV"
  fi
  # The dashboards are built with grafana-foundation-sdk's schema-typed builders.
  "$VENV/bin/python3" -m pip install -q --disable-pip-version-check 'grafana-foundation-sdk==1769699998!10.1.0'
  # grpcio runs the fake kubelet of tests/all/kubelet_pods.rs.
  "$VENV/bin/python3" -m pip install -q --disable-pip-version-check 'grpcio==1.76.0'
  # kubernetes-validate checks the rendered Kubernetes manifests against the API's schemas
  # (scripts/ci/k8s-check.sh; it brings PyYAML, which turns them into JSON there).
  "$VENV/bin/python3" -m pip install -q --disable-pip-version-check 'kubernetes-validate==1.37.0'
  # NVRTC compiles the probe's kernels to check the committed PTX (scripts/gen/gen-probe-ptx.sh).
  "$VENV/bin/python3" -m pip install -q --disable-pip-version-check 'nvidia-cuda-nvrtc==13.0.88'

  # The toolchain Cargo.toml's rust-version names, to prove that the code builds with it.
  msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
  step "Rust $msrv (rust-version)"
  rustup toolchain install "$msrv" --profile minimal --no-self-update
  # arm64 (GH200, GB200 hosts): the standard library for the cross-build.
  rustup target add aarch64-unknown-linux-gnu
  if ! command -v cargo-deb >/dev/null 2>&1; then
    step "cargo-deb"
    cargo install --locked cargo-deb
  fi
  # The release's software bill of materials (scripts/release.sh).
  if ! command -v cargo-cyclonedx >/dev/null 2>&1; then
    step "cargo-cyclonedx"
    cargo install --locked cargo-cyclonedx@0.5.9
  fi
fi
export PATH="$PWD/$VENV/bin:$PATH"
