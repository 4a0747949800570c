# The two set-up commands of the README: `make demo` and `make test`.
# Each builds what it needs from this repository's own files and nothing else.
PYTHON ?= python3
VENV := .venv
SERVE_VENV := .venv-serve

.PHONY: demo test lint serve-env

$(VENV)/.stamp: pyproject.toml requirements/dev.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -c requirements/dev.txt -e '.[dev]'
	touch $@

serve-env: $(VENV)/.stamp
	bash scripts/setup-serve.sh $(SERVE_VENV)

demo: $(VENV)/.stamp serve-env
	$(VENV)/bin/repro demo

lint: $(VENV)/.stamp
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

test: lint serve-env
	$(VENV)/bin/pytest
