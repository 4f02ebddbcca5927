# graphpass developer entry points. `make demo` and `make test` set everything up
# on a fresh machine (Python 3.10+ with venv): nothing needs installing by hand.

PYTHON      ?= python3
VENV        := .venv
ORT_VENV    := .venv-ort-training
BIN         := $(VENV)/bin
STAMP       := $(VENV)/.graphpass-installed
ORT_STAMP   := $(ORT_VENV)/.graphpass-installed
OPTIMUM_VENV := .venv-optimum
OPTIMUM_STAMP := $(OPTIMUM_VENV)/.graphpass-installed
PIP_FLAGS   := --disable-pip-version-check --quiet
# torch 2.13.0 is the local CPU wheel; any other torch spec downloads gigabytes.
TORCH       := torch==2.13.0
ORT_TRAINING := onnxruntime-training==1.19.2
# Hugging Face's exporter for the zoo's Optimum modes; it needs transformers<4.58.
OPTIMUM     := optimum-onnx[onnxruntime]==0.1.0 optimum==2.1.0 transformers==4.57.6
PYTEST_ARGS ?=

.PHONY: help demo test lint typecheck docs bench zoo clean venv ort-venv optimum-venv

help:
	@echo "make demo   - set up and run the demo on the bundled examples"
	@echo "make test   - set up and run lint, type checks, docs build and the whole test suite"
	@echo "make bench  - run the benchmarks (slow) and print ratios against peer tools"
	@echo "make zoo    - judge every zoo architecture x export mode against torch, and the sweep of"
	@echo "              74 more architectures (docs/benchmarks.md)"
	@echo "make docs   - build the documentation (mkdocs --strict)"

venv: $(STAMP)

# pip is upgraded once, when the venv is made (editable installs need a recent pip);
# a change to pyproject.toml only reinstalls the project.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || { $(PYTHON) -m venv $(VENV) && $(BIN)/pip install $(PIP_FLAGS) --upgrade pip; }
	$(BIN)/pip install $(PIP_FLAGS) $(TORCH)
	$(BIN)/pip install $(PIP_FLAGS) -e '.[dev,torch,zoo,data,plot]'
	touch $@

# A second environment for onnxruntime-training: it ships its own `onnxruntime`
# module (which would clash with onnxruntime) and imports torch. Tests that compare
# our verdicts with it are skipped, with the reason shown, if it cannot be built.
ort-venv: $(ORT_STAMP)

$(ORT_STAMP): pyproject.toml
	@( test -x $(ORT_VENV)/bin/python || \
	   { $(PYTHON) -m venv $(ORT_VENV) && $(ORT_VENV)/bin/pip install $(PIP_FLAGS) --upgrade pip; } ) && \
	$(ORT_VENV)/bin/pip install $(PIP_FLAGS) $(TORCH) $(ORT_TRAINING) && \
	$(ORT_VENV)/bin/pip install $(PIP_FLAGS) -e . && \
	$(ORT_VENV)/bin/python -c "import onnxruntime.training.artifacts" && \
	touch $@ || echo "WARNING: could not build $(ORT_VENV); onnxruntime-training tests will be skipped"

# A third environment for Hugging Face Optimum (`optimum-cli export onnx`), which needs
# transformers<4.58 (the main venv has 5.x): the zoo's `optimum*` modes export and compute
# their torch reference there. Tests that need it are skipped, with the reason shown, if it
# cannot be built.
optimum-venv: $(OPTIMUM_STAMP)

$(OPTIMUM_STAMP): Makefile
	@( test -x $(OPTIMUM_VENV)/bin/python || \
	   { $(PYTHON) -m venv $(OPTIMUM_VENV) && $(OPTIMUM_VENV)/bin/pip install $(PIP_FLAGS) --upgrade pip; } ) && \
	$(OPTIMUM_VENV)/bin/pip install $(PIP_FLAGS) $(TORCH) && \
	$(OPTIMUM_VENV)/bin/pip install $(PIP_FLAGS) $(OPTIMUM) && \
	$(OPTIMUM_VENV)/bin/optimum-cli export onnx --help > /dev/null && \
	touch $@ || echo "WARNING: could not build $(OPTIMUM_VENV); the zoo's Optimum modes will be skipped"

demo: $(STAMP)
	$(BIN)/python examples/demo.py

lint: $(STAMP)
	$(BIN)/ruff check core passes plugins tests benchmarks examples
	@# The package lives in core/ but is imported as graphpass: check it under that name.
	mkdir -p build/mypy && ln -sfn ../../core build/mypy/graphpass
	MYPYPATH=build/mypy $(BIN)/mypy -p graphpass

typecheck: lint

docs: $(STAMP)
	$(BIN)/mkdocs build --strict --quiet --site-dir build/site

test: $(STAMP) ort-venv optimum-venv
	$(MAKE) --no-print-directory lint docs
	$(BIN)/python -m pytest -n 2 $(PYTEST_ARGS)

bench: $(STAMP) ort-venv optimum-venv
	$(BIN)/python benchmarks/run_all.py

# Exports are cached under $(GRAPHPASS_ZOO_CACHE) (default tests/.cache/zoo).
zoo: $(STAMP) ort-venv optimum-venv
	$(BIN)/python benchmarks/zoo.py --jobs 2
	$(BIN)/python benchmarks/zoo_own_trainer.py --jobs 2
	$(BIN)/python benchmarks/zoo_torch_module.py
	$(BIN)/python benchmarks/zoo_torch_module.py --sweep
	$(BIN)/python benchmarks/zoo_sweep.py --jobs 2

clean:
	rm -rf $(VENV) $(ORT_VENV) $(OPTIMUM_VENV) build site .pytest_cache .mypy_cache .ruff_cache demo-output
