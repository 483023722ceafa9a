"""Print the requirements of pyproject.toml, one a line: the dependencies plus the named extras, with the
extras that name other extras (``autotuner[docker,plots]``) expanded. scripts/setup.sh installs these into
the shared dependency cache, without autotuner itself (each checkout installs its own code).

    python3 scripts/requirements.py [EXTRA ...]
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def requirements(project: dict, extras: list[str]) -> list[str]:
    """The project's dependencies and those of `extras`, self-references expanded, in order, once each."""
    name = project["name"]
    optional = project.get("optional-dependencies", {})
    out: list[str] = list(project.get("dependencies", []))
    todo, seen = list(extras), set()
    while todo:
        extra = todo.pop(0)
        if extra in seen:
            continue
        if extra not in optional:
            raise SystemExit(f"unknown extra {extra!r} (extras: {', '.join(optional)})")
        seen.add(extra)
        for req in optional[extra]:
            own = re.fullmatch(rf"{re.escape(name)}\[([^\]]*)\]", req.replace(" ", ""))
            if own:
                todo += own.group(1).split(",")
            else:
                out.append(req)
    return list(dict.fromkeys(out))


if __name__ == "__main__":
    print("\n".join(requirements(tomllib.loads(PYPROJECT.read_text())["project"], sys.argv[1:])))
