"""docs/configuration.md is the models' own reference: every field of both files is in it with a
description, and the file says what `autotuner.config.reference` writes today."""

from __future__ import annotations

import re
from pathlib import Path

from autotuner.config import ExperimentConfig, SearchSpaceConfig
from autotuner.config.reference import COMMAND, markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_the_reference_in_docs_is_the_one_the_models_write():
    assert DOC.read_text() == markdown(), f"docs/configuration.md is stale: run `{COMMAND}`"


def test_every_field_of_every_section_is_described():
    text = markdown()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    cells = [re.split(r"(?<!\\)\|", row)[1:-1] for row in rows]  # field, type, default, description
    assert all(len(c) == 4 for c in cells), [c for c in cells if len(c) != 4]
    undescribed = [c[0].strip() for c in cells if not c[3].strip()]
    assert not undescribed, f"fields without a description: {undescribed}"
    for field in (*ExperimentConfig.model_fields, *SearchSpaceConfig.model_fields):
        assert f"| `{field}` |" in text
    # a nested section and a shared shape are reached, with their limits and defaults
    assert "### load.search" in text and "| list of integer (exactly 2) | none |" in text
    assert "Also the shape of `workload.output_len`, `workload.sessions.turns`." in text
    assert "| `load` | [section](#load) | `{max_concurrency: [16]}` |" in text
