#!/usr/bin/env bash
# Builds the OCI image (scripts/image.sh) from the release binary and runs it as a user would:
# `podman run` over the simulated NVML mounted in, /metrics scraped, `gpuwarden health` asked
# through the mounted socket by the binary the image's `copy-binary` hands out (what the
# Kubernetes init container does for node-problem-detector), SIGTERM, and the container gone
# within 5 s with exit 0.
#   scripts/ci/image-check.sh      (as root; after `cargo build --release --workspace`)
# The runtime is runc where it is installed: crun refuses the hybrid cgroup layout of some
# VMs (ours among them), and podman's default limits are lowered to what an unprivileged
# container may set there. Prints the archive's path last.
set -euo pipefail
cd "$(dirname "$0")/../.."
version=$(bash scripts/version.sh)
mkdir -p target/image
archive=target/image/gpuwarden-$version-amd64.oci.tar
bash scripts/image.sh amd64 target/release/gpuwarden "$archive"

storage=$(readlink -f target)/image-storage
podman=(podman --storage-driver vfs --root "$storage/podman" --runroot "$storage/podman-run" --cgroup-manager cgroupfs)
if command -v runc >/dev/null; then podman+=(--runtime runc); fi
work=$(mktemp -d)
name=gpuwarden-check-$$
cleanup() {
  "${podman[@]}" rm -f "$name" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "image check FAILED: $*"; "${podman[@]}" logs "$name" 2>&1 | tail -20 || true; exit 1; }

"${podman[@]}" load -q -i "$archive" >/dev/null
image=localhost/gpuwarden:$version
labels=$("${podman[@]}" image inspect --format '{{json .Labels}}' "$image")
for label in title description version revision created licenses source; do
  grep -q "\"org.opencontainers.image.$label\"" <<<"$labels" || fail "no label org.opencontainers.image.$label"
done

mkdir -p "$work/sim" "$work/run" "$work/bin"
cp target/release/libgpuwarden_sim_nvml.so "$work/sim/"
cp config/demo-scenario.yaml "$work/sim/scenario.yaml"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
printf 'listen: 127.0.0.1:%s\nnvml:\n  library_path: /sim/libgpuwarden_sim_nvml.so\nxid:\n  read_kernel_log: false\nfabric_manager:\n  check: false\n' \
  "$port" > "$work/sim/config.yaml"
# As the DaemonSet runs it: the host's network, the local API's directory from the host.
"${podman[@]}" run -d --name "$name" --network host --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 \
  -v "$work/sim:/sim:ro" -v "$work/run:/run/gpuwarden" -e GPUWARDEN_SIM_NVML_SCENARIO=/sim/scenario.yaml \
  "$image" run --config /sim/config.yaml >/dev/null
for _ in $(seq 100); do
  curl -sf "127.0.0.1:$port/metrics" >"$work/metrics" 2>/dev/null && grep -q '^gpu_up' "$work/metrics" && break
  sleep 0.1
done
up=$(grep -cE '^gpu_up\{.*\} 1(\.0)?$' "$work/metrics" || true)
[ "$up" = 8 ] || fail "gpu_up is 1 for $up GPUs, not 8"
# The node-problem-detector component's init container: the image's binary copies itself out
# (the image has no shell or cp), read-only root as in the DaemonSet.
"${podman[@]}" run --rm --read-only --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 \
  -v "$work/bin:/opt/gpuwarden/bin" "$image" copy-binary /opt/gpuwarden/bin >/dev/null ||
  fail "copy-binary in the image failed"
[ -x "$work/bin/gpuwarden" ] || fail "copy-binary left no executable gpuwarden"
status=0
health=$("$work/bin/gpuwarden" health --socket "$work/run/gpuwarden.sock") || status=$?
# The demo's scenario has degraded GPUs and none unhealthy: exit 0.
[ "$status" = 0 ] || fail "gpuwarden health exited $status: $health"
grep -q '^degraded: 8 GPU(s)' <<<"$health" || fail "health said: $health"
started=$(date +%s%N)
"${podman[@]}" kill --signal TERM "$name" >/dev/null
code=$(timeout 5 "${podman[@]}" wait "$name") || fail "still running 5 s after SIGTERM"
took=$((($(date +%s%N) - started) / 1000000))
[ "$code" = 0 ] || fail "exited $code after SIGTERM"
echo "image check passed: 8 GPUs on /metrics, health (the copied binary) '$(head -1 <<<"$health")', exit 0 ${took} ms after SIGTERM"
echo "$archive $(stat -c %s "$archive") bytes"
echo "$archive"
