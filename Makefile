# infergate developer entry points. `make dev` runs the main job, `make test` every test.
CARGO ?= cargo

.PHONY: dev test lint unit crds control-plane bench help

help:
	@echo "make dev            local control plane + infergate serving it, examples applied"
	@echo "make test           lint, unit, fixture, TLS and end-to-end tests (what CI runs)"
	@echo "make crds           regenerate crds/ and docs/api-reference.md from the Rust types"
	@echo "make control-plane  build kube-apiserver, kube-controller-manager, kubectl, etcd into the cache"
	@echo "make bench          run the benchmarks (by hand, not in CI)"

dev: control-plane
	$(CARGO) build --locked --bin infergate
	$(CARGO) run --locked --example dev-cluster

test: control-plane lint
	$(CARGO) test --locked

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --locked --no-deps --lib

crds:
	$(CARGO) run --locked -q -- crds > crds/infergate.dev.yaml
	$(CARGO) run --locked -q -- crds --reference > docs/api-reference.md

control-plane:
	@tests/support/build-control-plane.sh >/dev/null

bench:
	$(CARGO) bench --locked
