#!/usr/bin/env bash
# Renders every overlay of deploy/kubernetes with kustomize (kubectl's) and checks what a user
# would apply:
# - each object against Kubernetes 1.29's and 1.31's API schemas, strictly (an unknown field
#   is an error), by kubernetes-validate (PyPI); node-verdict against 1.32's and 1.37's, the
#   first that holds all it needs (its admission policy reads the node from a pod-bound
#   token: 1.32) and the one its DeviceTaintRules need;
# - the Prometheus Operator's objects, which those schemas do not hold, against the operator's
#   published API types (scripts/ci/k8s/validate-crds.mjs; from the npm registry);
# - that no overlay but prometheus-operator holds an object of the operator's, and only the
#   one that asks for it sets runtimeClassName.
#   scripts/ci/k8s-check.sh   (needs kubectl, node and npm; kubernetes-validate and PyYAML on PATH's python3)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=target/k8s
tools=target/k8s-tools
mkdir -p "$out"
fail() { echo "kubernetes check FAILED: $*"; exit 1; }
command -v kubectl >/dev/null || fail "kubectl is not installed (its kustomize renders the overlays)"

# The npm packages, pinned by the lock file; installed again only when it changes.
if [ ! -d "$tools/node_modules" ] || ! cmp -s scripts/ci/k8s/package-lock.json "$tools/package-lock.json"; then
  rm -rf "$tools"
  mkdir -p "$tools"
  cp scripts/ci/k8s/package.json scripts/ci/k8s/package-lock.json "$tools/"
  (cd "$tools" && npm ci --silent --no-audit --no-fund --engine-strict=false)
fi

for dir in deploy/kubernetes/overlays/*/; do
  overlay=$(basename "$dir")
  kubectl kustomize "$dir" >"$out/$overlay.yaml"
  python3 -c 'import json, sys, yaml; json.dump([d for d in yaml.safe_load_all(open(sys.argv[1])) if d], open(sys.argv[2], "w"))' \
    "$out/$overlay.yaml" "$out/$overlay.json"
  versions="1.29.0 1.31.0"
  [ "$overlay" != node-verdict ] || versions="1.32.0 1.37.0"
  for version in $versions; do
    report=$(kubernetes-validate --strict --quiet -k "$version" "$out/$overlay.yaml" 2>&1) || fail "$overlay on $version: $report"
    # Only the operator's kinds may lack a schema here (they are checked below).
    unchecked=$(grep "Couldn't find schema" <<<"$report" | grep -v -E 'kind (ServiceMonitor|PrometheusRule) with api version monitoring.coreos.com/v1 ' || true)
    [ -z "$unchecked" ] || fail "$overlay on $version: $unchecked"
  done
  operator_objects=$(grep -c '^apiVersion: monitoring.coreos.com/' "$out/$overlay.yaml" || true)
  if [ "$overlay" = prometheus-operator ] || [ "$overlay" = kube-prometheus-stack ]; then
    [ "$operator_objects" = 2 ] || fail "$overlay has $operator_objects Prometheus Operator objects, not 2"
  else
    [ "$operator_objects" = 0 ] || fail "$overlay has objects a cluster without the Prometheus Operator cannot apply"
  fi
  ! grep -q runtimeClassName "$out/$overlay.yaml" || fail "$overlay sets runtimeClassName, which no one asked for"
  echo "$overlay: $(grep -c '^kind:' "$out/$overlay.yaml") objects pass Kubernetes $versions (strict)"
done

# runtimeClassName only where a user adds the component: render a kustomization that does.
with_runtime=$(mktemp -d "$PWD/target/k8s/runtime-class.XXXXXX")
trap 'rm -rf "$with_runtime"' EXIT
printf 'resources:\n  - ../../../deploy/kubernetes/overlays/plain\ncomponents:\n  - ../../../deploy/kubernetes/components/nvidia-runtime-class\n' \
  >"$with_runtime/kustomization.yaml"
kubectl kustomize "$with_runtime" | grep -q '^      runtimeClassName: nvidia$' ||
  fail "the nvidia-runtime-class component does not set runtimeClassName: nvidia"

node scripts/ci/k8s/validate-crds.mjs "$tools" "$out"/*.json
