# Two commands matter: `make prepare` and `make test`. Both create .venv when it is missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
CORPUS ?= sample_corpus
OUT    ?= out
RECIPE ?= default
WORKERS ?=
CORPORA ?=
STAMP  := $(VENV)/.installed
# MindFormers, for the tests that read our shards with its own dataset code (docs/use-with-trainers.md).
# Installed without its dependencies: 2.0.0 (the release for MindSpore 2.10) requires hyper-parallel,
# which no package index has, and its models; its dataset modules need only the `consumers` extra.
MINDFORMERS ?= mindformers==2.0.0
CONSUMERS_STAMP := $(VENV)/.consumers-$(subst =,,$(MINDFORMERS))

.PHONY: setup bytecode prepare train test test-fast bench lint clean

setup: $(STAMP) $(CONSUMERS_STAMP) bytecode

# The project's modules compiled once here, as pip does for a regular install: the driver and every
# worker of every run load them instead of compiling them again (each time, where the environment
# sets PYTHONDONTWRITEBYTECODE); a no-op when nothing changed.
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q -j 0 dataprep stages pretrain >/dev/null

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,ray,consumers]'
	$(BIN)/python -c "import fasttext; assert hasattr(fasttext, 'train_supervised')" 2>/dev/null \
	  || $(BIN)/python -m pip install --quiet --force-reinstall --no-deps fasttext-wheel==0.9.2
	touch $(STAMP)

$(CONSUMERS_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet --no-deps '$(MINDFORMERS)'
	touch $(CONSUMERS_STAMP)

prepare: setup
	$(BIN)/dataprep prepare $(CORPUS) --out $(OUT) --recipe $(RECIPE) $(if $(WORKERS),--workers $(WORKERS))

# Tiny LLaMA on OUT's shards (prepared from CORPUS first if OUT has no manifest): loss falls in minutes.
TRAIN_CONFIG ?= pretrain/configs/tiny.yaml
TRAIN_OUT    ?= output/$(basename $(notdir $(TRAIN_CONFIG)))
train: setup
	test -f $(OUT)/manifest.json || $(MAKE) prepare
	$(BIN)/python pretrain/run.py --config $(TRAIN_CONFIG) --data $(OUT) --output $(TRAIN_OUT) $(TRAIN_ARGS)

# Test files spread over pytest-xdist workers, one per core (TEST_JOBS=0: no workers, one process).
TEST_JOBS ?= auto
PYTEST = $(BIN)/python -m pytest -q $(if $(filter 0,$(TEST_JOBS)),,-n $(TEST_JOBS) --dist loadfile)
test: setup
	$(PYTEST)

# The fast tier: no test that runs the pipeline, trains, or starts Ray, msrun or a browser
# (marked e2e; tests/conftest.py fails an unmarked test that runs prepare), nor one marked slow.
test-fast: setup
	$(PYTEST) -m "not e2e and not slow"

bench: setup
	$(BIN)/python bench/run_all.py $(if $(CORPORA),--corpora $(CORPORA))

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(OUT)
