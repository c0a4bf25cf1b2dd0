# Two commands for a fresh machine with only Python and make: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed-test

.PHONY: demo test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(INSTALLED): $(BIN)/python setup.cfg pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

demo: $(INSTALLED)
	$(BIN)/python examples/demo.py

test: $(INSTALLED)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(INSTALLED)
	$(BIN)/python benchmarks/run.py $(if $(QUICK),--quick) $(if $(SCALE),--scale)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
