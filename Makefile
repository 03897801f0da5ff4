# infergate developer entry points. `make dev` runs the main job, `make test` every test.
CARGO ?= cargo

.PHONY: dev test lint unit crds control-plane kuberay lws upstream-crds tools plugin bench fuzz help

help:
	@echo "make dev            local control plane + infergate serving it, examples applied (builds control-plane, kuberay, lws, upstream-crds, tools first)"
	@echo "make test           lint, unit, fixture, TLS and end-to-end tests (what CI runs; builds control-plane, kuberay, lws, upstream-crds, tools first)"
	@echo "make crds           regenerate crds/ and docs/api-reference.md from the Rust types"
	@echo "make control-plane  build kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd into the cache"
	@echo "make kuberay        build the KubeRay operator and fetch its CRDs into the cache"
	@echo "make lws            build the LeaderWorkerSet controller and fetch its CRDs into the cache (the end-to-end tests run it)"
	@echo "make upstream-crds  fetch the Gateway API and Prometheus Operator CRDs into the cache"
	@echo "make tools          build helm, the inference extension's endpoint picker, kwok and krew, and install ray[serve] (a venv), into the cache"
	@echo "make plugin         install kubectl-infergate (and its kubectl completion) into PLUGIN_DIR (~/.local/bin)"
	@echo "make bench          run the benchmarks (by hand, not in CI)"
	@echo "make fuzz           run each fuzz target for FUZZ_SECS (nightly + cargo-fuzz; by hand, docs/fuzzing.md)"

dev: control-plane kuberay lws upstream-crds tools
	$(CARGO) build --locked --bin infergate
	$(CARGO) run --locked --example dev-cluster

# Tests at once: most of an end-to-end test's time is waiting for the API
# server or the reconciler, and a module that runs its tests one at a time
# holds a thread per waiting test (tests/suite/main.rs).
TEST_THREADS ?= 8
test: control-plane kuberay lws upstream-crds tools lint
	$(CARGO) test --locked -- --test-threads=$(TEST_THREADS)

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --locked --no-deps --lib

crds:
	$(CARGO) run --locked -q -- crds > crds/infergate.dev.yaml
	$(CARGO) run --locked -q -- crds --reference > docs/api-reference.md

control-plane:
	@tests/support/build-control-plane.sh >/dev/null

kuberay:
	@tests/support/build-kuberay.sh >/dev/null

lws:
	@tests/support/build-lws.sh >/dev/null

upstream-crds:
	@tests/support/fetch-upstream-crds.sh all

tools:
	@tests/support/build-tool.sh helm >/dev/null
	@tests/support/build-tool.sh lwepp >/dev/null
	@tests/support/build-tool.sh kwok >/dev/null
	@tests/support/build-tool.sh krew >/dev/null
	@tests/support/build-ray-serve.sh >/dev/null

PLUGIN_DIR ?= $(HOME)/.local/bin
plugin:
	$(CARGO) build --locked --release --bin infergate
	install -D -m 0755 target/release/infergate $(PLUGIN_DIR)/kubectl-infergate
	ln -sf kubectl-infergate $(PLUGIN_DIR)/kubectl_complete-infergate

bench:
	$(CARGO) bench --locked

FUZZ_SECS ?= 60
FUZZ_TARGETS := review_decode conversion policy_files
# libFuzzer's -max_len per target (unset: the larger of 4,096 bytes and the
# corpus's largest input): reviews long enough to carry a rollout query far
# past its bounds (4,096 bytes, 64 levels) (docs/fuzzing.md).
FUZZ_MAX_LEN_review_decode := 262144
fuzz:
	@set -e; $(foreach t,$(FUZZ_TARGETS),(cd fuzz && $(CARGO) +nightly fuzz run $(t) corpus/$(t) -- -max_total_time=$(FUZZ_SECS) -rss_limit_mb=2048 $(if $(FUZZ_MAX_LEN_$(t)),-max_len=$(FUZZ_MAX_LEN_$(t)))); )
