"""Study plots: Optuna's own visualizations, written as HTML (and PNG at the end of a run).

Plots: optimization history, parameter importances, parallel coordinates, slice plots, and the Pareto
front for multi-objective studies. Files, under one folder:

- `<plot>.html`: each plot on its own, sharing one `plotly.min.js` beside them (works offline);
- `study.html`: every plot in one self-contained page (what MLflow's artifact view can show);
- `<plot>.png`: images via kaleido (plotly's exporter, which drives a local Chrome/Chromium); where
  that cannot start, via Optuna's matplotlib backend; `png=False` skips them.

Cost (2 shared cores, 30 trials): the history, parallel-coordinate and slice figures take ~0.2 s
together; importances (fANOVA) 0.5-1.5 s; kaleido's PNGs ~5 s (one browser start for all of them),
matplotlib's ~0.8 s. So the tuner redraws the cheap plots after every trial, importances every
`IMPORTANCE_EVERY` trials, and everything with PNGs once at the end (`write_plots(..., full=True)`).

Never raises for a plot that cannot be drawn (too few trials, a single value): it is left out and its
reason kept in `PlotResult.skipped`.
"""

from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.trial import TrialState

from autotuner.util.extras import MissingExtra, require
from autotuner.util.files import replacing, write_atomically

IMPORTANCE_EVERY = 5
log = logging.getLogger(__name__)


@dataclass
class PlotResult:
    files: list[Path] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    png_backend: str | None = None


def _figures(study: optuna.Study, importances: bool) -> tuple[dict[str, object], dict[str, str], dict[str, float]]:
    import optuna.visualization as vis

    complete = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    wanted: dict[str, object] = {"optimization_history": vis.plot_optimization_history}
    multi = len(study.directions) > 1
    if multi:
        wanted = {"pareto_front": vis.plot_pareto_front}
    varied = [n for n in {p for t in complete for p in t.params}
              if len({repr(t.params.get(n)) for t in complete}) > 1]
    if varied:
        wanted["parallel_coordinate"] = vis.plot_parallel_coordinate
        wanted["slice"] = vis.plot_slice
        if importances and len(complete) >= 3:
            wanted["param_importances"] = vis.plot_param_importances
    figs, skipped, seconds = {}, {}, {}
    if not varied:
        skipped["parallel_coordinate"] = skipped["slice"] = "no param has varied among complete trials yet"
    for name, fn in wanted.items():
        t = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                kwargs = _target(study, name, multi)
                figs[name] = fn(study, **kwargs)  # type: ignore[operator]  # optuna plot functions, typed loosely
        except Exception as e:  # noqa: BLE001 - a plot that cannot be drawn is a note, not a failure
            skipped[name] = f"{type(e).__name__}: {e}"
        seconds[name] = time.perf_counter() - t
    return figs, skipped, seconds


def _target(study: optuna.Study, plot: str, multi: bool) -> dict[str, object]:
    """What a plot shows: the first objective (several objectives: what picks each trial's level)."""
    names = study.metric_names or []
    if plot == "pareto_front":
        return {}
    if multi:  # Optuna's single-value plots need a target with several objectives
        return {"target": lambda t: t.values[0], "target_name": names[0] if names else "objective 0"}
    return {"target_name": names[0]} if names and plot != "param_importances" else {}


def write_plots(study: optuna.Study, folder: Path, *, importances: bool = True, png: bool = False) -> PlotResult:
    """Draw the study's plots into `folder` (see the module docstring); returns what was written."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        require("plotly", "plots", "drawing the study's plots")  # Optuna draws every plot with plotly
    except MissingExtra as e:
        return PlotResult(skipped={"all": str(e)})
    figs, skipped, seconds = _figures(study, importances)
    result = PlotResult(skipped=skipped, seconds=seconds)
    if not figs:
        return result
    t = time.perf_counter()
    for name, fig in figs.items():
        path = folder / f"{name}.html"
        with replacing(path) as tmp:
            fig.write_html(str(tmp), include_plotlyjs="directory", full_html=True)  # type: ignore[attr-defined]  # plotly Figure, untyped here
        result.files.append(path)
    result.files.append(_combined(study, figs, folder / "study.html"))
    result.seconds["html"] = time.perf_counter() - t
    if png:
        t = time.perf_counter()
        written, backend = _pngs(study, figs, folder)
        result.files += written
        result.png_backend = backend
        result.seconds["png"] = time.perf_counter() - t
    return result


def _combined(study: optuna.Study, figs: dict[str, object], path: Path) -> Path:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>study {study.study_name}</title></head>"
             f"<body style='font-family:sans-serif'><h1>Study {study.study_name}</h1>"]
    first = True
    for name, fig in figs.items():
        parts.append(f"<h2>{name.replace('_', ' ')}</h2>")
        parts.append(fig.to_html(full_html=False, include_plotlyjs=first))  # type: ignore[attr-defined]  # plotly Figure
        first = False
    parts.append("</body></html>")
    write_atomically(path, "\n".join(parts))
    return path


def _pngs(study: optuna.Study, figs: dict[str, object], folder: Path) -> tuple[list[Path], str | None]:
    paths = [folder / f"{name}.png" for name in figs]
    try:
        import plotly.io as pio

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pio.write_images(list(figs.values()), [str(p) for p in paths], width=1000, height=600)
        return paths, "kaleido"
    except Exception as e:  # noqa: BLE001 - kaleido missing, or no Chrome/Chromium it can start
        log.info("kaleido could not write PNGs (%s); using matplotlib", e)
    return _matplotlib_pngs(study, list(figs), folder), "matplotlib"


def _matplotlib_pngs(study: optuna.Study, names: list[str], folder: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
        import optuna.visualization.matplotlib as vm
    except ImportError:
        return []
    written = []
    for name in names:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ax = getattr(vm, f"plot_{name}")(study)
            fig = ax.figure if hasattr(ax, "figure") else ax.flat[0].figure
            path = folder / f"{name}.png"
            fig.savefig(path, dpi=100, bbox_inches="tight")
            plt.close(fig)
            written.append(path)
        except Exception:  # noqa: BLE001 - a PNG that cannot be drawn is left out
            continue
    return written
