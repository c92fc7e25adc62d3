#!/usr/bin/env bash
# `make run`: a local control plane (kube-apiserver + etcd built from Go
# modules), the sample Agent, CronJobs and BrowserProfile applied with kubectl,
# and the operator reconciling them. Ctrl-C stops everything.
#
# Model keys: OPENAI_API_KEY / ANTHROPIC_API_KEY go into the Secret the samples
# reference; without them a placeholder is stored, and the Agents say so
# (ModelResolved=False, reason PlaceholderKey) instead of claiming to be Ready.
# RUN_SECONDS=N stops after N seconds (for scripted runs).
set -euo pipefail
cd "$(dirname "$0")/.."
state=.picobot
kubeconfig=$state/kubeconfig
ns=${PICOBOT_NAMESPACE:-demo}
mkdir -p "$state"
rm -f "$kubeconfig"
export KUBEBUILDER_ASSETS
KUBEBUILDER_ASSETS=$(hack/controlplane.sh)

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

bin/localcluster --write-kubeconfig "$kubeconfig" 2>"$state/localcluster.log" &
pids+=($!)
for _ in $(seq 1 1200); do
  [ -s "$kubeconfig" ] && break
  kill -0 "${pids[0]}" 2>/dev/null || break
  sleep 0.1
done
[ -s "$kubeconfig" ] || { cat "$state/localcluster.log"; echo "run: control plane did not start" >&2; exit 1; }
k() { kubectl --kubeconfig "$kubeconfig" "$@"; }

k create namespace "$ns" >/dev/null
k create secret generic model-api-keys -n "$ns" \
  --from-literal=openai="${OPENAI_API_KEY:-placeholder-set-OPENAI_API_KEY}" \
  --from-literal=anthropic="${ANTHROPIC_API_KEY:-placeholder-set-ANTHROPIC_API_KEY}" >/dev/null
k apply -n "$ns" -f config/samples/

bin/operator --kubeconfig "$kubeconfig" --metrics-bind-address=127.0.0.1:0 --health-probe-bind-address=127.0.0.1:0 \
  2> >(tee "$state/operator.log" | grep --line-buffered -E '"(Starting operator|Reconciler error)"' >&2) &
pids+=($!)
k wait -n "$ns" --for=condition=Ready agents --all --timeout=60s >/dev/null || true

echo
echo "== What the operator reconciled (kubectl get picobot -n $ns)"
k get picobot -n "$ns"
echo
echo "== Effective model and tools of agent/assistant"
k get agent assistant -n "$ns" -o jsonpath='{"model: "}{.status.effectiveModel.provider}/{.status.effectiveModel.model} (from {.status.effectiveModel.source}){"\ntools: "}{.status.effectiveTools}{"\n"}'
echo
cat <<MSG
The control plane keeps running. In another shell:
  kubectl --kubeconfig $kubeconfig get agents -n $ns -o wide
  kubectl --kubeconfig $kubeconfig explain agent.spec.tools
Operator log: $state/operator.log. Ctrl-C stops everything.
MSG
if [ -n "${RUN_SECONDS:-}" ]; then sleep "$RUN_SECONDS"; else wait; fi
