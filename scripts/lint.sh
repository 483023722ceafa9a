#!/usr/bin/env bash
# Static checks, run by scripts/test-all.sh before the tests: ruff check (lint) over the code, tests,
# benchmarks and scripts, and mypy over the package (settings in pyproject.toml). Any finding fails.
# Needs the venv of scripts/setup.sh (the test extra installs ruff and mypy). `ruff format` is not run:
# the tree keeps its own layout.
#   scripts/lint.sh
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m ruff check autotuner tests benchmarks scripts
.venv/bin/python -m mypy autotuner
