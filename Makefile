# Two commands for a newcomer: `make demo` and `make test` (both install into .venv/ first).
SHELL := /bin/bash
.DEFAULT_GOAL := help
PY := .venv/bin/python
STAGE ?= dev
STAGES := local dev staging prod
export PYTHONDONTWRITEBYTECODE := 1
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export CDK_DISABLE_VERSION_CHECK := 1

.PHONY: help install os-deps runtimes session-runtime egress-runtime demo test test-quick synth synth-all bench lint reliability client-layer client-definitions clean

help:
	@echo "make demo        install, synthesize every stage, run one agent turn on the local stack"
	@echo "make test        install and run the whole test suite (what CI runs; benchmarks as a quick smoke)"
	@echo "make test-quick  the tests that start no process (tests/unit, the docs checks): the inner loop"
	@echo "make session-runtime   the local sessions' pinned Python venv (.venv-session: numpy, pandas, ...)"
	@echo "make egress-runtime    the egress proxy's pinned Python venv (.venv-egress: mitmproxy, ...)"
	@echo "make synth STAGE=dev   synthesize one stage with the pinned CDK CLI"
	@echo "make bench       full benchmarks (JSON lines)"
	@echo "make lint        ruff format --check, ruff (E501 at 110 columns), mypy"
	@echo "make reliability full fault/fuzz/concurrency suite; writes tests/reliability/REPORT.md"
	@echo "make client-layer  the agent client (layers/client) as a Lambda layer zip: .build/sandbox-client-layer.zip"
	@echo "make client-definitions  rewrite the agent client's packaged copy of the tool definitions"

install: .venv/.installed node_modules/.installed

# Local interpreter sessions run under bubblewrap, PUBLIC ones with slirp4netns user-mode
# networking (docs/local-stack.md): without them the local interpreter refuses to start sessions. Installed
# here when this can be done (root with apt-get), else make stops and names the one command to run.
# SANDBOX_LOCAL_UNISOLATED=1 (sessions then run unisolated, with a warning on every start) lets
# make carry on without them.
OS_TOOLS := bwrap slirp4netns
OS_PACKAGES := bubblewrap slirp4netns
os-deps:
	@missing=""; for t in $(OS_TOOLS); do command -v $$t >/dev/null 2>&1 || missing="$$missing $$t"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing $(OS_PACKAGES) (isolation of local interpreter sessions; missing:$$missing)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(OS_PACKAGES) >/dev/null \
	    || { echo "apt-get could not install $(OS_PACKAGES)" >&2; exit 1; }; \
	elif [ "$${SANDBOX_LOCAL_UNISOLATED:-}" = 1 ]; then \
	  echo "WARNING: missing$$missing; SANDBOX_LOCAL_UNISOLATED=1: local sessions will run UNISOLATED" >&2; \
	else \
	  echo "local sessions need bubblewrap and slirp4netns (missing:$$missing); run:  sudo apt-get install -y $(OS_PACKAGES)" >&2; \
	  exit 1; \
	fi

.venv/.installed: pyproject.toml layers/client/pyproject.toml constraints.txt
	python3 -m venv .venv
	.venv/bin/pip install -q --disable-pip-version-check pip==25.3
	.venv/bin/pip install -q --disable-pip-version-check -c constraints.txt -e ./layers/client -e '.[dev]'
	@# Lambda code and the common layer are importable the way Lambda sees them (/var/task, /opt/python).
	@# (site-packages is looked up here, in the recipe: the venv does not exist when make parses this file)
	printf '%s\n' "$(CURDIR)/functions" "$(CURDIR)/layers/common/python" \
	  > "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/thinkwork_sandbox_paths.pth"
	touch $@

# The local interpreter's session runtime (docs/files.md): numpy, pandas, matplotlib (Agg), scipy,
# pyarrow, requests, openpyxl, every version pinned in one requirements file. Those pins need
# Python >= 3.12: the first python3.13/python3.12 that runs (on PATH, else pyenv's by full path:
# inactive shims are on PATH but do not run). Override with `make SESSION_BASE_PYTHON=/path/to/python3.12`.
SESSION_VENV := .venv-session
SESSION_REQUIREMENTS := infra/local/interpreter/session-requirements.txt
SESSION_BASE_PYTHON ?= $(shell for p in python3.13 python3.12 $(HOME)/.pyenv/versions/3.13*/bin/python3.13 \
  $(HOME)/.pyenv/versions/3.12*/bin/python3.12 /usr/local/bin/python3.13 /usr/local/bin/python3.12; do \
  "$$p" -c 'import sys; assert sys.version_info >= (3, 12)' >/dev/null 2>&1 && { command -v "$$p"; break; }; done)

session-runtime: $(SESSION_VENV)/.installed

$(SESSION_VENV)/.installed: $(SESSION_REQUIREMENTS)
	@test -n "$(SESSION_BASE_PYTHON)" || { echo "The session runtime needs Python >= 3.12 (python3.12 or python3.13); install one or set SESSION_BASE_PYTHON=/path/to/python3.12" >&2; exit 1; }
	rm -rf $(SESSION_VENV)
	$(SESSION_BASE_PYTHON) -m venv $(SESSION_VENV)
	$(SESSION_VENV)/bin/pip install -q --disable-pip-version-check --no-deps -r $(SESSION_REQUIREMENTS)
	$(SESSION_VENV)/bin/pip check
	@# Agg by default (no display in a sandbox): the venv's own default matplotlibrc says so
	@# (the worker's environment is cleared, so MPLBACKEND could not carry it).
	printf '\nbackend: Agg\n' >> "$$($(SESSION_VENV)/bin/python -c 'import matplotlib; print(matplotlib.get_data_path())')/matplotlibrc"
	touch $@

# The egress proxy's own venv (functions/egress_proxy): mitmproxy 12 and what the proxy imports of
# the common layer, every version pinned in one requirements file (the proxy image installs the
# same file). Built from the same Python >= 3.12 as the session runtime.
EGRESS_VENV := .venv-egress
EGRESS_REQUIREMENTS := functions/egress_proxy/requirements.txt

egress-runtime: $(EGRESS_VENV)/.installed

$(EGRESS_VENV)/.installed: $(EGRESS_REQUIREMENTS)
	@test -n "$(SESSION_BASE_PYTHON)" || { echo "The egress proxy needs Python >= 3.12 (python3.12 or python3.13); install one or set SESSION_BASE_PYTHON=/path/to/python3.12" >&2; exit 1; }
	rm -rf $(EGRESS_VENV)
	$(SESSION_BASE_PYTHON) -m venv $(EGRESS_VENV)
	$(EGRESS_VENV)/bin/pip install -q --disable-pip-version-check --no-deps -r $(EGRESS_REQUIREMENTS)
	$(EGRESS_VENV)/bin/pip check
	touch $@

# What the suites and the demo run on: the OS tools first, then the three virtual environments and
# node_modules, which are independent of each other and built side by side.
runtimes: os-deps
	@$(MAKE) --no-print-directory -j4 install session-runtime egress-runtime

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

synth: install
	npx cdk synth -c stage=$(STAGE) --quiet

synth-all: install
	@for s in $(STAGES); do \
	  echo "== synth stage $$s"; \
	  npx cdk synth -c stage=$$s --quiet -o cdk.out/$$s || exit 1; \
	  ls cdk.out/$$s/*.template.json | sed 's/^/   /'; \
	done

demo: runtimes synth-all
	$(PY) -m infra.demo

# Four workers on a 2-core machine: most of a test's time is spent waiting (interpreter sessions,
# Lambda workers, deadlines), so two workers leave the cores half idle and six finish later
# (docs/benchmarks.md, "The test suite").
test: runtimes
	$(PY) -m pytest -q -n 4 --dist loadfile

# The inner loop: the tests that start no process (tests/unit/conftest.py fails a unit test that
# does), CPU-bound, so one worker per core.
QUICK_TESTS := tests/unit tests/docs --ignore=tests/docs/test_readme_commands.py
test-quick: .venv/.installed
	$(PY) -m pytest -q -n 2 $(QUICK_TESTS)

bench: runtimes
	$(PY) -m pytest -q tests/benchmarks --bench-full -s

# --reliability-full also runs the property tests sized by tests/support/sizes.py at full size.
RELIABILITY_FULL_SIZED := tests/unit/redaction/test_prefilter.py
reliability: runtimes
	$(PY) -m pytest -q tests/reliability $(RELIABILITY_FULL_SIZED) --reliability-full

# The agent client as a Lambda layer for agent runtimes on Lambda (pip, no Docker; boto3 is the
# runtime's own).
client-layer: install
	$(PY) -m infra.cdk.client_layer

# The tool definitions the agent client packages (its MCP server lists them before dispatch can be
# reached): sandbox_common.tool_spec's with the default figures. tests/unit/client/test_contract.py
# checks the copy equals them; this target rewrites it after the definitions change.
CLIENT_DEFINITIONS := layers/client/sandbox_client/tool_definitions.json
client-definitions: install
	$(PY) -c 'import json; from sandbox_common.tool_spec import tool_definitions; print(json.dumps(tool_definitions(), indent=2, ensure_ascii=False))' > $(CLIENT_DEFINITIONS)

lint: install
	.venv/bin/ruff format --check .
	.venv/bin/ruff check .
	.venv/bin/mypy layers/common/python/sandbox_common layers/common/python/sandbox_session layers/client/sandbox_client functions infra

clean:
	rm -rf .venv $(SESSION_VENV) $(EGRESS_VENV) node_modules cdk.out .build .local
