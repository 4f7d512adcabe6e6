#!/usr/bin/env bash
# Prints gpuwarden's version, as Cargo.toml's [package] declares it: the one place the
# release, image and package scripts take it from.
set -euo pipefail
sed -n 's/^version = "\(.*\)"/\1/p' "$(dirname "$0")/../Cargo.toml" | head -1
