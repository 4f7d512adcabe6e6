#!/usr/bin/env bash
# From a clone to an installable artifact for this machine, in one command:
#   scripts/package.sh [OUT_DIR]          (default target/package)
# Writes the Debian package (gpuwarden_VERSION-1_ARCH.deb), the demo's package
# (gpuwarden-demo_VERSION-1_ARCH.deb: the simulated NVML and CUDA of `run --demo`, never needed
# on a GPU node) and the tarball for hosts without dpkg (gpuwarden-VERSION-linux-ARCH.tar.gz:
# the package's files, install.sh, and the demo's under demo/) for this machine's
# architecture, and prints their paths last. Installs cargo-deb with cargo when it is
# missing (into ~/.cargo/bin); needs Rust (rustup.rs), a C compiler and dpkg-deb (Debian,
# Ubuntu). The OCI image, arm64 and the SBOM are scripts/release.sh's.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/package}
version=$(bash scripts/version.sh)
arch=$(dpkg --print-architecture)
source_date_epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
unset SOURCE_DATE_EPOCH
if ! command -v cargo-deb >/dev/null 2>&1; then
  echo "== cargo-deb is missing: cargo install --locked cargo-deb"
  cargo install --locked cargo-deb
fi
mkdir -p "$out"
# The workspace: the daemon and the simulated libraries of the demo's package.
cargo build --release --workspace
SOURCE_DATE_EPOCH=$source_date_epoch cargo deb --no-build --output "$out/" >/dev/null
# The demo's package has no unit and no maintainer scripts: cargo-deb's notes saying so go.
SOURCE_DATE_EPOCH=$source_date_epoch cargo deb --no-build --variant demo --output "$out/" 2>&1 >/dev/null |
  { grep -v -e 'No usable systemd units found' -e 'no maintainer scripts found' || true; } >&2
deb=$out/gpuwarden_${version}-1_$arch.deb
demo_deb=$out/gpuwarden-demo_${version}-1_$arch.deb
for f in "$deb" "$demo_deb"; do [ -f "$f" ] || { echo "cargo deb wrote no $f"; exit 1; }; done
name=gpuwarden-$version-linux-$arch
SOURCE_DATE_EPOCH=$source_date_epoch bash scripts/tarball.sh "$deb" "$demo_deb" "$out" "$name"
echo "$deb"
echo "$demo_deb"
echo "$out/$name.tar.gz"
