#!/usr/bin/env bash
# From a clone to an installable artifact for this machine, in one command:
#   scripts/package.sh [OUT_DIR]          (default target/package)
# Writes the Debian package (gpuwarden_VERSION-1_ARCH.deb) and the tarball for hosts without
# dpkg (gpuwarden-VERSION-linux-ARCH.tar.gz: the package's files and install.sh) for this
# machine's architecture, and prints their paths last. Installs cargo-deb with cargo when it is
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
# The workspace: the daemon and the simulated libraries the package carries for the demo.
cargo build --release --workspace
SOURCE_DATE_EPOCH=$source_date_epoch cargo deb --no-build --output "$out/" >/dev/null
deb=$out/gpuwarden_${version}-1_$arch.deb
[ -f "$deb" ] || { echo "cargo deb wrote no $deb"; exit 1; }

# The tarball: exactly the package's files (unpacked from it), and the script that installs them
# where the package would.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
name=gpuwarden-$version-linux-$arch
dpkg-deb -x "$deb" "$work/$name"
install -m 0755 deploy/tarball/install.sh "$work/$name/install.sh"
(cd "$work/$name" && find . -type f ! -name install.sh ! -name MANIFEST | sed 's|^\./||' | LC_ALL=C sort > MANIFEST)
tar --sort=name --mtime="@$source_date_epoch" --owner=0 --group=0 --numeric-owner \
  -C "$work" -czf "$out/$name.tar.gz" "$name"
echo "$deb"
echo "$out/$name.tar.gz"
