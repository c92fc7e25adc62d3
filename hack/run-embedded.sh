#!/usr/bin/env bash
# `make run`: embedded mode (`picobot serve`) with an example agent and the web
# UI on http://127.0.0.1:8080/.
#
# The model comes from the environment:
#   OPENAI_API_KEY (+ optional OPENAI_BASE_URL for any OpenAI-compatible server)
#   or ANTHROPIC_API_KEY (+ optional ANTHROPIC_BASE_URL); PICOBOT_MODEL picks
#   the model. The key is handed to picobot as PICOBOT_SECRET_MODEL_API_KEY_APIKEY
#   and never written to disk. Without a key the UI says no model is
#   configured. PICOBOT_FAKE_LLM=1 answers with a local demo model that shows
#   the agent's tools at work (runtime/provider/fakellm's Demo).
set -euo pipefail
cd "$(dirname "$0")/.."
demo=.picobot/demo
mkdir -p "$demo"
addr=${PICOBOT_ADDR:-127.0.0.1:8080}
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

provider=openai model=${PICOBOT_MODEL:-gpt-4o-mini} base=${OPENAI_BASE_URL:-} key=${OPENAI_API_KEY:-}
if [ -z "$key" ] && [ -n "${ANTHROPIC_API_KEY:-}" ]; then
  provider=anthropic model=${PICOBOT_MODEL:-claude-sonnet-4-5} base=${ANTHROPIC_BASE_URL:-} key=$ANTHROPIC_API_KEY
fi
if [ "${PICOBOT_FAKE_LLM:-}" = 1 ]; then
  go build -o bin/fakellm ./hack/fakellm
  bin/fakellm --addr 127.0.0.1:0 --demo > "$demo/fakellm.out" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do grep -q "OpenAI base URL" "$demo/fakellm.out" 2>/dev/null && break; sleep 0.1; done
  provider=openai model=fake base=$(grep -o 'http://[^ ]*/v1' "$demo/fakellm.out" | head -1) key=fake
fi

{
  echo "# Written by hack/run-embedded.sh from the environment; edit freely."
  echo "apiVersion: agents.picobot.io/v1alpha1"
  echo "kind: Agent"
  echo "metadata:"
  echo "  name: assistant"
  echo "spec:"
  echo "  instructions: You are PicoBot, a concise and helpful assistant. Use tools when they help."
  echo "  model:"
  echo "    provider: $provider"
  echo "    model: $model"
  [ -n "$base" ] && echo "    baseURL: $base"
  echo "    apiKeySecretRef: {name: model-api-key, key: apiKey}"
  echo "  tools:"
  echo "    profile: coding"
  echo "    allow: [\"group:web\", \"calculator\", \"todo\", \"llm_task\"]"
} > "$demo/agent.yaml"

export PICOBOT_SECRET_MODEL_API_KEY_APIKEY=$key
[ -n "$key" ] || echo "run: no OPENAI_API_KEY or ANTHROPIC_API_KEY set: the UI will say that no model is configured." >&2
bin/picobot serve --dir "$demo" --addr "$addr" &
pids+=($!)
# Say where to go and what to try once the gateway answers.
client=bin/picobot
[ "$addr" = 127.0.0.1:8080 ] || client="PICOBOT_URL=http://$addr bin/picobot"
command -v curl >/dev/null || sleep 1
for _ in $(seq 1 300); do
  command -v curl >/dev/null || break
  curl -fsS "http://$addr/api/v1/health" >/dev/null 2>&1 && break
  kill -0 "${pids[-1]}" 2>/dev/null || break
  sleep 0.1
done
if ! command -v curl >/dev/null || curl -fsS "http://$addr/api/v1/health" >/dev/null 2>&1; then
  cat >&2 <<EOF

  PicoBot is running: open http://$addr/
  Try:  "what is 6*7?" · "fetch https://example.com" · "remember that I like tea" · /help
  Terminal: $client chat      One message: $client ask "hello"      Check: bin/picobot health --dir $demo
  The agent's manifest is $demo/agent.yaml (edit it and restart). Stop with Ctrl+C.

EOF
fi
if [ -n "${RUN_SECONDS:-}" ]; then sleep "$RUN_SECONDS"; else wait "${pids[-1]}"; fi
