# botpool — the single entry point for building, generating, testing and running.

# Tool versions, pinned here and nowhere else.
CONTROLLER_GEN_VERSION ?= v0.23.0
GOLANGCI_LINT_VERSION  ?= v2.15.0
KUBE_VERSION           ?= 1.36.3
ETCD_VERSION           ?= 3.6.16
HELM_VERSION           ?= v3.22.0

# Tools and the envtest control plane are cached outside the repository, keyed by version, so a
# fresh clone reuses what an earlier build of any clone made.
CACHE_DIR  ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/botpool
TOOLS_DIR  := $(CACHE_DIR)/tools
CONTROLLER_GEN := $(TOOLS_DIR)/controller-gen-$(CONTROLLER_GEN_VERSION)
GOLANGCI_LINT  := $(TOOLS_DIR)/golangci-lint-$(GOLANGCI_LINT_VERSION)
HELM           := $(TOOLS_DIR)/helm-$(HELM_VERSION)
# The chart tests (charts/botpool) run this helm; they skip only when it is neither set nor built.
export HELM

export KUBE_VERSION ETCD_VERSION
ENVTEST_ASSETS = $(shell hack/envtest.sh)

GO_TEST_FLAGS ?= -race -count=1 -timeout 60m
IMG ?= botpool:dev

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

.PHONY: all
all: build

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  %-12s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRDs and the RBAC roles from the markers (and copy them into the chart).
	$(CONTROLLER_GEN) rbac:roleName=botpool-manager crd paths=./... \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	# The bot API's own role (--components=bot-api): the markers of package botapi alone.
	$(CONTROLLER_GEN) rbac:roleName=botpool-bot-api,fileName=bot_api_role.yaml paths=./botapi \
		output:rbac:artifacts:config=config/rbac
	@$(MAKE) -s helm-sync

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate the deepcopy functions.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...

.PHONY: fmt
fmt: ## Format the code.
	gofmt -s -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint with the linters chosen in .golangci.yml.
	$(GOLANGCI_LINT) run ./...

.PHONY: verify
verify: manifests generate ## Regenerate everything and fail when the tree differs from git.
	@gofmt -s -l $$(git ls-files '*.go') | (! grep .) || { echo "gofmt: the files above need 'make fmt'"; exit 1; }
	go mod tidy -diff
	@git diff --exit-code -- api config charts/botpool/files || { echo "Generated files are stale: run 'make manifests generate' and commit the result"; exit 1; }
	@test -z "$$(git status --porcelain -- api config charts/botpool/files)" || { git status --porcelain -- api config charts/botpool/files; echo "Untracked generated files: commit them"; exit 1; }

.PHONY: envtest
envtest: ## Build (first time, ~10 minutes) or find the cached kube-apiserver and etcd; prints their directory.
	@hack/envtest.sh

.PHONY: test
test: vet $(HELM) ## Run the unit and envtest suites with -race against a real apiserver, Postgres and helm.
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" go test $(GO_TEST_FLAGS) ./...

.PHONY: helm-sync
helm-sync: ## Copy the generated CRDs and ClusterRoles into the Helm chart (a test fails when they drift).
	rm -f charts/botpool/files/crds/*.yaml
	cp config/crd/bases/*.yaml charts/botpool/files/crds/
	cp config/rbac/role.yaml charts/botpool/files/rbac/role.yaml
	cp config/rbac/bot_api_role.yaml charts/botpool/files/rbac/bot_api_role.yaml

.PHONY: helm-lint
helm-lint: $(HELM) ## Lint the Helm chart with default and non-default values.
	$(HELM) lint charts/botpool --strict --kube-version v$(KUBE_VERSION)
	$(HELM) lint charts/botpool --strict --kube-version v$(KUBE_VERSION) -f charts/botpool/testdata/nondefault-values.yaml

##@ Demo, benchmarks and soak

# The demo pool's spec.standby: make demo DEMO_STANDBY=Running keeps standby containers (docs/demo.md).
DEMO_STANDBY ?= Stopped
# The simulated Coolify servers the demo pool spreads over (1 to 3): make demo DEMO_SERVERS=3 (docs/demo.md).
DEMO_SERVERS ?= 1

.PHONY: demo
demo: build ## Run the whole system locally: control plane, Postgres, Coolify simulator, the operator and a burst of Bots (Ctrl-C cleans up).
	go build -o bin/demo ./cmd/demo
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" bin/demo --manager bin/manager --standby $(DEMO_STANDBY) --servers $(DEMO_SERVERS) $(DEMO_ARGS)

# The end-to-end benchmarks print their figures next to the targets; docs/benchmarks.md records them.
BENCH_FLAGS ?= -run '^$$' -benchtime 1x -count 1 -timeout 60m

.PHONY: bench
bench: ## Run the benchmarks (envtest, simulator, real Postgres) and print the figures against their targets.
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" go test $(BENCH_FLAGS) -bench . ./bench/
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" go test $(BENCH_FLAGS) -bench CoolifyTraffic ./controllers/
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" go test $(BENCH_FLAGS) -bench 'StandbyBurst|StandbyThroughput' ./controllers/
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" go test $(BENCH_FLAGS) -bench ServersBurst ./controllers/
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" go test $(BENCH_FLAGS) -timeout 180m -bench Rollout ./controllers/
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" go test $(BENCH_FLAGS) -bench Reservations ./controllers/
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" go test $(BENCH_FLAGS) -bench WorkersUnderAttack ./controllers/
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" go test $(BENCH_FLAGS) -bench 'Heartbeats|ConfigParameters' ./botapi/
	go test $(BENCH_FLAGS) -bench WebhookOutbox -benchtime 5000x ./store/postgres/

.PHONY: soak
soak: ## Run the long soak and chaos test (hundreds of bots, faults, restarts); make test runs a short one.
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" BOTPOOL_SOAK=long go test -run 'TestSoak|TestBurstOfTenBotsPerSlot' -count=1 -timeout 60m -v ./controllers/

# make modelcheck: MODELCHECK_RUNS runs in parallel, each playing new random seeds of
# MODELCHECK_STEPS/MODELCHECK_RUNS steps one after the other until MODELCHECK_BUDGET has passed
# (a seed started before then plays to its end). It prints every seed it ran and a last line of
# those that ran clean; a failure prints its replay command.
MODELCHECK_STEPS  ?= 1000000
MODELCHECK_RUNS   ?= 4
MODELCHECK_BUDGET ?= 10m

.PHONY: modelcheck
modelcheck: ## Run the randomized model check on new random seeds for MODELCHECK_BUDGET (make test runs fixed seeds).
	BOTPOOL_MODELCHECK_RANDOM=1 BOTPOOL_MODELCHECK_STEPS=$(MODELCHECK_STEPS) BOTPOOL_MODELCHECK_RUNS=$(MODELCHECK_RUNS) \
		BOTPOOL_MODELCHECK_BUDGET=$(MODELCHECK_BUDGET) go test -count=1 -timeout 0 -v -run 'TestModelCheck$$' ./internal/modelcheck/

##@ Build

.PHONY: build
build: ## Build the manager binary into bin/.
	CGO_ENABLED=0 go build -trimpath -o bin/manager .

.PHONY: run
run: ## Run the manager against the current kubeconfig (leader election off).
	go run . --leader-elect=false

.PHONY: docker-build
docker-build: ## Build the container image (needs a Docker engine).
	docker build -t $(IMG) .

##@ Tools

$(CONTROLLER_GEN):
	hack/install-tool.sh $@ sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)

$(GOLANGCI_LINT):
	hack/install-tool.sh $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

$(HELM):
	hack/install-tool.sh $@ helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
