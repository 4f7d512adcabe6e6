# Sourced by the scripts that build for arm64 (scripts/ci/arm64.sh, scripts/release.sh): cargo's
# cross linker and C compiler for aarch64-unknown-linux-gnu (Debian's gcc-aarch64-linux-gnu),
# and qemu-user to run what it builds (the tests, and their children through /proc/self/exe).
arm64_target=aarch64-unknown-linux-gnu
arm64_sysroot=/usr/aarch64-linux-gnu
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
export AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64-static -L $arm64_sysroot"
export QEMU_LD_PREFIX=$arm64_sysroot
# A build directory of its own: the cross build's host parts (build scripts, proc macros) then
# do not wait on the native release build's lock on target/release, and the two build side by
# side (scripts/ci/release-builds.sh). cargo-deb finds the binaries through cargo's metadata.
export CARGO_TARGET_DIR=target/arm64
arm64_release=$CARGO_TARGET_DIR/$arm64_target/release
