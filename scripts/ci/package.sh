#!/usr/bin/env bash
# Builds the Debian package and the tarball as the README's first install command does
# (scripts/package.sh) and checks what the package holds.
#   scripts/ci/package.sh
# Prints the package path last.
set -euo pipefail
cd "$(dirname "$0")/../.."
# The README's first install command: the package and the tarball for this machine.
bash scripts/package.sh target/debian >/dev/null
deb=$(ls -t target/debian/gpuwarden_*_"$(dpkg --print-architecture)".deb | head -1)
tarball=$(ls -t target/debian/gpuwarden-*-linux-"$(dpkg --print-architecture)".tar.gz | head -1)
# The whole listing first: `grep -q` would stop reading and pipefail would blame tar's SIGPIPE.
tar_listing=$(tar -tzf "$tarball")
grep -q '/install.sh$' <<<"$tar_listing" || { echo "package check FAILED: $tarball has no install.sh"; exit 1; }
listing=$(dpkg-deb -c "$deb" | awk '{print $6}')
fail() { echo "package check FAILED: $*"; echo "$listing"; exit 1; }
for path in ./usr/bin/gpuwarden ./etc/gpuwarden/config.yaml ./usr/share/doc/gpuwarden/README.md \
            ./usr/share/doc/gpuwarden/docs/metrics.md; do
  grep -qx "$path" <<<"$listing" || fail "missing $path"
done
# No library that invents GPUs on a GPU node: the demo's are in gpuwarden-demo and the
# tarball's demo/, which nothing installs unless asked (apt install gpuwarden-demo, --demo).
! grep -q 'libgpuwarden_sim' <<<"$listing" || fail "the gpuwarden package carries a simulated library: $(grep sim <<<"$listing")"
demo_deb=$(ls -t target/debian/gpuwarden-demo_*_"$(dpkg --print-architecture)".deb | head -1)
demo_listing=$(dpkg-deb -c "$demo_deb" | awk '{print $6}')
for path in ./usr/lib/gpuwarden/libgpuwarden_sim_nvml.so ./usr/lib/gpuwarden/libgpuwarden_sim_cuda.so; do
  grep -qx "$path" <<<"$demo_listing" || fail "gpuwarden-demo lacks $path"
  grep -q "/demo${path#.}\$" <<<"$tar_listing" || fail "the tarball's demo/ lacks ${path#./}"
done
[ "$(dpkg-deb -f "$demo_deb" Depends)" = gpuwarden ] || fail "gpuwarden-demo does not depend on gpuwarden"
! grep -q 'systemd' <<<"$demo_listing" || fail "gpuwarden-demo carries a unit"
! grep -q 'libgpuwarden_sim' < <(tar -xzOf "$tarball" --wildcards '*/MANIFEST' --exclude='*/demo/MANIFEST') ||
  fail "the tarball's MANIFEST (what install.sh installs without --demo) lists a simulated library"
grep -q '^Maintainer: .*<.*@.*>$' < <(dpkg-deb -f "$deb" Maintainer | sed 's/^/Maintainer: /') ||
  fail "the Maintainer field has no address: $(dpkg-deb -f "$deb" Maintainer)"
grep -qE '^\./(usr/)?lib/systemd/system/gpuwarden\.service$' <<<"$listing" || fail "missing the systemd unit"
# What the README promises or an operator needs on the node: a man page per command, the shell
# completions where each shell looks, the rules, dashboards and Slurm scripts.
for page in debian/man/*.1; do
  grep -qx "./usr/share/man/man1/$(basename "$page").gz" <<<"$listing" || fail "missing the man page $(basename "$page")"
done
for path in ./usr/share/bash-completion/completions/gpuwarden ./usr/share/zsh/vendor-completions/_gpuwarden \
            ./usr/share/fish/vendor_completions.d/gpuwarden.fish \
            ./usr/share/gpuwarden/prometheus/gpuwarden.rules.yml ./usr/share/gpuwarden/alertmanager/alertmanager.yml \
            ./usr/share/gpuwarden/dashboards/gpuwarden-gpu.json ./usr/share/gpuwarden/dashboards/gpuwarden-fleet.json \
            ./usr/share/gpuwarden/slurm/prolog.sh ./usr/share/gpuwarden/slurm/epilog.sh \
            ./usr/share/gpuwarden/slurm/healthcheck.sh; do
  grep -qx "$path" <<<"$listing" || fail "missing $path"
done
control=$(mktemp -d)
root=$(mktemp -d)
trap 'rm -rf "$control" "$root"' EXIT
dpkg-deb -e "$deb" "$control"
# `man gpuwarden` as the installed package answers it (man reads the package's tree), and
# the bash completion the package installs completes a command.
dpkg-deb -x "$deb" "$root"
if command -v man >/dev/null; then
  MANPATH="$root/usr/share/man" man -P cat gpuwarden 2>/dev/null | grep -q 'gpuwarden-health(1)' || fail "man gpuwarden does not show the page"
  MANPATH="$root/usr/share/man" man -P cat gpuwarden 2>/dev/null | grep -q '^EXIT STATUS' || fail "man gpuwarden has no EXIT STATUS"
  MANPATH="$root/usr/share/man" man -P cat gpuwarden-health 2>/dev/null | grep -q 'local_api.socket' || fail "man gpuwarden-health does not show the page"
fi
completed=$(bash -c "source '$root/usr/share/bash-completion/completions/gpuwarden'; COMP_WORDS=(gpuwarden he); COMP_CWORD=1; _gpuwarden gpuwarden he gpuwarden; echo \"\${COMPREPLY[*]}\"")
grep -qw health <<<"$completed" || fail "the bash completion does not complete 'gpuwarden he': '$completed'"
# The Slurm scripts are where deploy/slurm/README.md tells slurm.conf to find them.
for script in prolog epilog healthcheck; do
  grep -q "/usr/share/gpuwarden/slurm/$script.sh" deploy/slurm/README.md || fail "deploy/slurm/README.md does not point Slurm at /usr/share/gpuwarden/slurm/$script.sh"
done
grep -qx /etc/gpuwarden/config.yaml "$control/conffiles" || fail "config.yaml is not a conffile"
grep -q 'deb-systemd-helper enable gpuwarden.service' "$control/postinst" || fail "postinst does not enable the unit"
grep -q 'deb-systemd-invoke .*gpuwarden.service' "$control/postinst" || fail "postinst does not start the unit"
grep -q '^Depends:.*libc6' "$control/control" || fail "no libc6 dependency"
grep -q 'install -d -m 0750 -o root -g root /var/lib/gpuwarden' "$control/postinst" || fail "postinst does not make the journal's directory"
grep -q 'rm -rf /var/lib/gpuwarden' "$control/postrm" || fail "postrm does not remove the journal on purge"
echo "package check passed: $(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" Version) $(dpkg-deb -f "$deb" Architecture)"
echo "$deb"
