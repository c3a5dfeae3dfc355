# Two entry points for a fresh machine (see README): `make demo` and `make test`.
# Both create .venv/ when it is missing and resolve the JVM jars into the cache.
PYTHON ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed
# Toxiproxy, the fault-injecting TCP proxy the network-fault tests put between the job and
# its broker and object store: built from its Go module (Go is all it needs).
TOXIPROXY := .tools/toxiproxy-server
TOXIPROXY_MODULE := github.com/Shopify/toxiproxy/v2/cmd/server@v2.5.0
# fake-gcs-server, the GCS API emulator the gs:// warehouse test runs against.
FAKE_GCS := .tools/fake-gcs-server
FAKE_GCS_MODULE := github.com/fsouza/fake-gcs-server@v1.56.1
# Debian's Chromium, which the console's browser tests drive with Playwright (browser downloads
# are not possible here, so Playwright launches this one: executable_path=/usr/bin/chromium).
CHROMIUM := /usr/bin/chromium
# gofakes3, the S3 API server the years benchmark stands on (moto's one Python thread cost it as
# much CPU as the job); the S3 integration tests keep moto. Built with one patch: its in-memory
# backend walked the whole bucket for every listing, so a long run's store slowed as it grew.
GOFAKES3 := .tools/gofakes3
GOFAKES3_MODULE := github.com/johannesboyne/gofakes3@v1.2.0
GOFAKES3_PATCH := bench/harness/gofakes3/list-from-prefix.patch
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
TOOLS := $(TOXIPROXY) $(FAKE_GCS) $(GOFAKES3) $(CHROMIUM)

.PHONY: demo check test nightly unit lint audit tools bench-smoke docs docs-build hooks

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e '.[test]'
	$(VENV)/bin/compactor jars > /dev/null
	touch $@

$(TOXIPROXY):
	mkdir -p .tools
	GOBIN=$(abspath .tools) go install $(TOXIPROXY_MODULE)
	mv .tools/server $@

$(FAKE_GCS):
	mkdir -p .tools
	GOBIN=$(abspath .tools) go install $(FAKE_GCS_MODULE)

$(GOFAKES3): $(GOFAKES3_PATCH)
	rm -rf .tools/gofakes3-src && mkdir -p .tools
	cp -r "$$(cd .tools && go mod download -json $(GOFAKES3_MODULE) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p')" .tools/gofakes3-src
	chmod -R u+w .tools/gofakes3-src
	cd .tools/gofakes3-src && GIT_CEILING_DIRECTORIES=$(abspath .tools) git apply $(abspath $(GOFAKES3_PATCH))
	cd .tools/gofakes3-src && go build -o ../gofakes3 ./cmd/gofakes3
	rm -rf .tools/gofakes3-src

$(CHROMIUM):
	$(SUDO) apt-get install -y -q chromium || ($(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium)

# the test servers built from Go modules, and the browser (CI builds them beside the Python install: make -j2)
tools: $(TOOLS)

demo: $(STAMP)
	$(VENV)/bin/compactor demo

# the commit-msg hook that checks a message's form, and the template `git commit` opens (CONTRIBUTING.md)
hooks:
	git config core.hooksPath ops/git/hooks
	git config commit.template .gitmessage

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The tests that need no Kafka, Spark or object store (tests/conftest.py marks any test that asks
# for one as integration), the layout test among them; the nightly ones are left to `nightly`.
unit: $(STAMP)
	$(VENV)/bin/python -m pytest -q -n 2 -m "not integration and not nightly"

# The edit loop: ruff, mypy and the unit tests, about a minute on two cores. `make test` before a push.
check: lint unit

# Known vulnerabilities in the resolved environment, from PyPI's advisory data (pip-audit). An
# accepted finding goes in .pip-audit-ignore, its id first and the reason after it. --strict: a
# package that could not be checked fails the run, so an unreachable advisory service is never a pass.
audit: $(STAMP)
	$(VENV)/bin/pip-audit --strict --skip-editable --progress-spinner off \
		$$(sed -n 's/^\([A-Za-z][A-Za-z0-9-]*\).*/--ignore-vuln \1/p' .pip-audit-ignore)

# The object stores' connectors are resolved once, before the test workers would each fetch them.
# Three workers, each with its own Spark, sharing one broker (tests/conftest.py): on two cores the
# e2e tests spend much of their time waiting (job start-ups, sessions), and a third worker fills it
# (27 -> 22 min).
# tests/conftest.py sorts the slow folders first; xdist's load scheduling would hand each worker
# a first block of a quarter of its share (about 100 tests), so one worker got every e2e test:
# `--maxschedchunk 2` hands them out two at a time instead. Worksteal gave each worker a block and
# stole the e2e tests last, a longer tail (37 -> 49 min).
test: lint $(TOOLS)
	$(VENV)/bin/compactor jars --s3 --gcs --spark-only > /dev/null
	$(VENV)/bin/python -m pytest -q -n 3 --maxschedchunk 2 -m "not nightly" --durations=25

# Tests kept out of CI for now (see the marker's reason in each): run them nightly.
nightly: $(STAMP) $(TOOLS)
	$(VENV)/bin/python -m pytest -q -m nightly

# The benchmark suite's --quick run: checks every script still runs, not the figures.
bench-smoke: $(STAMP)
	$(VENV)/bin/python -m pip install -q -e '.[bench]'
	$(VENV)/bin/python bench/run_all.py --quick --timeout 300

# The documentation site (docs/, mkdocs.yml): `docs` serves it with live reload on
# http://127.0.0.1:8000, `docs-build` builds it into site/ and fails on any warning.
docs: $(STAMP)
	$(VENV)/bin/python -m pip install -q -e '.[docs]'
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

docs-build: $(STAMP)
	$(VENV)/bin/python -m pip install -q -e '.[docs]'
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict
