#!/usr/bin/env bash
# Builds the Debian package with cargo-deb and checks what it holds.
#   scripts/ci/package.sh          (needs: cargo install cargo-deb)
# Prints the package path last.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --workspace
cargo deb --no-build --output target/debian/ >/dev/null
deb=$(ls -t target/debian/gpuwarden_*.deb | head -1)
listing=$(dpkg-deb -c "$deb" | awk '{print $6}')
fail() { echo "package check FAILED: $*"; echo "$listing"; exit 1; }
for path in ./usr/bin/gpuwarden ./etc/gpuwarden/config.yaml ./usr/share/doc/gpuwarden/README.md \
            ./usr/share/doc/gpuwarden/docs/metrics.md ./usr/lib/gpuwarden/libgpuwarden_sim_nvml.so; do
  grep -qx "$path" <<<"$listing" || fail "missing $path"
done
grep -qE '^\./(usr/)?lib/systemd/system/gpuwarden\.service$' <<<"$listing" || fail "missing the systemd unit"
control=$(mktemp -d)
trap 'rm -rf "$control"' EXIT
dpkg-deb -e "$deb" "$control"
grep -qx /etc/gpuwarden/config.yaml "$control/conffiles" || fail "config.yaml is not a conffile"
grep -q 'deb-systemd-helper enable gpuwarden.service' "$control/postinst" || fail "postinst does not enable the unit"
grep -q 'deb-systemd-invoke .*gpuwarden.service' "$control/postinst" || fail "postinst does not start the unit"
grep -q '^Depends:.*libc6' "$control/control" || fail "no libc6 dependency"
grep -q 'install -d -m 0750 -o root -g root /var/lib/gpuwarden' "$control/postinst" || fail "postinst does not make the journal's directory"
grep -q 'rm -rf /var/lib/gpuwarden' "$control/postrm" || fail "postrm does not remove the journal on purge"
echo "package check passed: $(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" Version) $(dpkg-deb -f "$deb" Architecture)"
echo "$deb"
