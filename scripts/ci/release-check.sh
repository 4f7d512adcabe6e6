#!/usr/bin/env bash
# Checks what scripts/release.sh wrote as a user receiving it would: SHA256SUMS verifies, every
# artifact is there for amd64 and arm64, the SBOM names the crates Cargo.lock pins, and the
# amd64 tarball's install.sh installs, enables and starts gpuwarden under a real systemd (PID 1
# of a namespace of its own, /usr, /etc and /var overlaid so nothing reaches the machine),
# keeps a config already there, and --uninstall removes it again; then the README's
# `apt install ./gpuwarden_*.deb` does the same with the package, and `apt purge` undoes it.
#   scripts/ci/release-check.sh [DIR]    (as root; default target/release-artifacts)
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=$(readlink -f "${1:-target/release-artifacts}")
version=$(bash scripts/version.sh)
fail() { echo "release check FAILED: $*"; exit 1; }

(cd "$dir" && sha256sum --quiet -c SHA256SUMS) || fail "SHA256SUMS does not verify"
for arch in amd64 arm64; do
  for artifact in "gpuwarden_${version}-1_$arch.deb" "gpuwarden-demo_${version}-1_$arch.deb" "gpuwarden-$version-$arch.oci.tar" \
    "gpuwarden-$version-linux-$arch.tar.gz" "gpuwarden-$version-$arch.cdx.json"; do
    [ -s "$dir/$artifact" ] || fail "no $artifact"
    grep -q " $artifact\$" "$dir/SHA256SUMS" || fail "SHA256SUMS does not list $artifact"
  done
done
# Each SBOM: CycloneDX, gpuwarden at this version, and the crates that matter at Cargo.lock's
# versions, with licences; no test-only crate.
for arch in amd64 arm64; do
python3 - "$dir/gpuwarden-$version-$arch.cdx.json" <<'PY' || fail "the $arch SBOM does not match Cargo.lock"
import json, sys, tomllib
bom = json.load(open(sys.argv[1]))
assert bom["bomFormat"] == "CycloneDX", bom.get("bomFormat")
lock = {p["name"]: p["version"] for p in tomllib.load(open("Cargo.lock", "rb"))["package"]}
def walk(components):
    for c in components:
        yield c
        yield from walk(c.get("components", []))
found = {c["name"]: c.get("version") for c in walk(bom.get("components", []) + [bom["metadata"]["component"]])}
for crate in ["gpuwarden", "gpuwarden-sim-nvml", "nvml-wrapper", "tokio", "rusqlite", "rustls", "prometheus-client"]:
    assert found.get(crate) == lock[crate], f"{crate}: SBOM {found.get(crate)}, Cargo.lock {lock[crate]}"
assert "tempfile" not in found, "a test-only crate is in the SBOM"
unlicensed = [c["name"] for c in bom["components"] if not c.get("licenses")]
assert not unlicensed, f"no licence for {unlicensed}"
print(f"{sys.argv[1]}: {len(found)} components, CycloneDX {bom['specVersion']}")
PY
done

# The README's install commands as written (the line that starts so, without sudo and the
# comment): a renamed file or a changed version there fails here.
readme_command() {
  local line
  line=$(grep -m1 -E "^(sudo )?$1" README.md | sed -E 's/^sudo //; s/ +#.*$//') || true
  [ -n "$line" ] || fail "the README has no install command that starts with '$1'"
  echo "$line"
}
repo=$(pwd)
package_command=$(readme_command 'scripts/package\.sh')
apt_command=$(readme_command 'apt install \./target/package/gpuwarden_')
apt_demo_command=$(readme_command 'apt install \./target/package/gpuwarden-demo_')
tar_command=$(readme_command 'tar -xzf target/package/')
install_command=$(readme_command '\./gpuwarden-[^ ]*/install\.sh')
echo "the README's commands: $package_command; $tar_command; $install_command; $apt_command; $apt_demo_command"
bash -c "$package_command" >/dev/null || fail "the README's '$package_command' failed"
# The check's own directory, where the namespace's systemd can see it: that systemd mounts a
# fresh /tmp, /run and /mnt, so a clone under /tmp (a new user's first try) puts it under
# /var/tmp instead; the packages and the scenario it needs are copied in.
case $repo/ in
  /tmp/*|/run/*|/mnt/*) work=$(mktemp -d /var/tmp/gpuwarden-release-check.XXXXXX) ;;
  *) work=$(readlink -f target)/release-check; rm -rf "$work"; mkdir -p "$work" ;;
esac
mkdir -p "$work/package"
cp target/package/*.deb target/package/*.tar.gz config/demo-scenario.yaml "$work/package/"
# The package's paths from the clone's root, where the README runs them: the copies.
from_clone() { sed "s|\./target/package/|$work/package/|g; s| target/package/| $work/package/|g" <<<"$1"; }

# The tarball under a real systemd, unpacked in the check's directory.
(cd "$work" && bash -c "$(from_clone "$tar_command")") || fail "the README's '$tar_command' failed"
unpacked=$work/${install_command%/install.sh}
unpacked=${unpacked/\/.\//\/}
[ -x "$unpacked/install.sh" ] || fail "the README's '$install_command': no $unpacked/install.sh"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$work/boot.sh" <<BOOT
#!/bin/sh
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t proc proc /proc
mount -t tmpfs tmpfs /mnt
for d in usr etc var; do
  up=/mnt/\$(echo \$d | tr / _)
  mkdir -p \$up.up \$up.work
  mount -t overlay overlay -o lowerdir=/\$d,upperdir=\$up.up,workdir=\$up.work /\$d
done
# A node lets packages start their services; this machine's container image forbids it
# (policy-rc.d exits 101): not in the overlay.
rm -f /usr/sbin/policy-rc.d
# A config already there (kept by install.sh): the simulated NVML of the tarball's demo/, a free port.
mkdir -p /etc/gpuwarden
cp "$work/package/demo-scenario.yaml" /etc/gpuwarden/scenario.yaml
printf 'listen: 127.0.0.1:$port\nnvml:\n  library_path: /usr/lib/gpuwarden/libgpuwarden_sim_nvml.so\nxid:\n  read_kernel_log: false\nfabric_manager:\n  check: false\n' >/etc/gpuwarden/config.yaml
mkdir -p /etc/systemd/system/gpuwarden.service.d
printf '[Service]\nEnvironment=GPUWARDEN_SIM_NVML_SCENARIO=/etc/gpuwarden/scenario.yaml\n' >/etc/systemd/system/gpuwarden.service.d/sim.conf
exec /usr/lib/systemd/systemd --system --unit=basic.target
BOOT
unshare --pid --fork --mount --propagation private sh "$work/boot.sh" >/dev/null 2>&1 &
unshare_pid=$!
pid=""
stop() {
  [ -n "$pid" ] && kill -s RTMIN+4 "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$unshare_pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$unshare_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap stop EXIT
for _ in $(seq 300); do
  child=$(cat "/proc/$unshare_pid/task/$unshare_pid/children" 2>/dev/null | awk '{print $1}')
  if [ -n "$child" ] && [ "$(cat "/proc/$child/comm" 2>/dev/null)" = systemd ]; then pid=$child; break; fi
  sleep 0.1
done
[ -n "$pid" ] || fail "systemd did not start in the namespace"
inside() { nsenter -t "$pid" -m -p "$@"; }
for _ in $(seq 150); do
  state=$(inside systemctl is-system-running 2>/dev/null || true)
  case $state in running|degraded) break ;; esac
  sleep 0.2
done

output=$(inside "$unpacked/install.sh" 2>&1) || fail "install.sh exited $?: $output"
grep -q 'kept your /etc/gpuwarden/config.yaml' <<<"$output" || fail "install.sh did not keep the config: $output"
inside test -f /etc/gpuwarden/config.yaml.new || fail "no config.yaml.new beside the kept config"
[ "$(inside systemctl is-enabled gpuwarden.service)" = enabled ] || fail "the unit is not enabled"
! inside test -e /usr/lib/gpuwarden/libgpuwarden_sim_nvml.so || fail "install.sh without --demo installed the simulated NVML"
# The demo's libraries only when asked for: an upgrade in place with them.
output=$(inside "$unpacked/install.sh" --demo 2>&1) || fail "install.sh --demo exited $?: $output"
# Waits (10 s at most) until the unit is active and its /metrics shows all 8 simulated GPUs up,
# as a person would look a moment after it started (dpkg's own steps may still be settling).
wait_until_serving() {
  local what=$1 metrics="" up=0
  for _ in $(seq 100); do
    if [ "$(inside systemctl is-active gpuwarden.service || true)" = active ]; then
      metrics=$(curl -sf "127.0.0.1:$port/metrics" 2>/dev/null || true)
      up=$(grep -cE '^gpu_up\{.*\} 1(\.0)?$' <<<"$metrics" || true)
      [ "$up" = 8 ] && return 0
    fi
    sleep 0.1
  done
  [ "$(inside systemctl is-active gpuwarden.service || true)" = active ] ||
    fail "$what is not active: $(inside journalctl -u gpuwarden --no-pager -n 20)"
  [ -n "$metrics" ] || fail "$what serves nothing on :$port/metrics"
  fail "$what: gpu_up is 1 for $up GPUs, not 8: $(inside journalctl -u gpuwarden --no-pager -n 20)"
}

wait_until_serving "the tarball's unit"
status=$(inside systemctl show -P StatusText gpuwarden.service)
grep -q '8 GPU(s)' <<<"$status" || fail "STATUS is '$status', not 8 GPUs"
health=$(inside /usr/bin/gpuwarden health) || [ $? = 0 ] || fail "gpuwarden health: $health"
inside sh -c 'MANPATH=/usr/share/man man -P cat gpuwarden 2>/dev/null' | grep -q 'gpuwarden-health(1)' ||
  ! inside sh -c 'command -v man' >/dev/null || fail "man gpuwarden does not show the page"
inside test -x /usr/share/gpuwarden/slurm/healthcheck.sh || fail "the Slurm scripts are not installed"
echo "tarball: installed, enabled, active ('$status'), 8 GPUs on /metrics, health '$(head -1 <<<"$health")'"

output=$(inside "$unpacked/install.sh" --uninstall 2>&1) || fail "install.sh --uninstall: $output"
[ "$(inside systemctl is-active gpuwarden.service || true)" != active ] || fail "still active after --uninstall"
! inside test -e /usr/bin/gpuwarden || fail "/usr/bin/gpuwarden is still there after --uninstall"
! inside test -e /usr/lib/gpuwarden/libgpuwarden_sim_nvml.so || fail "--uninstall left the demo's simulated NVML"
inside test -f /etc/gpuwarden/config.yaml || fail "--uninstall removed the config"
echo "tarball: --uninstall stopped and removed it, the config kept"

# The package, as the README installs it: apt without questions (--force-confold: dpkg keeps
# the config already there, the test's, instead of asking; a node without one gets the shipped
# one), then the demo's package, whose simulated NVML that config names.
apt_quietly() { sed 's|^apt install |env DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o Dpkg::Options::=--force-confold |' <<<"$(from_clone "$1")"; }
output=$(inside sh -c "$(apt_quietly "$apt_command")" 2>&1) || fail "the README's '$apt_command': $output"
[ "$(inside systemctl is-enabled gpuwarden.service)" = enabled ] || fail "apt install did not enable the unit"
! inside test -e /usr/lib/gpuwarden/libgpuwarden_sim_nvml.so || fail "the gpuwarden package installed the simulated NVML"
output=$(inside sh -c "$(apt_quietly "$apt_demo_command") && systemctl restart gpuwarden" 2>&1) ||
  fail "the README's '$apt_demo_command': $output"
wait_until_serving "the package's unit"
inside /usr/bin/gpuwarden health >/dev/null || fail "gpuwarden health after apt install"
inside test -d /var/lib/gpuwarden || fail "apt install made no /var/lib/gpuwarden"
output=$(inside env DEBIAN_FRONTEND=noninteractive apt-get purge -y -q gpuwarden gpuwarden-demo 2>&1) || fail "apt purge: $output"
[ "$(inside systemctl is-active gpuwarden.service || true)" != active ] || fail "still active after apt purge"
! inside test -e /var/lib/gpuwarden || fail "apt purge left the journal"
echo "package: apt install started it (8 GPUs), apt purge removed it and its journal"
echo "release check passed: $dir"
