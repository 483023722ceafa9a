"""The configuration reference, docs/configuration.md, written from the models themselves so it cannot
drift from what the loader accepts: every field with its type, limits, default and description.

    python -m autotuner.config.reference > docs/configuration.md

A test compares the file with `markdown()` and fails when it is stale. Pure: reads no file.
"""

from __future__ import annotations

import re
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from autotuner.config._base import flow_yaml
from autotuner.config.experiment import ExperimentConfig
from autotuner.config.params import SearchSpaceConfig

COMMAND = "python -m autotuner.config.reference > docs/configuration.md"
_SCALARS = {int: "integer", float: "number", str: "text", bool: "true/false", Path: "path"}


def markdown() -> str:
    """The whole reference: the experiment file's sections, then the search-space file's."""
    lines = ["# Configuration reference", "",
             "Generated from the models in `autotuner/config/`, so it says what the loader accepts; a test fails",
             f"when it is stale (`{COMMAND}`). Each file with comments:",
             "[experiment-files.md](experiment-files.md). Relative paths are relative to the file that names them;",
             "an unknown field is an error.", ""]
    for title, root in (("The experiment file", ExperimentConfig), ("The search-space file", SearchSpaceConfig)):
        lines += [f"## {title}", ""]
        places: dict[type[BaseModel], list[str]] = {}
        for path, model in _places(root, ""):
            places.setdefault(model, []).append(path)
        names = {model: paths[0] for model, paths in places.items()}
        for model, paths in places.items():
            lines += _section(paths, model, names)
    return "\n".join(lines).rstrip() + "\n"


def _places(model: type[BaseModel], path: str, seen: frozenset[type[BaseModel]] = frozenset()
            ) -> Iterator[tuple[str, type[BaseModel]]]:
    """Every path where a section's model appears, depth first ("" for the file itself)."""
    yield path, model
    if model in seen:
        return
    for name, field in model.model_fields.items():
        bare = get_origin(_bare(field.annotation))
        for inner in _models(field.annotation):
            key = f"{path}.{name}" if path else name
            if bare is dict:
                key += f".<name> ({_literal_of(inner)})" if _literal_of(inner) else ".<name>"
            yield from _places(inner, key + ("[]" if bare is list else ""), seen | {model})


def _section(paths: list[str], model: type[BaseModel], names: dict[type[BaseModel], str]) -> list[str]:
    lines = [f"### {paths[0] or 'top level'}", ""]
    if doc := _doc(model):
        lines += [doc, ""]
    if len(paths) > 1:
        lines += ["Also the shape of " + ", ".join(f"`{p}`" for p in paths[1:]) + ".", ""]
    lines += ["| field | type | default | what it does |", "|---|---|---|---|"]
    own = model.__annotations__
    for name, field in sorted(model.model_fields.items(), key=lambda kv: kv[0] not in own):  # its own first
        what = field.description or next((_doc(m) for m in _models(field.annotation)), "")
        lines.append(f"| `{name}` | {_type_text(field.annotation, names)}{_limits(field.metadata)} | "
                     f"{_default(field)} | {_cell(what)} |")
    return [*lines, ""]


def _doc(model: type[BaseModel]) -> str:
    """The first paragraph of a model's docstring, on one line."""
    return " ".join((model.__doc__ or "").split("\n\n")[0].split())


def _type_text(annotation: Any, names: dict[type[BaseModel], str]) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _type_text(args[0], names) + _limits(args[1:])
    if origin in (Union, types.UnionType):
        return " or ".join(_type_text(a, names) for a in args if a is not type(None))
    if origin is Literal:
        return "one of " + ", ".join(f"`{v}`" for v in args) if len(args) > 1 else f"`{args[0]}`"
    if origin is list:
        return f"list of {_type_text(args[0], names)}"
    if origin is dict:
        return f"map of {_type_text(args[0], names)} to {_type_text(args[1], names)}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        path = names[annotation]
        return f"[{_literal_of(annotation) or 'section'}](#{_anchor(path)})"
    return _SCALARS.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _limits(metadata: Any) -> str:
    # Read by attribute, as pydantic's own constraint objects are shaped (annotated_types' Gt, Ge, MinLen...).
    words = []
    for m in metadata:
        for bound, sign in (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤")):
            if getattr(m, bound, None) is not None:
                words.append(f"{sign} {getattr(m, bound)}")
        if (getattr(m, "min_length", None) or 0) > 1:
            words.append(f"at least {m.min_length}")
        if getattr(m, "max_length", None) is not None:
            words.append(f"at most {m.max_length}")
        if getattr(m, "pattern", None):
            words.append(f"matching `{m.pattern}`")
    if len(words) == 2 and words[0] == words[1].replace("at most", "at least"):
        words = [words[0].replace("at least", "exactly")]
    return f" ({', '.join(words)})" if words else ""


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    elif field.is_required():
        return "required"
    else:
        value = field.default
    if value is None:
        return "none"
    if isinstance(value, BaseModel):
        changed = value.model_dump(mode="json", exclude_defaults=True)
        return f"`{flow_yaml(changed)}`" if changed else "its defaults"
    if isinstance(value, Path):
        value = str(value)
    return f"`{flow_yaml(value)}`"


def _models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in get_args(annotation) for m in _models(a)]


def _bare(annotation: Any) -> Any:
    """The type under Optional and Annotated (list[...] | None -> list[...])."""
    while True:
        origin, args = get_origin(annotation), get_args(annotation)
        if origin is Annotated:
            annotation = args[0]
        elif origin in (Union, types.UnionType) and len([a for a in args if a is not type(None)]) == 1:
            annotation = next(a for a in args if a is not type(None))
        else:
            return annotation


def _literal_of(model: type[BaseModel]) -> str | None:
    """A search-space param type's name (its `type` literal), e.g. 'int'."""
    field = model.model_fields.get("type")
    return get_args(field.annotation)[0] if field is not None and get_origin(field.annotation) is Literal else None


def _anchor(heading: str) -> str:
    return re.sub(r"[^a-z0-9 _-]", "", heading.lower()).replace(" ", "-")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


if __name__ == "__main__":
    print(markdown(), end="")
