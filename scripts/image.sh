#!/usr/bin/env bash
# The gpuwarden OCI image, built without pulling a base image: Debian 12's libc6 and libgcc-s1
# (all the binary links besides what the host brings: NVML comes from the host at run time,
# mounted by the NVIDIA container toolkit) unpacked by mmdebstrap, the release binary and the
# default config, assembled by buildah, written as an OCI archive that `podman load` or
# `skopeo copy oci-archive:FILE docker://REGISTRY/gpuwarden:TAG` takes.
#   scripts/image.sh amd64|arm64 BINARY OUT.oci.tar   (as root; needs mmdebstrap, buildah)
# The image's date and layers come from SOURCE_DATE_EPOCH (default: the commit's date), so the
# same binary and the same Debian packages make the same image.
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${1:?amd64 or arm64}
binary=${2:?the release binary}
out=${3:?the OCI archive to write}
version=$(bash scripts/version.sh)
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
# vfs: no overlay mount needed (containers, CI); a storage of its own under target/.
storage=$(readlink -f target)/image-storage
buildah=(buildah --storage-driver vfs --root "$storage/root" --runroot "$storage/run")
work=$(mktemp -d)
ctr=""
cleanup() {
  [ -n "$ctr" ] && "${buildah[@]}" rm "$ctr" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# Only the packages' files, no maintainer scripts (none is needed for two libraries), and no
# documentation but the copyright files.
mmdebstrap --quiet --variant=extract --architectures="$arch" --include=libc6,libgcc-s1 \
  --dpkgopt='path-exclude=/usr/share/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --extract-hook="ls \"\$1\"/var/cache/apt/archives/ | grep '\\.deb\$' > '$work/packages.txt'" \
  --skip=output/dev bookworm "$work/rootfs.tar"
libc=$(sed -n 's/^libc6_\([^_]*\)_.*/\1/p' "$work/packages.txt" | sed 's/%3a/:/')
mkdir -p "$work/add/usr/share/doc/gpuwarden"
# What the image holds besides gpuwarden: the Debian packages, by file name and version.
cp "$work/packages.txt" "$work/add/usr/share/doc/gpuwarden/image-packages.txt"
mkdir -p "$work/add/usr/bin" "$work/add/etc/gpuwarden" "$work/add/var/lib/gpuwarden" "$work/add/run/gpuwarden" "$work/add/tmp"
cp "$binary" "$work/add/usr/bin/gpuwarden"
cp config/gpuwarden.yaml "$work/add/etc/gpuwarden/config.yaml"
chmod 1777 "$work/add/tmp"

ctr=$("${buildah[@]}" from --arch "$arch" scratch)
"${buildah[@]}" add "$ctr" "$work/rootfs.tar" / >/dev/null
"${buildah[@]}" copy "$ctr" "$work/add" / >/dev/null
"${buildah[@]}" config \
  --arch "$arch" --os linux \
  --entrypoint '["/usr/bin/gpuwarden"]' --cmd '["run"]' \
  --port 9100/tcp --workingdir / \
  --env NVIDIA_VISIBLE_DEVICES=all --env NVIDIA_DRIVER_CAPABILITIES=utility,compute \
  --label org.opencontainers.image.title=gpuwarden \
  --label "org.opencontainers.image.description=GPU fleet operations daemon and Prometheus exporter for NVIDIA and AMD GPUs" \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.revision=$revision" \
  --label "org.opencontainers.image.created=$created" \
  --label org.opencontainers.image.licenses=Apache-2.0 \
  --label org.opencontainers.image.source=https://github.com/gpuwarden/gpuwarden \
  --label "org.opencontainers.image.base.name=debian:bookworm libc6 $libc (mmdebstrap, extract)" \
  "$ctr"
"${buildah[@]}" commit --quiet --format oci --timestamp "$SOURCE_DATE_EPOCH" --rm "$ctr" "gpuwarden:$version-$arch" >/dev/null
ctr=""
rm -f "$out"
"${buildah[@]}" push --quiet "gpuwarden:$version-$arch" "oci-archive:$out:gpuwarden:$version"
echo "$out: $(stat -c %s "$out") bytes (gpuwarden:$version, $arch, libc6 $libc)"
