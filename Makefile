# PicoBot. `make help` lists the targets.
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

CACHE ?= $(HOME)/.cache/picobot
export PICOBOT_CACHE := $(CACHE)
CONTROLLER_GEN := go tool controller-gen
# The cluster e2e package runs past go test's default 10-minute limit on a
# loaded 2-core machine; CI's own cap (90 min) is the real limit.
GO_TEST_FLAGS ?= -race -count=1 -timeout 40m
BIN := bin

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: ## Generate deepcopy code for the API types.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...

.PHONY: manifests
manifests: ## Generate CRDs (config/crd/bases) and RBAC (config/rbac/role.yaml) from markers.
	$(CONTROLLER_GEN) rbac:roleName=operator crd paths=./... output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	hack/chart-manifests.sh

.PHONY: fmt
fmt: ## Format the code.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: lint
lint: ## Run golangci-lint (installed once into the cache).
	"$$(hack/tool.sh golangci-lint)" run ./...

.PHONY: verify
verify: ## Fail when generated files, formatting or go.mod are stale.
	hack/verify.sh

##@ Test

.PHONY: controlplane
controlplane: ## Build (once, cached) kube-apiserver and etcd for tests.
	@hack/controlplane.sh >/dev/null

.PHONY: chromium
chromium: ## Install headless Chromium (Debian's package) once, for the browser tests.
	@hack/chromium.sh >/dev/null

.PHONY: test
test: controlplane chromium ## Run every test (unit, integration on real servers, e2e with kubectl and picobot serve) with -race.
	KUBEBUILDER_ASSETS="$$(hack/controlplane.sh)" go test $(GO_TEST_FLAGS) ./...
	node --test runtime/gateway/web/

.PHONY: check
check: verify lint helm-lint test ## Everything CI runs: verify, lint, helm-lint and every test.

.PHONY: test-integration
test-integration: controlplane ## Run the tests of the operator and API against the real API server.
	KUBEBUILDER_ASSETS="$$(hack/controlplane.sh)" go test $(GO_TEST_FLAGS) ./api/... ./operator/...

.PHONY: test-e2e
test-e2e: controlplane ## Run end-to-end tests (operator binary, kubectl).
	KUBEBUILDER_ASSETS="$$(hack/controlplane.sh)" go test $(GO_TEST_FLAGS) ./test/e2e/...

.PHONY: test-realnode
test-realnode: ## Cluster mode on a real single-node Kubernetes (root; builds kubelet & co. once, ~30 min): helm install, a chat through real session pods.
	PICOBOT_E2E_REALNODE=1 go test $(GO_TEST_FLAGS) -timeout 30m ./test/e2e/realnode/

.PHONY: realnode-up
realnode-up: ## Start the real single-node Kubernetes (hack/realnode.sh; kubectl with `hack/realnode.sh kubectl ...`).
	@hack/realnode.sh up >/dev/null

.PHONY: realnode-down
realnode-down: ## Stop the real node and remove its state (binaries and images stay cached).
	@hack/realnode.sh down

.PHONY: bench
bench: controlplane chromium ## Run the benchmarks and print their figures.
	KUBEBUILDER_ASSETS="$$(hack/controlplane.sh)" go test -run '^$$' -bench . -benchmem -benchtime=1x ./test/e2e/... ./operator/...
	# No lost or duplicated completion over 20 fan-outs of 50 background runs.
	KUBEBUILDER_ASSETS="$$(hack/controlplane.sh)" PICOBOT_FANOUT_REPS=20 go test -run '^TestClusterBackgroundFanOutRepeated$$' -timeout 30m ./test/e2e/cluster/
	go test -run '^$$' -bench . -benchmem ./runtime/...

##@ Build and run

.PHONY: build
build: ## Build the binaries into bin/.
	go build -buildvcs=auto -o $(BIN)/picobot ./runtime/cmd/picobot
	go build -o $(BIN)/operator ./operator/cmd
	go build -o $(BIN)/localcluster ./hack/localcluster

.PHONY: run
run: ## Embedded mode: an example agent with the web UI on http://127.0.0.1:8080/ (model from OPENAI_API_KEY / ANTHROPIC_API_KEY).
	@echo "run: building $(BIN)/picobot (a few minutes the first time, seconds after)..."
	go build -buildvcs=auto -o $(BIN)/picobot ./runtime/cmd/picobot
	hack/run-embedded.sh

.PHONY: run-operator
run-operator: ## Cluster mode locally (gateway, operator, session pods as processes, PostgreSQL, Redis, S3), ending in a chat on http://127.0.0.1:8090/.
	@echo "run-operator: building kube-apiserver and etcd (once: 10-15 minutes on 2 cores) and bin/ (a few minutes the first time, seconds after)..."
	@$(MAKE) --no-print-directory controlplane build
	hack/run-local.sh

##@ Packaging

IMG_REGISTRY ?= ghcr.io/picobot
IMG_TAG ?= $(shell sed -n 's/^appVersion: "\(.*\)"/\1/p' charts/picobot/Chart.yaml)
PLATFORMS ?= linux/amd64,linux/arm64

.PHONY: helm-lint
helm-lint: ## Lint the Helm chart (helm installed once into the cache).
	"$$(hack/tool.sh helm)" lint --strict charts/picobot

.PHONY: helm-test
helm-test: controlplane ## Chart, kustomize and image tests: lint, render, snapshots, server-side dry run, Dockerfile builds.
	KUBEBUILDER_ASSETS="$$(hack/controlplane.sh)" go test $(GO_TEST_FLAGS) ./test/helm/...

.PHONY: docker-build
docker-build: ## Build the picobot and picobot-browser images for this machine (Docker with BuildKit).
	docker build -f images/picobot/Dockerfile -t $(IMG_REGISTRY)/picobot:$(IMG_TAG) .
	docker build -f images/picobot-browser/Dockerfile -t $(IMG_REGISTRY)/picobot-browser:$(IMG_TAG) .

.PHONY: docker-push
docker-push: ## Build and push multi-arch images (PLATFORMS, default amd64 and arm64) with docker buildx.
	docker buildx build --platform $(PLATFORMS) -f images/picobot/Dockerfile -t $(IMG_REGISTRY)/picobot:$(IMG_TAG) --push .
	docker buildx build --platform $(PLATFORMS) -f images/picobot-browser/Dockerfile -t $(IMG_REGISTRY)/picobot-browser:$(IMG_TAG) --push .
