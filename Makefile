# Two entry points (see README): `make demo` and `make test`.
# Both create .venv on first use. torch comes from the on-disk CPU wheel, which
# only pip finds, so it is installed first and pinned.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ludic-installed

.PHONY: demo test install

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/ludic demo

test: $(STAMP)
	$(PY) -m pytest
