"""pyproject.toml says what is true: every package the code imports is declared (by default or in an
extra), and a feature whose extra is missing says which extra to install, in one line."""

from __future__ import annotations

import ast
import importlib.metadata
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _imported_top_level_modules() -> set[str]:
    names = set()
    for path in (REPO / "autotuner").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"autotuner"}


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def test_every_imported_package_is_declared():
    declared = {_norm(Requirement(r).name) for r in PROJECT["dependencies"]}
    declared |= {_norm(Requirement(r).name) for reqs in PROJECT["optional-dependencies"].values() for r in reqs}
    dists = importlib.metadata.packages_distributions()
    undeclared = {m: dists.get(m) for m in _imported_top_level_modules()
                  if not {_norm(d) for d in dists.get(m, [m])} & declared}
    assert undeclared == {}


def test_the_test_extra_names_the_other_extras_instead_of_copying_them():
    extras = PROJECT["optional-dependencies"]
    copied = {_norm(Requirement(r).name) for r in extras["test"]} - {"pytest", "autotuner"}
    assert copied == set()
    assert "autotuner[all]" in extras["test"]
    # all: every extra a user may want; lint (ruff, mypy) is for the test run only, so test names it apart;
    # aiconfigurator (851 MB of pandas, bokeh and its databases) goes into a venv of its own, never this one
    assert set(Requirement(extras["all"][0]).extras) == set(extras) - {"all", "test", "lint", "aiconfigurator"}
    assert "autotuner[lint]" in extras["test"]


def _without(module: str, code: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run `code` in a python where `module` cannot be imported, as where its extra is not installed."""
    prelude = f"import sys; sys.modules[{module!r}] = None\n"
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-c", prelude + code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_make_model_without_the_models_extra_is_one_line_naming_it(tmp_path):
    out = _without("gguf", "from autotuner.cli import main; sys.argv = ['autotuner', 'make-model', '--out', "
                           "'m.gguf', '--size', 'tiny']; main()", tmp_path)
    assert out.returncode == 2
    assert out.stderr.splitlines()[-1] == (
        "error: writing a GGUF model needs the 'models' extra (module gguf is not installed): "
        "pip install 'autotuner[models]'")
    assert not (tmp_path / "m.gguf").exists()


def test_docker_launcher_without_the_docker_extra_is_one_line_naming_it(tmp_path):
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    (tmp_path / "exp.yaml").write_text(f"name: x\nengine: llamacpp\nlauncher: docker\ndocker: {{image: img}}\n"
                                       f"model: {{path: m.gguf}}\nsearch_space: {REPO}/search_spaces/llamacpp.yaml\n")
    out = _without("docker", "from autotuner.cli import main; sys.argv = ['autotuner', 'run', '--experiment', "
                             "'exp.yaml', '--trials', '1']; main()", tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines()[-1].endswith(
        "field 'launcher': launcher 'docker' needs the 'docker' extra (module docker is not installed): "
        "pip install 'autotuner[docker]'")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.yaml", "m.gguf"]  # nothing started or written


def test_plots_without_the_plots_extra_are_skipped_with_the_extra_named(tmp_path):
    out = _without("plotly", "import optuna; from pathlib import Path; from autotuner.report.plots import write_plots\n"
                             "optuna.logging.set_verbosity(optuna.logging.WARNING)\n"
                             "s = optuna.create_study(); s.optimize(lambda t: t.suggest_float('x', 0, 1), 3)\n"
                             "r = write_plots(s, Path('plots')); print(r.files, r.skipped['all'])", tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ("[] drawing the study's plots needs the 'plots' extra "
                                  "(module plotly is not installed): pip install 'autotuner[plots]'")
