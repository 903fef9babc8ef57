# Targets run from the repo root, as root for setup/demo/test (`sudo make test`): setup.sh
# installs packages and starts Open vSwitch. Under sudo PATH is secure_path; nothing here
# relies on the caller's PATH beyond make and bash.
SHELL := /bin/bash
VENV ?= $(CURDIR)/.venv
PY := $(VENV)/bin/python

.PHONY: setup setup-test demo test test-fast lint clean box-test

setup:
	VENV="$(VENV)" bash scripts/setup.sh

# The tests also need a headless browser (chromium) to open the run report.
setup-test:
	VENV="$(VENV)" ARTB_TEST_TOOLS=1 bash scripts/setup.sh

demo: setup
	$(PY) -m emulation.run --topo bcube

# ARTB_REQUIRE_EMULATION=1: emulation tests fail (not skip) when root, Mininet or OVS is missing.
# Both test targets lint first and run the docstring examples of the pure packages too.
DOCTESTS := --doctest-modules tests topology traffic simulator agent emulation scripts

test: setup-test
	$(VENV)/bin/ruff check .
	export ARTB_REQUIRE_EMULATION=1; $(PY) -m pytest $(DOCTESTS)

test-fast:
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -m "not emulation and not slow" $(DOCTESTS)

# Boot the classroom box (Debian 12 under qemu, through the project's Vagrantfile) and run the
# provisioning, the pure tests, lab 1 and emulated AllReduces inside it; tens of minutes, so not
# part of `make test`. Needs only Debian's python3 on the host; see scripts/box_test.py --help.
box-test:
	python3 scripts/box_test.py

lint:
	$(VENV)/bin/ruff check .

clean:
	rm -rf .pytest_cache .ruff_cache build dist *.egg-info
	find . -path ./.venv -prune -o -path ./.git -prune -o -type d -name __pycache__ -print0 \
		| xargs -0 rm -rf
