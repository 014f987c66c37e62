# Two set-up commands (README): `make demo` runs the main job on the built-in zoo, `make test` runs the tests.
# Both create the virtual environment on first use. Torch comes from this machine's disk (torch==2.14.1).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.mixzoo-installed
OUT    ?= mixzoo-out
# What `make demo` sizes (the attack on every row is the full adaptive-apgd, unchanged): N evaluation images,
# N_CALIB calibration images for the MMAA that `mix` runs, CURVE_N images per point of the 16-point trade-off curve.
# The report's Wilson intervals widen with the smaller N; README "Install" states the cost of each size
# (benchmarks/demo_speed.json). FULL=1 is the full-size run: 200 images, 1,000 calibration images, curve on 100.
ifeq ($(FULL),1)
N       ?= 200
N_CALIB ?= 1000
CURVE_N ?= 100
else
N       ?= 60
N_CALIB ?= 300
CURVE_N ?= 50
endif
# The gradient half of the adaptive attack (transfer-based APGD-CE + APGD-T) keeps the demo short on a CPU;
# ATTACK=adaptive adds FAB-T and Square (App. B.2.1; about 1.9 s per image for a mixed model on 2 CPU cores).
ATTACK ?= adaptive-apgd
DEVICE ?= cpu
FMNIST := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz

.PHONY: demo sanity test test-fast lint data clean results docs

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.14.1 torchvision==0.29.1
	$(BIN)/python -m pip install -q -e '.[dev,docs,export]'
	@touch $(STAMP)

data:
	@test -f $(FMNIST) || { apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist; } \
	  || echo "could not install dataset-fashion-mnist (need root): pass --data-dir to mixzoo" >&2

demo: $(STAMP) data
	$(BIN)/mixzoo mix --n-calib $(N_CALIB) --device $(DEVICE) --out $(OUT)/card.toml
	$(BIN)/mixzoo bench $(OUT)/card.toml --attack $(ATTACK) --n $(N) --curve-n $(CURVE_N) --device $(DEVICE) \
	  --save-adversarial --out $(OUT)/bench
	$(BIN)/mixzoo verify $(OUT)/bench --device $(DEVICE)

# After `make demo`: the same attack over growing eps, checked (reuses the demo's rows at the nominal eps).
sanity: $(STAMP) data
	@test -f $(OUT)/card.toml || $(MAKE) demo
	$(BIN)/mixzoo sanity $(OUT)/card.toml --attack $(ATTACK) --n $(N) --device $(DEVICE) --out $(OUT)/sanity

# `make test-fast` while editing (no slow, subprocess or GPU tests); `make test` runs everything (CI: .ci/run) and
# prints the 15 slowest tests. Each test has a 300 s limit (pyproject.toml; a few long ones carry their own).
FAST_MARKERS := not slow and not subprocess and not gpu

test: $(STAMP) data
	$(BIN)/python -m pytest -q --durations=15

test-fast: $(STAMP) data
	$(BIN)/python -m pytest -q -m "$(FAST_MARKERS)"

# docs/results.md and the result blocks of README.md and docs/, from the committed reports (benchmarks/make_results.py)
results: $(STAMP)
	$(BIN)/python benchmarks/make_results.py

# the documentation site in site/ (strict: a broken link or reference fails)
docs: $(STAMP)
	$(BIN)/python -m mkdocs build --strict

lint: $(STAMP)
	$(BIN)/ruff check mixzoo plugins tests benchmarks examples

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache site
