# Two commands do everything on a fresh machine:
#   make lab   - set up .venv and open the companion in JupyterLab (localhost, token auth)
#   make test  - set up .venv and run every test (library, notebooks under nbval)
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# CPU build by default where pip finds it; GPU users: make setup TORCH_SPEC='torch==2.13.0' TORCH_ARGS='--index-url https://download.pytorch.org/whl/cu128'
TORCH_SPEC ?= torch==2.13.0
TORCH_ARGS ?=

.PHONY: setup lab test figures errata bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_ARGS) "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

setup: $(VENV)/.installed

lab: setup
	$(VENV)/bin/jupyter lab --ip=127.0.0.1 --ServerApp.root_dir=. chapters/00_index.ipynb

test: setup
	$(PY) -m pytest

bench: setup
	$(PY) benchmarks/sweep_vectorised.py

clean:
	rm -rf $(VENV) build
