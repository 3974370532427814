# Patch series against vLLM v0.22.1: see README.md.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON  ?= python3
# BASE: the vLLM release the series targets. Unset (or 0.22.1) is the primary
# base: patches/, build/base, build/tree, .venv. BASE=0.32.0 selects
# patches-0.32.0/ and its own build/*-0.32.0 and .venv-0.32.0 (README, "Two bases").
BASE    ?=
SFX     := $(if $(filter-out 0.22.1,$(BASE)),-$(BASE))
export SERIES_BASE := $(BASE)
VENV    := .venv$(SFX)
VPY     := $(VENV)/bin/python
SERIES  := $(PYTHON) tools/series.py
TREE    ?= tree
ARGS    ?=
FORCE   ?=
EACH    ?=
FROM    ?=
# The bases `make test` runs (BASE=... runs that one only).
TEST_BASES := $(if $(BASE),$(BASE),0.22.1 0.32.0)

.PHONY: help base tree export check venv pytest hf-cache tiny-model test test-tooling \
        test-base test-upstream test-series test-e2e test-bench test-scaleout demo \
        demo-engine bench scaleout clean

help:
	@echo "make demo      build the patched tree and run the main demo"
	@echo "make test      everything CI runs (tooling tests, check, upstream regression, series tests, e2e)"
	@echo "make tree      materialise build/base and build/tree (FORCE=1 to discard unexported work)"
	@echo "make export    write patches/ from build/tree (upstream..HEAD)"
	@echo "make check     series applies, round-trips, has good messages, is ruff-clean (EACH=1: tests per patch, FROM=N: from patch N on)"
	@echo "make pytest TREE=base|tree ARGS='...'   run pytest inside a tree"
	@echo "make bench     the full replay benchmark (build/bench/report.md)"
	@echo "make demo-engine TREE=base|tree   the real engine on CPU with the tiny multimodal model"
	@echo "make scaleout TREE=tree|PATH   TP=2 and E->PD on CPU (build/scaleout/summary.json)"
	@echo "BASE=0.32.0 on tree, export, check, pytest, test, demo, demo-engine, bench: the v0.32.0 series"

base:
	$(SERIES) base

tree:
	$(SERIES) tree $(if $(FORCE),--force)

export:
	$(SERIES) export

# The environment: created on demand, once (see tools/setup_venv.sh).
venv: $(VENV)/.stamp
$(VENV)/.stamp: tools/setup_venv.sh tools/requirements-extra$(SFX).txt \
                $(if $(SFX),tools/cpu_import_hook.py tools/torchvision_cpu_ops.py tools/vllm_cpu_slot_mapping.py)
	$(SERIES) base
	PYTHON=$(PYTHON) bash tools/setup_venv.sh

# Offline Hugging Face cache and the tiny multimodal model (generated locally).
# Both generators are idempotent and cheap when nothing changed.
hf-cache: $(VENV)/.stamp
	$(VPY) tools/make_hf_cache.py

tiny-model: $(VENV)/.stamp
	$(VPY) tools/make_tiny_mm_model.py

check: $(VENV)/.stamp
	$(VPY) tools/series.py check $(if $(EACH),--each) $(if $(FROM),--from $(FROM))

# Runs on build/tree as it stands (uncommitted or unexported work included),
# with a warning when it differs from patches/; builds it if missing.
pytest: $(VENV)/.stamp hf-cache
	$(VPY) tools/series.py tree --as-is $(if $(FORCE),--force) >/dev/null
	$(VPY) tools/series.py pytest --tree $(TREE) $(ARGS)

# ------------------------------------------------------------------ tests
# The tooling tests once, then the same steps on each base (both by default).
test: test-tooling
	@set -e; for b in $(TEST_BASES); do \
	  echo "=== make test: base $$b ==="; \
	  $(MAKE) --no-print-directory test-base BASE=$$b; \
	done
	@echo "make test: all green"

# Scale-out (issue 13) is a v0.22.1 feature: its reduced form runs on that base only.
test-base: check test-upstream test-series test-e2e test-bench $(if $(SFX),,test-scaleout)

# The tooling tests cover both bases' tools and run in the primary base's
# environment, whatever BASE is: the v0.32.0 one installs the import hooks
# they test, and BASE (in the environment, SERIES_BASE and MAKEFLAGS of the
# makes they run) would change what they build.
test-tooling:
	@$(MAKE) --no-print-directory BASE= .venv/.stamp
	env -u BASE -u MAKEFLAGS -u MFLAGS SERIES_BASE= .venv/bin/python -m pytest -q tests/tooling

test-upstream: $(VENV)/.stamp hf-cache
	$(VPY) tools/series.py tree
	$(VPY) tools/regression.py

test-series: $(VENV)/.stamp hf-cache
	$(VPY) tools/series.py tree
	$(VPY) tools/series.py series-tests

test-e2e: $(VENV)/.stamp hf-cache tiny-model
	$(VPY) tools/series.py tree
	$(VPY) tools/series.py own-tests e2e -q -rfE tests/offline tests/e2e

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
	rm -rf build/base$(SFX) build/tree$(SFX) build/bench$(SFX) build/hf$(SFX) build/models$(SFX)
