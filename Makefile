# The two set-up commands of the README: `make demo` and `make test`.
# Each builds what it needs from this repository's own files and nothing else.
PYTHON ?= python3
VENV := .venv

.PHONY: demo test lint serve-env browser second-python

$(VENV)/.stamp: pyproject.toml requirements/dev.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -c requirements/dev.txt -e '.[dev]'
	touch $@

# The serving environment and the tiny model, made by restoring the committed bundle: every
# locked wheel fetched through pip's configured index and checked by sha256, the model
# regenerated and checked. A second run checks and does nothing.
serve-env: $(VENV)/.stamp
	$(VENV)/bin/repro restore repro/tiny-cpu --key keys/example.pub

demo: $(VENV)/.stamp serve-env
	$(VENV)/bin/repro demo

lint: $(VENV)/.stamp
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The headless browser the report tests open each `repro report` page in (Debian's chromium),
# installed when absent.
browser:
	command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y --no-install-recommends chromium; }

# A second interpreter of the series beside the project's, of another release: the restore and
# launcher tests make the serving environment with it (Debian's python3.11), installed when absent.
second-python:
	test -x /usr/bin/python3.11 && /usr/bin/python3.11 -c 'import ensurepip, venv' 2>/dev/null || \
		{ apt-get update -qq && apt-get install -y --no-install-recommends python3.11 python3.11-venv; }

test: lint serve-env browser second-python
	$(VENV)/bin/pytest
