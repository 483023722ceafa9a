"""Reading experiment and search-space files: YAML in, validated models out, or one ConfigError line that
names the file, the field and what was expected. Never starts, creates or writes anything."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from autotuner.config._base import ConfigError
from autotuner.config.experiment import Experiment, ExperimentConfig, FieldError
from autotuner.config.params import SearchSpaceConfig


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as e:  # a directory, no permission, an I/O error
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not a UTF-8 text file (byte 0x{e.object[e.start]:02x} at offset {e.start}); "
                          "experiment and search-space files are YAML") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}: invalid YAML{where}: {problem}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of fields at the top level, got {type(data).__name__}")
    return data


def _one_line(path: Path, err: ValidationError, model: type[BaseModel]) -> ConfigError:
    """The first pydantic error as `file: field 'a.b': message (got X)`."""
    errors = err.errors(include_url=False)
    first = errors[0]
    # A union (a number or a mapping) reports each branch: for a mapping, the mapping's own error says more.
    if first["type"] in ("int_type", "int_parsing", "float_type", "float_parsing") and isinstance(first["input"], dict):
        first = next((e for e in errors[1:] if e["loc"][:len(first["loc"]) - 1] == first["loc"][:-1]), first)
    # Discriminated unions put the tag into the location; users never wrote it, so drop it.
    tags = {"int", "float", "categorical", "bool", "LengthsConfig", "constrained-int"}
    loc = [str(p) for p in first["loc"] if not (isinstance(p, str) and (p in tags or p.startswith("function-")))]
    if loc[:1] == ["advisors"] and len(loc) > 2:  # an advisor entry's tag: "name", or "llm" (then written twice)
        loc = loc[:2] + loc[3:]
    field = ".".join(loc) or "(top level)"
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, FieldError):
        field = cause.field
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        msg = "unknown field"
    # A whole mapping as "got" says nothing the message does not: show only plain values.
    plain = first["type"] not in ("missing", "extra_forbidden") and not isinstance(first["input"], dict)
    got = f" (got {first['input']!r})" if plain else ""
    if len(got) > 80:
        got = got[:77] + "...)"
    return ConfigError(f"{path}: field '{field}': {msg}{got}")


def load_search_space(path: Path) -> SearchSpaceConfig:
    data = _read_yaml(path)
    try:
        return SearchSpaceConfig.model_validate(data)
    except ValidationError as e:
        raise _one_line(path, e, SearchSpaceConfig) from None


def load_experiment(path: Path | str) -> Experiment:
    """Read and validate an experiment file and the search space it names. Raises ConfigError."""
    path = Path(path)
    data = _read_yaml(path)
    try:
        cfg = ExperimentConfig.model_validate(data)
    except ValidationError as e:
        raise _one_line(path, e, ExperimentConfig) from None

    base = path.parent
    space_path = (base / cfg.search_space).resolve()
    if not space_path.exists():
        raise ConfigError(f"{path}: field 'search_space': file not found: {space_path}")
    space = load_search_space(space_path)
    if space.engine != cfg.engine:
        raise ConfigError(
            f"{space_path}: field 'engine': search space is for '{space.engine}' but {path} uses '{cfg.engine}'"
        )
    model_path = (base / cfg.model.path).resolve()
    cfg.workload.check_file(base, cfg.load.max_steps)
    return Experiment(source=path, config=cfg, space=space, model_path=model_path, space_path=space_path)
