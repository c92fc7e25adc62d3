#!/usr/bin/env bash
# Fails when generated files (deepcopy, CRDs, RBAC, the chart's copies of them), formatting or go.mod/go.sum
# are stale: regenerates them and compares checksums before and after.
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0
unformatted=$(gofmt -l $(git ls-files --cached --others --exclude-standard '*.go'))
if [ -n "$unformatted" ]; then
  echo "verify: not gofmt-ed: $unformatted" >&2; fail=1
fi
sums() { find api config/crd config/rbac charts/picobot/templates -type f -print0 | sort -z | xargs -0 sha256sum; sha256sum go.mod go.sum; }
before=$(sums)
make -s generate manifests >/dev/null
go mod tidy
after=$(sums)
if [ "$before" != "$after" ]; then
  echo "verify: generated files were stale (now regenerated; commit them):" >&2
  diff <(echo "$before") <(echo "$after") | sed -n 's/^> [0-9a-f]*  /  /p' >&2
  fail=1
fi
exit $fail
