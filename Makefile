# Two entry points (see README): `make demo` and `make test`.
# Both create .venv on first use. torch comes from the on-disk CPU wheel, which
# only pip finds, so it is installed first and pinned.
# `make vllm` installs vLLM into its own environment (.venv-vllm; its pins clash
# with ours); `make test` needs it for the tests marked `vllm`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ludic-installed
VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.ludic-vllm.json

.PHONY: demo test test-heavy preflight preflight-heavy install vllm docs lint-imports typecheck

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/ludic demo

$(VLLM_STAMP): $(STAMP) ludic_core/vllm/setup.py
	LUDIC_VLLM_VENV=$(VLLM_VENV) $(VENV)/bin/ludic serve --setup

vllm: $(VLLM_STAMP)

# TEST_WORKERS pytest-xdist workers (one per core here): most tests wait on servers and
# subprocesses, so two run side by side. --dist loadgroup keeps the tests of one expensive
# fixture on one worker (tests/conftest.py: the shared vLLM server, module-scoped stacks), and
# --no-loadscope-reorder hands work out in the order conftest.py puts first (the longest groups).
# One OpenMP thread per worker: two teams on two cores fight.
# Bytecode is written even where the environment sets PYTHONDONTWRITEBYTECODE (this machine kind
# does): every interpreter the suite starts (stages, ranks, servers, flows) compiled ludic_core,
# flows and tasks again, about 1 s each (`make test` 647 s without, 619 s with, one run each).
# --durations: the slowest tests in every CI log, to keep the default suite under 10 minutes.
TEST_WORKERS ?= 2
PYTEST := PYTHONDONTWRITEBYTECODE= OMP_NUM_THREADS=1 $(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder
test: preflight $(STAMP) $(VLLM_STAMP)
	$(PYTEST) --durations=15

# the long checks `make test` leaves out (marker `heavy`); .ci/run runs both
test-heavy: preflight-heavy $(STAMP) $(VLLM_STAMP)
	$(PYTEST) -m heavy --durations=10

# the system tools the tests need (redis-server, bwrap, ...; for test-heavy also chromium and PostgreSQL),
# checked first, before the installs: missing ones are installed with apt-get as root, else named with the
# one command that installs them, and make stops before pytest (tests/preflight.py; system python3,
# standard library only; LUDIC_PREFLIGHT_INSTALL=0 never installs)
preflight:
	@python3 tests/preflight.py

preflight-heavy:
	@python3 tests/preflight.py --heavy

# the docs site (mkdocs.yml, docs/): --strict, so a broken link, anchor or API reference fails;
# the site goes to build/site
DOCS_STAMP := $(VENV)/.ludic-docs-installed
$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# the layering of ludic_core ([tool.importlinter] in pyproject.toml): no package imports one above
# it, none imports prefect, flows, tasks or blocks; imports inside functions count
lint-imports: $(STAMP)
	$(VENV)/bin/lint-imports

# the type checker over ludic_core ([tool.mypy] in pyproject.toml: mypy's defaults plus
# check_untyped_defs, pydantic's plugin and unused ignores reported), zero errors
typecheck: $(STAMP)
	$(VENV)/bin/mypy
