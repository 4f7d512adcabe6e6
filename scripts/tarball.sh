#!/usr/bin/env bash
# The tarball for hosts without dpkg, from the two Debian packages: exactly the gpuwarden
# package's files (MANIFEST lists them; install.sh installs them where the package would), and
# under demo/ the gpuwarden-demo package's (the simulated NVML and CUDA of `run --demo`, which
# only `install.sh --demo` installs: a GPU node gets no library that invents GPUs).
#   scripts/tarball.sh GPUWARDEN.deb GPUWARDEN-DEMO.deb OUT_DIR NAME
# Writes OUT_DIR/NAME.tar.gz, reproducible from SOURCE_DATE_EPOCH (default: the commit's date).
set -euo pipefail
cd "$(dirname "$0")/.."
deb=${1:?the gpuwarden .deb}
demo_deb=${2:?the gpuwarden-demo .deb}
out=${3:?the output directory}
name=${4:?the tarball name, without .tar.gz}
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dpkg-deb -x "$deb" "$work/$name"
install -m 0755 deploy/tarball/install.sh "$work/$name/install.sh"
(cd "$work/$name" && find . -type f ! -name install.sh ! -name MANIFEST | sed 's|^\./||' | LC_ALL=C sort > MANIFEST)
dpkg-deb -x "$demo_deb" "$work/$name/demo"
(cd "$work/$name/demo" && find . -type f ! -name MANIFEST | sed 's|^\./||' | LC_ALL=C sort > MANIFEST)
tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner \
  -C "$work" -czf "$out/$name.tar.gz" "$name"
