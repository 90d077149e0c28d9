# Two entry points that work on a fresh clone with nothing but Python 3.10+ installed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean browser-deps

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	# constraints.txt pins torch to the tested CPU build; without it pip may pull CUDA wheels.
	# pip compiles each file on one core; compileall after it uses every core (about 20 s less
	# here). A file that does not compile (some packages ship old examples) is no failure.
	$(BIN)/python -m pip install --quiet --no-compile -c constraints.txt -e '.[dev,notebook]'
	$(BIN)/python -m compileall -q -j 0 $(VENV)/lib > /dev/null || true
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/backprop-tutor $(ARGS)

# Most tests run on several workers at once; the few that time something need a quiet machine
# and run afterwards, alone.
WORKERS ?= 3
test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(WORKERS) -m "not serial" $(PYTEST_ARGS)
	$(BIN)/python -m pytest -q -m serial $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check tutor tests benchmarks
	$(BIN)/lint-imports

bench: $(STAMP)
	$(BIN)/python benchmarks/check_latency.py
	$(BIN)/python benchmarks/startup.py
	$(BIN)/python benchmarks/train_speed.py
	$(BIN)/python benchmarks/train_speed.py --pack gpt

# The browser test drives the served tutor in the system's Chromium (skipped without one).
browser-deps: $(STAMP)
	apt-get install -y chromium || sudo apt-get install -y chromium
	$(BIN)/python -m pip install --quiet -c constraints.txt playwright

clean:
	rm -rf $(VENV) build dist *.egg-info
