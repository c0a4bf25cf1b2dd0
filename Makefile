# Two commands for a fresh machine with only Python and make: `make demo` and `make test`.
# `make test-engines` runs the tests with real torchrun, Ray and Monarch in a venv of its own.
# `make test-pythons` runs the tests whose outcome depends on the Python and its pdb (marked
# each_python: the guide, pdb and keyboard tests, the scripts that drive pdb, those that read
# pdb's stop line, and the interrupts of threads, which take each Python's own way in) on each
# Python from 3.10 to 3.15 that is present (on PATH as python3.X, or installed by pyenv), each in
# a venv of its own, but those in SKIP_PYTHONS.
# The suite and the matrix run on TEST_WORKERS pytest workers (pytest-xdist; 0 runs them in one
# process): the tests mostly wait on processes and sockets, and each has its own ports, runtime
# directory and process marker, so they run side by side.
# `make test-dap` drives `monarch-pdb dap` with Microsoft's DAP test client (Node.js, npm ci).
# `make test-editor` drives real VS Code (code-server, in Debian's headless Chromium through
# Playwright) with the extension packed from editors/vscode, through the guide; code-server and
# Node.js 24 are installed from tests/editor's lockfiles into a cache outside the clone, and the
# screenshots of a failed step are kept in EDITOR_SCREENSHOTS.
# `make test-web` drives the live page (`monarch-pdb web`) in Debian's Chromium through the same
# Playwright: hover, click, the broker's news, and hostile rank names that must run nothing.
# Each test starts many Python processes, and each compiles what it imports (the stdlib of an
# unpacked CPython, this checkout) unless it may write bytecode caches, which some CI images
# forbid with PYTHONDONTWRITEBYTECODE: on 2 cores that doubled the matrix's 3.14 and 3.15.
unexport PYTHONDONTWRITEBYTECODE
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed-test
ENGINES_VENV := .venv-engines
ENGINES_BIN := $(ENGINES_VENV)/bin
ENGINES_INSTALLED := $(ENGINES_VENV)/.installed-engines
ENGINE_TESTS := tests/test_engines_torchrun.py tests/test_engines_join.py tests/test_engines_ray.py tests/test_engines_monarch.py \
	tests/test_engines_mpi.py tests/test_engines_slurm.py tests/test_two_hosts.py
PYTHONS := $(filter-out $(SKIP_PYTHONS),3.10 3.11 3.12 3.13 3.14 3.15)
PYTHONS_TESTS := -m each_python tests
TEST_WORKERS ?= 4
# torch's CPU build, exactly: an unpinned torch (or one Ray pulls in) is a multi-GB CUDA download.
# Where the CPU wheels are not on the default index: TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_CPU := torch==2.13.0+cpu

.PHONY: demo test test-engines test-pythons test-dap test-editor test-web docs lint bench bench-tree-large bench-monarch bench-hang clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(INSTALLED): $(BIN)/python setup.cfg pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test,mcp,web]'
	touch $@

demo: $(INSTALLED)
	$(BIN)/python examples/demo.py

test: $(INSTALLED)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

# `make docs` builds docs/ with mkdocs; --strict fails on a broken link or anchor, or a page left out of the nav.
DOCS_INSTALLED := $(VENV)/.installed-docs

$(DOCS_INSTALLED): $(INSTALLED)
	$(BIN)/python -m pip install --quiet -e '.[test,docs]'
	touch $@

docs: $(DOCS_INSTALLED)
	$(BIN)/mkdocs build --strict --quiet

# `make lint`: ruff's lint and format check on the whole tree, and mypy on the package as it
# installs (broker/ and client/ are monarch_pdb.broker and monarch_pdb.client, which mypy finds
# only in a tree laid out that way: a folder of links, rebuilt each run).
LINT_INSTALLED := $(VENV)/.installed-lint
TYPECHECK := .typecheck

$(LINT_INSTALLED): $(INSTALLED)
	$(BIN)/python -m pip install --quiet -e '.[test,lint]'
	touch $@

lint: $(LINT_INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	rm -rf $(TYPECHECK) && mkdir -p $(TYPECHECK)/monarch_pdb
	for f in monarch_pdb/*; do ln -s $(CURDIR)/$$f $(TYPECHECK)/monarch_pdb/; done
	ln -s $(CURDIR)/broker $(CURDIR)/client $(TYPECHECK)/monarch_pdb/
	cd $(TYPECHECK) && $(CURDIR)/$(BIN)/mypy --config-file $(CURDIR)/pyproject.toml --cache-dir $(CURDIR)/.mypy_cache -p monarch_pdb

DAP_TESTS := tests/dap

$(DAP_TESTS)/node_modules/.package-lock.json: $(DAP_TESTS)/package.json $(DAP_TESTS)/package-lock.json
	cd $(DAP_TESTS) && npm ci --no-audit --no-fund

test-dap: $(INSTALLED) $(DAP_TESTS)/node_modules/.package-lock.json
	cd $(DAP_TESTS) && MONARCH_PDB_BIN=$(CURDIR)/$(BIN) node --test

EDITOR_TESTS := tests/editor
EDITOR_INSTALLED := $(VENV)/.installed-editor
EDITOR_SCREENSHOTS ?= $(EDITOR_TESTS)/screenshots

$(EDITOR_INSTALLED): $(INSTALLED) $(EDITOR_TESTS)/requirements.txt
	$(BIN)/python -m pip install --quiet -r $(EDITOR_TESTS)/requirements.txt
	touch $@

test-editor: $(EDITOR_INSTALLED)
	rm -rf $(EDITOR_SCREENSHOTS)
	cache=$$($(EDITOR_TESTS)/install) && EDITOR_CACHE=$$cache EDITOR_SCREENSHOTS=$(CURDIR)/$(EDITOR_SCREENSHOTS) \
		$(BIN)/python -m pytest $(EDITOR_TESTS) $(PYTEST_ARGS)

test-web: $(EDITOR_INSTALLED)
	$(BIN)/python -m pytest tests/web $(PYTEST_ARGS)

$(ENGINES_BIN)/python:
	$(PYTHON) -m venv $(ENGINES_VENV)
	$(ENGINES_BIN)/python -m pip install --quiet --upgrade pip

$(ENGINES_INSTALLED): $(ENGINES_BIN)/python setup.cfg pyproject.toml
	echo '$(TORCH_CPU)' > $(ENGINES_VENV)/constraints.txt
	$(ENGINES_BIN)/python -m pip install --quiet $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) \
		-c $(ENGINES_VENV)/constraints.txt '$(TORCH_CPU)' -e '.[test,torch,ray,monarch]'
	touch $@

test-engines: $(ENGINES_INSTALLED)
	$(ENGINES_BIN)/python -m pytest $(ENGINE_TESTS) $(PYTEST_ARGS)

test-pythons:
	@for v in $(SKIP_PYTHONS); do echo "== Python $$v: skipped (SKIP_PYTHONS)"; done
	@missing=""; failed=""; \
	for v in $(PYTHONS); do \
		py=""; \
		for c in python$$v $$(ls -d "$$(pyenv root 2>/dev/null)"/versions/$$v.*/bin/python$$v 2>/dev/null); do \
			if "$$c" -c '' 2>/dev/null; then py=$$c; break; fi; \
		done; \
		if [ -z "$$py" ]; then missing="$$missing $$v"; echo "== Python $$v: not found, skipped"; continue; fi; \
		echo "== Python $$v: $$py"; \
		venv=.venv-py$$v; \
		if [ ! -f $$venv/.installed-test ] || [ setup.cfg -nt $$venv/.installed-test ]; then \
			"$$py" -m venv $$venv && $$venv/bin/python -m pip install --quiet --upgrade pip \
				&& $$venv/bin/python -m pip install --quiet -e '.[test]' && touch $$venv/.installed-test \
				|| { failed="$$failed $$v"; continue; }; \
		fi; \
		$$venv/bin/python -m pytest -p no:cacheprovider -n $(TEST_WORKERS) $(PYTHONS_TESTS) $(PYTEST_ARGS) || failed="$$failed $$v"; \
	done; \
	echo "== Pythons not found:$${missing:- none}; failed:$${failed:- none}"; \
	[ -z "$$failed" ]

bench: $(INSTALLED)
	$(BIN)/python benchmarks/run.py $(if $(QUICK),--quick) $(if $(SCALE),--scale)

# The broker tree at 131,072 ranks (16 host brokers) and 1,048,576 (64 host brokers) under a root,
# ranks emulated at the wire (benchmarks/wire_ranks.py); runs on 2 cores in under 16 GB, each row
# with its wall time here and its critical path (the root's CPU plus the slowest host broker's).
bench-tree-large: $(INSTALLED)
	$(BIN)/python benchmarks/run.py --tree-large

# The guide's program on real Monarch, under Monarch's debugger and under ours, side by side.
bench-monarch: $(ENGINES_INSTALLED)
	$(ENGINES_BIN)/python benchmarks/versus_monarch.py $(if $(QUICK),--quick)

# `make bench-hang`: a job that hangs at 64 processes (benchmarks/hang.py): stacks read from
# outside beside py-spy's own dumps, and collectives over 64 gloo ranks beside a peek; torch, so
# in the engines' venv.
bench-hang: $(ENGINES_INSTALLED)
	$(ENGINES_BIN)/python benchmarks/hang.py $(if $(QUICK),--quick)

clean:
	rm -rf $(VENV) $(ENGINES_VENV) .venv-py3.* build *.egg-info .pytest_cache
