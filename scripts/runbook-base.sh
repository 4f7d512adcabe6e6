#!/usr/bin/env bash
# Points every alert's runbook_url at your own runbooks: writes the rules file with BASE in
# place of the shipped base (gpuwarden's docs/alerts.md on GitHub), each alert's anchor kept
# (BASE + "gpuxidfatal"), and checks the result with promtool when it is installed.
#   scripts/runbook-base.sh BASE [RULES] > my.rules.yml
#   scripts/runbook-base.sh https://wiki.example.com/gpu/runbooks# /usr/share/gpuwarden/prometheus/gpuwarden.rules.yml
# RULES: default deploy/prometheus/gpuwarden.rules.yml (the Debian package's copy is under
# /usr/share/gpuwarden/prometheus/).
set -euo pipefail
base=${1:?the runbooks base URL, e.g. https://wiki.example.com/gpu/runbooks#}
rules=${2:-$(dirname "$0")/../deploy/prometheus/gpuwarden.rules.yml}
shipped='https://github.com/gpuwarden/gpuwarden/blob/main/docs/alerts.md#'
case $base in
  http://*|https://*) ;;
  *) echo "runbook-base.sh: $base is not an http(s) URL" >&2; exit 64 ;;
esac
# The base goes into a sed replacement: only what a URL may hold, and no sed metacharacter.
if ! [[ $base =~ ^[A-Za-z0-9:/?#@!\$\'()*+,\;=._~%-]+$ ]] || [[ $base == *'&'* ]]; then
  echo "runbook-base.sh: $base has characters a URL does not (percent-encode them)" >&2
  exit 64
fi
grep -q "runbook_url: \"$shipped" "$rules" || { echo "runbook-base.sh: no shipped runbook_url in $rules" >&2; exit 65; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
sed "s|runbook_url: \"$shipped|runbook_url: \"$base|" "$rules" >"$out"
if command -v promtool >/dev/null; then
  promtool check rules "$out" >/dev/null || { echo "runbook-base.sh: promtool refuses the result" >&2; exit 65; }
fi
cat "$out"
