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

step() { printf '\n== [%ss] %s\n' "$SECONDS" "$*"; }

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
  # pyflakes reads the scripts' Python (the step "the scripts' Python" below).
  "$VENV/bin/python3" -m pip install -q --disable-pip-version-check 'pyflakes==3.4.0'
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

# Disk: a full run with cargo's defaults left 8 GiB under target/ and fuzz/target, and a CI
# machine with less free than that ran out of space. A one-shot run gains nothing from
# incremental caches, and line tables keep panics' file:line while dropping the full debug
# info (the largest part of every test binary). A developer's own settings win.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}"

step "dashboards are what their generator builds"
python3 dashboards/generate.py --check

step "the probe's PTX is what its kernels compile to"
bash scripts/gen/gen-probe-ptx.sh --check

step "each src/ folder's file table is what its files' docs make"
python3 scripts/gen/module-files.py --check

step "the scripts' Python: pyflakes, and the unit tests of the fleet simulation's layout"
"$VENV/bin/python3" -m pyflakes scripts/
"$VENV/bin/python3" -m unittest discover -s scripts/load -p 'test_*.py'

step "cargo fmt, cargo clippy"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings

msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
step "check with Rust $msrv, the declared rust-version"
# `check` runs everything a newer language or library feature would trip (parsing, types,
# borrows, lints) without a second set of binaries on disk.
cargo "+$msrv" check --workspace --all-targets --locked --target-dir target/msrv
[ -z "${CI:-}" ] || rm -rf target/msrv

step "the fuzz targets build (cargo fuzz runs them; see docs/testing.md)"
cargo build --manifest-path fuzz/Cargo.toml --bins --locked
[ -z "${CI:-}" ] || rm -rf fuzz/target

step "the Kubernetes control plane the tests run against (scripts/kube/build.sh)"
# kube-apiserver 1.37, etcd 3.6 and node-problem-detector from their Go modules, cached under
# target/kube (tests/all/kube_real.rs; about 7 minutes the first time on 2 cores, docs/testing.md).
bash scripts/kube/build.sh >/dev/null
# Under CI the Go caches (about 5 GB) are not needed once the binaries are built.
[ -z "${CI:-}" ] || { go clean -cache; go clean -modcache; }

step "tests"
# What the tests leave in /tmp: nothing of gpuwarden's (a demo's directory, a socket).
tmp_before=$(ls -A /tmp 2>/dev/null | grep -E '^gpuwarden' | sort || true)
# Four at once on two cores: the integration tests mostly wait on daemons (a poll, a round, a
# journal batch), so twice the cores halves their time (docs/testing.md, "Where the time goes").
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-4}
cargo test --workspace --no-run
# Beside the tests, the release builds the package, image, arm64 and release steps take: in a
# process group of their own (stopped with this script), at a low priority, logged apart.
setsid nice -n 15 bash scripts/ci/release-builds.sh >target/release-builds.log 2>&1 &
builds=$!
trap 'kill -- -"$builds" 2>/dev/null || true' EXIT
cargo test --workspace
tmp_after=$(ls -A /tmp 2>/dev/null | grep -E '^gpuwarden' | sort || true)
left=$(comm -13 <(printf '%s\n' "$tmp_before") <(printf '%s\n' "$tmp_after") | grep . || true)
if [ -n "$left" ]; then
  echo "the tests left these in /tmp:"; echo "$left"; exit 1
fi

step "the release builds begun beside the tests (scripts/ci/release-builds.sh)"
wait "$builds" || { tail -n 60 target/release-builds.log; echo "the release builds failed (target/release-builds.log)"; exit 1; }
trap - EXIT
grep -E '^ *Finished' target/release-builds.log || true

step "the Kubernetes overlays render and pass the API's schemas (1.29, 1.31, the operator's)"
bash scripts/ci/k8s-check.sh

step "the Debian package builds and holds what it should"
bash scripts/ci/package.sh

step "the OCI image builds, runs under podman, serves, answers and stops"
bash scripts/ci/image-check.sh

step "arm64: cross-built, unit tests and a check under qemu, its package and image"
bash scripts/ci/arm64.sh

step "a release: packages, images and tarballs for both, SBOM, sums; the tarball and package under systemd"
bash scripts/release.sh
# From the checkout seen at a path under /tmp, where a new user's clone may live and where the
# systemd the check boots mounts a fresh /tmp (a bind mount in a mount namespace of its own: the
# same files, so cargo finds the release build fresh; docs/testing.md).
view=$(mktemp -d /tmp/gpuwarden-checkout.XXXXXX)
unshare --mount --propagation private sh -c 'mount --bind "$1" "$2" && cd "$2" && exec bash scripts/ci/release-check.sh' \
  sh "$PWD" "$view" || { rmdir "$view"; exit 1; }
rmdir "$view"
[ -z "${CI:-}" ] || rm -rf target/arm64 target/release-artifacts
