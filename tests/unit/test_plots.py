"""Optuna's plots of a synthetic study: HTML always, PNG on request, nothing raised for thin studies."""

from __future__ import annotations

import optuna

from autotuner.report import plots


def make_study(n: int) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    s = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    s.optimize(lambda t: t.suggest_int("parallel", 1, 32) * 10 + t.suggest_int("threads", 1, 2), n_trials=n)
    return s


def test_html_plots_share_one_plotly_and_study_html_is_self_contained(tmp_path):
    result = plots.write_plots(make_study(6), tmp_path, importances=False)
    names = {p.name for p in result.files}
    assert {"optimization_history.html", "parallel_coordinate.html", "slice.html", "study.html"} <= names
    assert (tmp_path / "plotly.min.js").is_file()
    assert "plotly.min.js" in (tmp_path / "slice.html").read_text()
    assert (tmp_path / "study.html").stat().st_size > 1_000_000  # plotly.js inlined once
    assert result.seconds["html"] < 10


def test_png_falls_back_when_kaleido_cannot_start(tmp_path, monkeypatch):
    import plotly.io as pio

    def no_browser(*a, **k):
        raise RuntimeError("no Chrome")

    monkeypatch.setattr(pio, "write_images", no_browser)
    result = plots.write_plots(make_study(4), tmp_path, importances=False, png=True)
    assert result.png_backend == "matplotlib"
    assert (tmp_path / "optimization_history.png").read_bytes()[:4] == b"\x89PNG"


def test_a_study_without_varied_params_skips_what_cannot_be_drawn(tmp_path):
    s = optuna.create_study()
    s.enqueue_trial({})
    s.optimize(lambda t: 1.0, n_trials=1)
    result = plots.write_plots(s, tmp_path)
    assert [p.name for p in result.files] == ["optimization_history.html", "study.html"]
    assert "slice" in result.skipped
