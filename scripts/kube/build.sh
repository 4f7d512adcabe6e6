#!/usr/bin/env bash
# Builds the real Kubernetes control plane the tests run against: kube-apiserver
# (k8s.io/kubernetes v1.37, its staging modules pinned in tests/kube/control-plane/apiserver),
# etcd 3.6 and node-problem-detector, each from its own Go module so that one tool's
# dependencies never move another's. Output: target/kube/bin. A stamp of the go.mod/go.sum
# files and the Go version makes a second run a no-op; the Go build cache makes a changed
# stamp cheap.
#
# Usage: scripts/kube/build.sh        (prints the bin directory on its last line)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
modules="$root/tests/kube/control-plane"
out="${GPUWARDEN_KUBE_BIN:-$root/target/kube/bin}"
mkdir -p "$out"

if ! command -v go >/dev/null; then
    echo "scripts/kube/build.sh: no 'go' on PATH; install Go 1.26 (the tests against a real API server need it)" >&2
    exit 1
fi

stamp=$( (go version; cat "$0" "$modules"/*/go.mod "$modules"/*/go.sum) | sha256sum | cut -d' ' -f1)
if [ -f "$out/.stamp" ] && [ "$(cat "$out/.stamp")" = "$stamp" ] \
    && [ -x "$out/kube-apiserver" ] && [ -x "$out/etcd" ] && [ -x "$out/node-problem-detector" ]; then
    echo "$out"
    exit 0
fi

build() { # module dir, package, binary name, ldflags
    local started=$SECONDS
    (cd "$modules/$1" && GOFLAGS=-mod=readonly go build -trimpath -ldflags "${4:-}" -o "$out/$3.new" "$2")
    mv "$out/$3.new" "$out/$3"
    echo "built $3 in $((SECONDS - started)) s" >&2
}

build etcd go.etcd.io/etcd/server/v3 etcd
build npd k8s.io/node-problem-detector/cmd/nodeproblemdetector node-problem-detector
# The version it says (kubectl warns of skew against v0.0.0-master otherwise).
kube_version=$(sed -n 's/^\s*k8s.io\/kubernetes \(v[0-9.]*\).*/\1/p' "$modules/apiserver/go.mod" | head -1)
version_pkg=k8s.io/component-base/version
build apiserver k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver \
    "-X $version_pkg.gitVersion=$kube_version -X $version_pkg.gitMajor=1 -X $version_pkg.gitMinor=$(echo "$kube_version" | cut -d. -f2) -X $version_pkg.gitTreeState=clean"
echo "$stamp" > "$out/.stamp"
echo "$out"
