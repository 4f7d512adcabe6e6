#!/usr/bin/env bash
# A release in one command: for amd64 and arm64, the Debian package (and gpuwarden-demo's:
# the simulated libraries of `run --demo`), the OCI image (an archive
# that `podman load -i` or `skopeo copy oci-archive:FILE docker://REGISTRY/gpuwarden:VERSION`
# takes), a tarball for hosts without dpkg (the package's files and install.sh), and a
# software bill of materials (CycloneDX 1.5 JSON by cargo-cyclonedx: every crate built into
# that architecture's binaries, build dependencies included, at Cargo.lock's versions, with
# licences and checksums); and SHA256SUMS over them all.
#   scripts/release.sh [OUT_DIR]     (as root, for the image; default target/release-artifacts)
# Needs what the test command sets up: cargo-deb, cargo-cyclonedx, mmdebstrap, buildah, the
# arm64 cross toolchain (scripts/arm64-env.sh). ARCHES="amd64" builds one architecture.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/release-artifacts}
version=$(bash scripts/version.sh)
# Not exported while cargo builds: build scripts (cc) rerun when it changes, and a release
# after the test command would compile ring and SQLite again for both architectures.
source_date_epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
unset SOURCE_DATE_EPOCH
rm -rf "$out"
mkdir -p "$out"

for arch in ${ARCHES:-amd64 arm64}; do
  printf '\n== release: %s\n' "$arch"
  case $arch in
    # Built as scripts/ci/package.sh and scripts/ci/arm64.sh build them (the same features
    # resolved, so a release after the test command compiles nothing again).
    amd64) unset CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER CC_aarch64_unknown_linux_gnu AR_aarch64_unknown_linux_gnu \
        CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER QEMU_LD_PREFIX CARGO_TARGET_DIR
      target_args=(); build_args=(--workspace); dir=target/release; triple=x86_64-unknown-linux-gnu ;;
    # The cross toolchain's settings only for the arm64 build.
    arm64) source scripts/arm64-env.sh
      target_args=(--target "$arm64_target"); build_args=(-p gpuwarden -p gpuwarden-sim-nvml -p gpuwarden-sim-cuda)
      dir=$arm64_release; triple=$arm64_target ;;
    *) echo "unknown architecture $arch (amd64, arm64)"; exit 64 ;;
  esac
  cargo build --release "${target_args[@]}" "${build_args[@]}"
  SOURCE_DATE_EPOCH=$source_date_epoch cargo deb "${target_args[@]}" --no-build --output "$out/" >/dev/null
  SOURCE_DATE_EPOCH=$source_date_epoch cargo deb "${target_args[@]}" --no-build --variant demo --output "$out/" 2>&1 >/dev/null |
    { grep -v -e 'No usable systemd units found' -e 'no maintainer scripts found' || true; } >&2
  deb=$out/gpuwarden_${version}-1_$arch.deb
  [ -f "$deb" ] || deb=$(ls "$out"/gpuwarden_*_"$arch".deb)
  demo_deb=$out/gpuwarden-demo_${version}-1_$arch.deb
  [ -f "$demo_deb" ] || demo_deb=$(ls "$out"/gpuwarden-demo_*_"$arch".deb)
  SOURCE_DATE_EPOCH=$source_date_epoch bash scripts/image.sh "$arch" "$dir/gpuwarden" "$out/gpuwarden-$version-$arch.oci.tar"

  SOURCE_DATE_EPOCH=$source_date_epoch bash scripts/tarball.sh "$deb" "$demo_deb" "$out" "gpuwarden-$version-linux-$arch"

  # cargo-cyclonedx writes one file per workspace member, beside its Cargo.toml: the root's is
  # the daemon's (the simulated NVML it ships is a component of it); the others go.
  sbom=gpuwarden-sbom-$$
  cargo cyclonedx --quiet --format json --spec-version 1.5 --target "$triple" --override-filename "$sbom"
  mv "$sbom.json" "$out/gpuwarden-$version-$arch.cdx.json"
  find . -path ./target -prune -o -name "$sbom.json" -type f -exec rm -f {} +
done

(cd "$out" && sha256sum -- * | grep -v ' SHA256SUMS$' > SHA256SUMS)
printf '\n== release %s in %s\n' "$version" "$out"
(cd "$out" && stat -c '%12s  %n' -- *)
