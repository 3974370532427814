# Patch series against vLLM v0.22.1: see README.md.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON  ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
SERIES  := $(PYTHON) tools/series.py
TREE    ?= tree
ARGS    ?=
FORCE   ?=
EACH    ?=

.PHONY: help base tree export check venv pytest hf-cache tiny-model test test-tooling \
        test-upstream test-series test-e2e test-bench test-scaleout demo demo-engine bench \
        scaleout clean

help:
	@echo "make demo      build the patched tree and run the main demo"
	@echo "make test      everything CI runs (tooling tests, check, upstream regression, series tests, e2e)"
	@echo "make tree      materialise build/base and build/tree (FORCE=1 to discard unexported work)"
	@echo "make export    write patches/ from build/tree (upstream..HEAD)"
	@echo "make check     series applies, round-trips, has good messages, is ruff-clean (EACH=1: tests per patch)"
	@echo "make pytest TREE=base|tree ARGS='...'   run pytest inside a tree"
	@echo "make bench     the full replay benchmark (build/bench/report.md)"
	@echo "make demo-engine TREE=base|tree   the real engine on CPU with the tiny multimodal model"
	@echo "make scaleout TREE=tree|PATH   TP=2 and E->PD on CPU (build/scaleout/summary.json)"

base:
	$(SERIES) base

tree:
	$(SERIES) tree $(if $(FORCE),--force)

export:
	$(SERIES) export

# The environment: created on demand, once (see tools/setup_venv.sh).
venv: $(VENV)/.stamp
$(VENV)/.stamp: tools/setup_venv.sh tools/requirements-extra.txt
	$(SERIES) base
	PYTHON=$(PYTHON) bash tools/setup_venv.sh

# Offline Hugging Face cache and the tiny multimodal model (generated locally).
# Both generators are idempotent and cheap when nothing changed.
hf-cache: $(VENV)/.stamp
	$(VPY) tools/make_hf_cache.py

tiny-model: $(VENV)/.stamp
	$(VPY) tools/make_tiny_mm_model.py

check: $(VENV)/.stamp
	$(VPY) tools/series.py check $(if $(EACH),--each)

pytest: $(VENV)/.stamp hf-cache
	$(VPY) tools/series.py tree $(if $(FORCE),--force) >/dev/null
	$(VPY) tools/series.py pytest --tree $(TREE) $(ARGS)

# ------------------------------------------------------------------ tests
test: test-tooling check test-upstream test-series test-e2e test-bench test-scaleout
	@echo "make test: all green"

test-tooling: $(VENV)/.stamp
	$(VPY) -m pytest -q tests/tooling

test-upstream: $(VENV)/.stamp hf-cache
	$(VPY) tools/series.py tree
	$(VPY) tools/regression.py

test-series: $(VENV)/.stamp hf-cache
	$(VPY) tools/series.py tree
	$(VPY) tools/series.py series-tests

test-e2e: $(VENV)/.stamp hf-cache tiny-model
	$(VPY) tools/series.py tree
	$(VPY) -m pytest -q tests/offline tests/e2e

test-bench: $(VENV)/.stamp hf-cache
	$(VPY) tools/series.py tree
	$(VPY) -m pytest -q tests/bench

# Reduced scale-out (TP=2 two-tier vs TP=1 default, E->PD happy path).
test-scaleout: $(VENV)/.stamp hf-cache tiny-model
	$(VPY) tools/series.py tree
	$(VPY) -m pytest -q tests/scaleout

# ------------------------------------------------------------------- jobs
demo: $(VENV)/.stamp hf-cache tiny-model
	$(VPY) tools/series.py tree
	$(VPY) bench/run.py --quick

# The real engine on CPU with the tiny multimodal model, from one tree.
demo-engine: $(VENV)/.stamp hf-cache tiny-model
	$(VPY) tools/series.py tree
	$(VPY) tools/demo_engine.py --tree $(TREE)

bench: $(VENV)/.stamp hf-cache
	$(VPY) tools/series.py tree
	$(VPY) bench/run.py

# Scale-out on CPU: TP=1/TP=2 x default/two-tier, and E->PD with real
# servers (happy path, slow storage, producer kill); build/scaleout/.
scaleout: $(VENV)/.stamp hf-cache tiny-model
	$(VPY) tools/series.py tree
	$(VPY) tools/scaleout --tree $(TREE)

clean:
	rm -rf build/base build/tree build/bench build/hf build/models
