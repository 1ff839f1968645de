# Two commands for a newcomer: `make demo` and `make test` (both install into .venv/ first).
SHELL := /bin/bash
.DEFAULT_GOAL := help
PY := .venv/bin/python
STAGE ?= dev
STAGES := local dev staging prod
export PYTHONDONTWRITEBYTECODE := 1
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export CDK_DISABLE_VERSION_CHECK := 1

.PHONY: help install demo test synth synth-all bench lint reliability clean

help:
	@echo "make demo        install, synthesize every stage, run one agent turn on the local stack"
	@echo "make test        install and run the test suite (benchmarks as a quick smoke)"
	@echo "make synth STAGE=dev   synthesize one stage with the pinned CDK CLI"
	@echo "make bench       full benchmarks (JSON lines)"
	@echo "make lint        ruff + mypy"
	@echo "make reliability full fault/fuzz/concurrency suite; writes tests/reliability/REPORT.md"

install: .venv/.installed node_modules/.installed

.venv/.installed: pyproject.toml constraints.txt
	python3 -m venv .venv
	.venv/bin/pip install -q --disable-pip-version-check pip==25.3
	.venv/bin/pip install -q --disable-pip-version-check -c constraints.txt -e '.[dev]'
	@# Lambda code and the common layer are importable the way Lambda sees them (/var/task, /opt/python).
	@# (site-packages is looked up here, in the recipe: the venv does not exist when make parses this file)
	printf '%s\n' "$(CURDIR)/functions" "$(CURDIR)/layers/common/python" \
	  > "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/thinkwork_sandbox_paths.pth"
	touch $@

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

demo: install synth-all
	$(PY) -m infra.local.demo

test: install
	$(PY) -m pytest -q -n 2 --dist loadfile

bench: install
	$(PY) -m pytest -q tests/benchmarks --bench-full -s

reliability: install
	$(PY) -m pytest -q tests/reliability --reliability-full

lint: install
	.venv/bin/ruff check .
	.venv/bin/mypy layers/common/python/sandbox_common functions infra

clean:
	rm -rf .venv node_modules cdk.out .build .local
