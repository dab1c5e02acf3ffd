# Everything runs against real, local redis-server processes that the tests,
# the demo and the benchmarks start themselves on free loopback ports.
CARGO ?= cargo

.PHONY: all test behaviour models check lint fmt demo demo-cluster demo-on-nodes bench docker-demo docker-demo-cluster docker-demo-postgres ensure-redis ensure-valkey ensure-postgres metrics

all: lint test

ensure-redis:
	@scripts/ensure-redis.sh

# The pinned valkey-server (fetched once, checked, cached): tests run Valkey
# beside Redis.
ensure-valkey:
	@scripts/ensure-valkey.sh >/dev/null

# PostgreSQL's server binaries: the fenced-writes tests start a server of
# their own.
ensure-postgres:
	@scripts/ensure-postgres.sh

## The features the behaviour tests are built with, besides the `cluster`
## the CLI asks for: one debug build of the workspace serves make check,
## both passes on other servers and the TLS, PostgreSQL and metrics tests.
TEST_FEATURES := $(shell cat scripts/test-features)

## make test: the behaviour tests (make check, then again on cluster members
## and on Valkey, then the builds with other features) and, beside them,
## the model checks (about 27 minutes on 2 cores); a summary per stage. The
## two groups run at once (the behaviour tests mostly wait on their nodes'
## TTLs, the model checks keep one core busy); each command's output is
## printed whole when it ends.
test:
	@$(MAKE) --no-print-directory -j2 --output-sync=line behaviour models
	@echo "[$$(date +%T)] make test: every stage passed"

## make behaviour: make check, then the behaviour tests again on other
## servers, then what only other builds show.
## AFTER_BEHAVIOUR (CI: the docker examples): a command run once they have
## passed, beside the model checks, but never beside the behaviour tests,
## whose timeouts a loaded machine must not stretch.
AFTER_BEHAVIOUR ?=
behaviour: check
	@echo "[$$(date +%T)] the behaviour tests again, every member a one-shard Redis Cluster"
	@echo "(tests/nodes-only.txt lists those left out, with why):"
	scripts/test-on-cluster-members.sh
	@echo "[$$(date +%T)] the library's behaviour tests again, every node a Valkey server"
	@echo "(Valkey clusters included; the script says what it leaves out):"
	scripts/test-on-valkey.sh
	@echo "[$$(date +%T)] without the features: a redis+cluster:// member and rediss:// are refused in words:"
	$(CARGO) test -q -p redquorum --lib urls
	$(CARGO) test -q -p redquorum --test lock tls_urls_never_panic
	@echo "[$$(date +%T)] without the feature, the metrics facade is not a dependency:"
	@! $(CARGO) tree -q -e normal -p redquorum | grep -E ' metrics v'
	@echo "[$$(date +%T)] stress test, optimised build (request ordering under load):"
	$(CARGO) test -q --release --test lock busy_clients_never_contend_with_themselves
	@echo "[$$(date +%T)] make demo with REDQUORUM_NODES set leaves those nodes untouched:"
	scripts/demo-leaves-given-nodes-alone.sh
	@echo "[$$(date +%T)] the metrics example serves the Prometheus text format:"
	scripts/metrics-example-serves.sh
	@echo "[$$(date +%T)] behaviour tests: done"
	$(if $(AFTER_BEHAVIOUR),@echo "[$$(date +%T)] beside the model checks still running: $(AFTER_BEHAVIOUR)")
	$(AFTER_BEHAVIOUR)

## make models: the model checks, optimised build (every interleaving within
## the stated bounds; to see each check's states and counterexamples, run the
## cargo command below with --nocapture after its --).
models:
	@echo "[$$(date +%T)] model checking, optimised build:"
	$(CARGO) test -q --release --lib model -- --test-threads 1
	@echo "[$$(date +%T)] model checking: done"

## make check: the everyday subset: unit, integration, CLI and doc tests
## (TLS, PostgreSQL and metrics included), no model checks (about 7 minutes
## on 2 cores); failures and a summary only.
check: ensure-redis ensure-valkey ensure-postgres
	@if $(CARGO) nextest --version >/dev/null 2>&1; then \
		$(CARGO) nextest run --workspace --features $(TEST_FEATURES) --lib --bins --tests \
			-E 'not test(model)' --status-level fail --final-status-level slow; \
	else \
		$(CARGO) test -q --workspace --features $(TEST_FEATURES) --lib --bins --tests -- --skip model; \
	fi
	$(CARGO) test -q --workspace --features $(TEST_FEATURES) --doc

## make lint: formatting, clippy with warnings as errors, docs with warnings as errors.
lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --all-features -- -D warnings
	RUSTDOCFLAGS=-Dwarnings $(CARGO) doc --workspace --no-deps --all-features

fmt:
	$(CARGO) fmt --all

## make demo: five local nodes of its own (whatever REDQUORUM_NODES says);
## instances contending for a lock, then issuing serial numbers.
## One build, with cargo's progress: the demo and the CLI that declares the
## nodes new (`redquorum init`).
DEMO_RUN = $(CARGO) run -q --release -p redquorum-demo --bin
DEMO_BUILD = $(CARGO) build --release -p redquorum-demo -p redquorum-cli
DEMO_CLI = REDQUORUM_CLI="$${CARGO_TARGET_DIR:-target}/release/redquorum"
demo: ensure-redis
	$(DEMO_BUILD)
	$(DEMO_CLI) scripts/with-nodes.sh 5 sh -c '$(DEMO_RUN) demo && $(DEMO_RUN) serial'

## make demo-cluster: the same on three local Redis Clusters of three shards
## each (every member a cluster), with a plain node for the demo's counter.
demo-cluster: ensure-redis
	$(DEMO_BUILD)
	$(DEMO_CLI) scripts/with-clusters.sh 3 3 sh -c '$(DEMO_RUN) demo && $(DEMO_RUN) serial'

## make demo-on-nodes: the same against the nodes in REDQUORUM_NODES; it writes
## the key demo:counter on the first node and issues DEMO... serial numbers.
demo-on-nodes:
	@test -n "$$REDQUORUM_NODES" || { echo "set REDQUORUM_NODES=redis://host:port,..." >&2; exit 2; }
	$(CARGO) build --release -p redquorum-demo
	@echo "running against $$REDQUORUM_NODES: writes demo:counter, issues DEMO... numbers"
	DEMO_SERIAL_PREFIX=DEMO $(DEMO_RUN) demo && DEMO_SERIAL_PREFIX=DEMO $(DEMO_RUN) serial

## make bench: ours vs rslock and redlock, serial numbers vs INCR, semaphore and election; five local nodes.
bench: ensure-redis
	$(CARGO) bench --bench lock
	$(CARGO) bench --bench serial
	$(CARGO) bench --bench coordinate

## make metrics: the Prometheus example on five local nodes of its own:
## serves /metrics while a small workload runs, then prints one scrape.
metrics: ensure-redis
	scripts/with-nodes.sh 5 $(CARGO) run -q --release --features metrics --example metrics

## make docker-demo: the five-node docker example (see docker/README.md).
docker-demo:
	@docker/ensure-docker.sh
	docker/run-demo.sh

## make docker-demo-cluster: the same on five members that are Redis Clusters
## of three shards, with shard failovers (see docker/README.md).
docker-demo-cluster:
	@docker/ensure-docker.sh
	docker/run-demo.sh cluster

## make docker-demo-postgres: five nodes and a PostgreSQL; the workers' balance
## writes are fenced, the chaos pauses the lock's holder past its validity
## (FENCE=off: the same unfenced, which must lose an update; see docker/README.md).
docker-demo-postgres:
	@docker/ensure-docker.sh
	docker/run-demo.sh postgres
