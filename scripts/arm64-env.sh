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
