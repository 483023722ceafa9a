"""The house holds its directions (docs/layout.md): which package may import which, read from the code's
own import statements (imports under `if TYPE_CHECKING:` are types only and do not count)."""

from __future__ import annotations

import ast
from collections import defaultdict

from tests.support import REPO

PACKAGE = REPO / "autotuner"
# What each package must never import, and why.
FORBIDDEN = {
    "engines": ({"advisors", "bench", "core", "launchers", "report", "stages", "tracking", "node"},
                "an engine adapter is pure: params -> launch spec; advice lives in advisors/"),
    "bench": ({"engines", "core", "advisors", "report", "tracking", "launchers"},
              "the load generator knows HTTP, not engines: it is handed their /metrics names"),
    "core": ({"tracking", "report", "executors", "compose", "cli"},
             "the driver is handed its callbacks, advisors and executor by the composition root"),
    "executors": ({"tracking", "report", "compose", "cli"},
                  "an executor runs launches where they go; the driver keeps the study's records"),
    "advisors": ({"core", "report", "tracking", "compose", "cli"},
                 "advisors read what the driver hands them (StudySoFar)"),
    "stages": ({"core", "report", "tracking", "compose", "cli"}, "stages run before the loop, below it"),
    "util": ({"engines", "bench", "core", "advisors", "config", "launchers", "report", "stages", "tracking", "executors",
              "node", "models", "workloads", "quality", "compose", "cli"}, "the ground floor"),
}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1].removesuffix(".py") if len(parts) > 1 else parts[0]


def package_imports() -> dict[str, dict[str, set[str]]]:
    """{package: {imported package: modules that import it}} over every module of autotuner/."""
    edges: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        source = _package(module)
        tree = ast.parse(path.read_text())
        typing_only = {id(n) for node in ast.walk(tree)
                       if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                       for n in ast.walk(node)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom) and node.module == "autotuner":
                targets = [f"autotuner.{a.name}" for a in node.names]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("autotuner."):
                targets = [node.module or ""]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("autotuner.")]
            else:
                continue
            for target in targets:
                if (imported := _package(target)) != source:
                    edges[source][imported].add(module)
    return edges


def test_no_package_imports_what_its_place_forbids():
    edges = package_imports()
    broken = [f"{package} imports {other} ({', '.join(sorted(edges[package][other]))}): {why}"
              for package, (forbidden, why) in FORBIDDEN.items() for other in sorted(forbidden & set(edges[package]))]
    assert not broken, "\n".join(broken)


def test_no_two_packages_import_each_other():
    edges = package_imports()
    cycles = [f"{a} <-> {b}: {sorted(edges[a][b])} | {sorted(edges[b][a])}"
              for a in sorted(edges) for b in sorted(edges[a]) if a < b and a in edges.get(b, {})]
    assert not cycles, "\n".join(cycles)


def test_the_check_sees_real_imports():
    """Not vacuous: the edges it reads include ones the code certainly has."""
    edges = package_imports()
    assert "engines" in edges["launchers"] and "tracking" in edges["compose"] and "core" in edges["tracking"]
