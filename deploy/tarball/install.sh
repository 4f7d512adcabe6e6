#!/bin/sh
# Installs gpuwarden from this tarball on a Linux host with systemd but without dpkg: every file
# where the Debian package puts it (MANIFEST lists them), the journal's directory, and the unit
# enabled and started, as the package's postinst does.
#   sudo ./install.sh              install, or upgrade in place
#   sudo ./install.sh --no-start   install and enable, start later (systemctl start gpuwarden)
#   sudo ./install.sh --uninstall  stop and remove it; the config and the journal stay
#   sudo ./install.sh --demo       also install demo/ (the simulated NVML and CUDA of
#                                  `gpuwarden run --demo`; never on a GPU node)
# An existing /etc/gpuwarden/config.yaml is kept: a different shipped one is written beside it
# as config.yaml.new (what dpkg does for a changed conffile, without asking).
set -eu
cd "$(dirname "$0")"
mode=install
demo=no
for arg in "$@"; do
  case $arg in
    --no-start) mode=no-start ;;
    --uninstall) mode=uninstall ;;
    --demo) demo=yes ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown option $arg (--no-start, --uninstall, --demo, --help)" >&2; exit 64 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "install.sh: run it as root (sudo ./install.sh)" >&2; exit 77; }
[ -f MANIFEST ] || { echo "install.sh: no MANIFEST beside it; unpack the whole tarball" >&2; exit 66; }
has_systemd() { [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; }
config=etc/gpuwarden/config.yaml

if [ "$mode" = uninstall ]; then
  if has_systemd; then
    systemctl disable --now gpuwarden.service || true
  fi
  while IFS= read -r path; do
    [ "$path" = "$config" ] || rm -f "/$path"
  done < MANIFEST
  # The demo's files, wherever an earlier --demo put them.
  if [ -f demo/MANIFEST ]; then
    while IFS= read -r path; do rm -f "/$path"; done < demo/MANIFEST
  fi
  has_systemd && systemctl daemon-reload
  echo "gpuwarden removed; /etc/gpuwarden and the journal in /var/lib/gpuwarden stay (remove them by hand)"
  exit 0
fi

while IFS= read -r path; do
  case $path in
    usr/bin/*) perm=0755 ;;
    usr/share/gpuwarden/slurm/*.sh) perm=0755 ;;
    *) perm=0644 ;;
  esac
  if [ "$path" = "$config" ] && [ -e "/$path" ]; then
    if ! cmp -s "$path" "/$path"; then
      install -m 0644 "$path" "/$path.new"
      echo "kept your /$path; the shipped one is /$path.new"
    fi
    continue
  fi
  # Beside the target, then renamed over it: a running binary is replaced, not rewritten.
  install -d "/$(dirname "$path")"
  install -m "$perm" "$path" "/$path.gpuwarden-new"
  mv -f "/$path.gpuwarden-new" "/$path"
done < MANIFEST
if [ "$demo" = yes ]; then
  [ -f demo/MANIFEST ] || { echo "install.sh: no demo/MANIFEST; unpack the whole tarball" >&2; exit 66; }
  while IFS= read -r path; do
    install -d "/$(dirname "$path")"
    install -m 0644 "demo/$path" "/$path.gpuwarden-new"
    mv -f "/$path.gpuwarden-new" "/$path"
  done < demo/MANIFEST
fi
# The health journal's directory (state.path), as the package's postinst makes it.
install -d -m 0750 -o root -g root /var/lib/gpuwarden

if has_systemd; then
  systemctl daemon-reload
  if [ "$mode" = no-start ]; then
    systemctl enable gpuwarden.service
  else
    systemctl enable gpuwarden.service
    # restart, not start: an upgrade runs the new binary.
    systemctl restart gpuwarden.service
    echo "gpuwarden installed and started: systemctl status gpuwarden; curl -s localhost:9100/metrics"
  fi
else
  echo "gpuwarden installed; no systemd runs here: start it with /usr/bin/gpuwarden run"
fi
