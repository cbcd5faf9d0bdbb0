PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-browser lint clean

install: $(STAMP)

# torch is installed first and pinned: any other torch requirement pulls gigabytes of CUDA wheels.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev,export,serve,browser,slurm,hf,clean]'
	touch $(STAMP)

demo: install
	$(BIN)/python scripts/make_toy_data.py --out data/toy
	$(BIN)/seq2seq train --config configs/demo.yaml --run-dir runs/demo
	$(BIN)/seq2seq evaluate --run runs/demo --src data/toy/test.src --ref data/toy/test.tgt

# One pytest worker per CPU (pytest-xdist); tests/conftest.py gives each its own CPUs, and a
# worker with nothing left takes tests from the other's queue. The package is compiled first:
# where Python writes no bytecode (PYTHONDONTWRITEBYTECODE), each process would compile it.
test: install
	$(BIN)/python -m compileall -q seq2seq
	$(BIN)/pytest -rs -n auto --dist worksteal

# The page of `seq2seq serve` in headless Chromium (Debian's package; root or sudo installs it).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
test-browser: install
	command -v chromium >/dev/null || { $(SUDO) apt-get update && $(SUDO) apt-get install -y chromium; }
	$(BIN)/pytest -rs tests/test_serve_browser.py

lint: install
	$(BIN)/ruff check seq2seq tests scripts
	$(BIN)/ruff format --check seq2seq tests scripts

clean:
	rm -rf $(VENV) runs data/toy test-artifacts
