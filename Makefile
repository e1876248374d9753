# The README's two commands: `make up` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TESTBED := PYTHONPATH=testbed $(PY) -m devboxes_testbed

.PHONY: dist images up down test test-unit test-slow check-clean screenshots lint testbed venv system-packages node-deps cassettes generated openapi chart-schema labels labextension clean

# package.json holds the version that the installed metadata reports.
$(STAMP): pyproject.toml jupyter_ext/package.json
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	SKIP_JUPYTER_BUILDER=1 $(PY) -m pip install --quiet -e '.[dev,controller,jupyter]'
	@touch $@

venv: $(STAMP)

testbed: $(STAMP) system-packages
	$(TESTBED) build

# Debian packages the tests use: Chromium for the browser tests (never a downloaded
# browser build), shellcheck for the workspace scripts, OpenSSH's server, which
# stands in for a box in the devbox kernel tests, and zsh for the CLI's completion.
# runc's build needs libseccomp's headers (its seccomp filters; built on every machine),
# the real node mmdebstrap (the workspace image) and iptables (kube-proxy and the pod
# network). skopeo pushes the
# release's images to a registry, as the operator guide does.
SYSTEM_PACKAGES := chromium shellcheck openssh-server zsh libseccomp-dev mmdebstrap iptables skopeo
# Without root they cannot be installed: one line says so, and what needs them is skipped
# (the real node, the browser tests) with the reason, or fails under CI.
system-packages:
	@dpkg-query -W -f='$${Status}\n' $(SYSTEM_PACKAGES) 2>/dev/null | grep -c '^install ok installed' | grep -qx $(words $(SYSTEM_PACKAGES)) || { \
	  if [ "$$(id -u)" != 0 ]; then echo "not root: cannot install the Debian packages $(SYSTEM_PACKAGES); what needs a missing one is skipped"; \
	  else apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SYSTEM_PACKAGES) >/dev/null; fi; }

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The extension's npm packages, for the labextension build and the check that the
# TypeScript types still match the API (needs Node.js and npm).
NODE_DEPS := jupyter_ext/node_modules/.package-lock.json
$(NODE_DEPS): jupyter_ext/package.json jupyter_ext/package-lock.json
	cd jupyter_ext && npm ci --no-audit --no-fund

# The proxy of the testbed's JupyterHub (configurable-http-proxy), for the hub tests and
# `make up`.
HUB_DEPS := testbed/hub/node_modules/.package-lock.json
$(HUB_DEPS): testbed/hub/package.json testbed/hub/package-lock.json
	cd testbed/hub && npm ci --no-audit --no-fund

node-deps: $(NODE_DEPS) $(HUB_DEPS)

# A line per failure, error and skip with its reason, and the 30 slowest tests, on every
# run. Under CI (CI=true) a skip is a failure (tests/ci_strict.py).
PYTEST := $(VENV)/bin/pytest -q -p no:cacheprovider -rfEs --durations=30
# Tests that need neither a testbed nor a browser nor the package index.
UNIT := not testbed and not browser and not release

# Two workers: most of these tests wait on sockets and subprocesses, not on the CPU.
test-unit: $(STAMP) system-packages node-deps
	$(PYTEST) -n 2 -m '$(UNIT)'

# Three workers, each with its own testbed: most of these tests wait on the cluster, not on
# the CPU, so a third worker shortens the run even on two cores. A file's tests stay on one
# worker, so a file's shared controller starts once.
test-slow: $(STAMP) testbed system-packages node-deps
	$(PYTEST) -n 3 --dist loadfile -m 'not ($(UNIT))'

# The unit tests first, for fast feedback; then everything else; then a check that the
# suite left the checkout as it found it.
test: $(STAMP) testbed system-packages node-deps lint
	@git status --porcelain > $(VENV)/.status-before
	$(MAKE) --no-print-directory test-unit
	$(MAKE) --no-print-directory test-slow
	@$(MAKE) --no-print-directory check-clean

check-clean:
	@git status --porcelain | diff -u $(VENV)/.status-before - >/dev/null || { \
	  echo "make test changed the checkout:"; git status --porcelain | diff $(VENV)/.status-before - | grep '^[<>]'; exit 1; }

up: $(STAMP) testbed node-deps
	$(TESTBED) up

down: $(STAMP)
	$(TESTBED) down


# Re-record the SDK's cassettes from the controller on a fresh testbed.
cassettes: $(STAMP) testbed
	$(VENV)/bin/pytest -q -p no:cacheprovider tests/sdk -m cassette --record-mode=rewrite

# Every generated file of the project, written afresh from its source: the three targets
# below (the chart's values schema needs the venv alone; the others Node.js and npm).
# tests/test_generated_files.py fails, naming the file and this target, until a committed
# one follows a change of its source.
generated: openapi labels chart-schema

# The API's OpenAPI document as the code defines it, and the server extension's own for
# its watch route, with the TypeScript types generated from each.
openapi: $(STAMP) $(NODE_DEPS)
	$(PY) -c 'import json, sys; from devboxes_controller.web.api import contract; json.dump(contract(), sys.stdout, indent=1); print()' > jupyter_ext/openapi.json
	$(PY) -c 'import json, sys; from devboxes_jupyter.models import watch_contract; json.dump(watch_contract(), sys.stdout, indent=1); print()' > jupyter_ext/watch-openapi.json
	cd jupyter_ext && npm run --silent openapi && npm run --silent openapi:watch

# The dashboard's display words, generated from the Lab's (jupyter_ext/src/words.ts).
labels: $(NODE_DEPS)
	cd jupyter_ext && npm run --silent labels

# The chart's values schema as the controller's settings models define it, with the chart's
# own values on top.
chart-schema: $(STAMP)
	$(PY) -c 'import sys; from devboxes_controller.config.chart_schema import text; sys.stdout.write(text())' > charts/devboxes/values.schema.json

# The pictures in docs/images, taken afresh by the browser tests.
screenshots: $(STAMP) testbed system-packages node-deps
	$(PYTEST) -m browser tests/jupyter/test_browser.py tests/jupyter/test_devbox_kernel_release.py \
		tests/dashboard/test_dashboard_browser.py tests/dashboard/test_usage_page_browser.py
	cp test-artifacts/jupyter/jupyter-*.png test-artifacts/dashboard/dashboard-*.png docs/images/

# Rebuild the prebuilt JupyterLab extension shipped in the wheel (needs Node.js).
labextension: $(STAMP) $(NODE_DEPS)
	cd jupyter_ext && PATH=$(CURDIR)/$(VENV)/bin:$$PATH npm run build

# The release's Python artifacts: the wheel and sdist, in dist/.
dist: $(STAMP)
	SKIP_JUPYTER_BUILDER=1 $(PY) -m build --outdir dist .

# The release's images, as OCI archives in dist/images tagged with the project's version:
# the controller (Debian's Python with the wheel) and the workspace (Debian packages and
# workspace/). Push them with skopeo (docs/operator-guide.md).
images: $(STAMP) system-packages
	$(TESTBED) images --out dist/images

clean:
	rm -rf $(VENV) .devboxes .mypy_cache .ruff_cache
