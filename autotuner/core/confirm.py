"""The confirmation round (one verb of the study, as Optuna's Study delegates to its `_tell`): the top
configurations and the baseline launched again, interleaved, `confirm.repeats` times each; the winner
rule (winner.py) reads what it measured. Resumable: a later run, or another worker, continues the round.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotuner.core import record, winner
from autotuner.core.progress import Progress
from autotuner.core.study import verdict as study_verdict

if TYPE_CHECKING:
    from autotuner.core.driver import StudyDriver


def run(driver: StudyDriver, progress: Progress) -> None:
    """Launch the top configurations and the baseline again, interleaved (A, B, baseline, A, B,
    baseline, ...) so drift hits all alike, `repeats` times each (resumable; see `winner`)."""
    c = driver.cfg.confirm
    if driver.cfg.objective.multi:
        # The answer is a front, not one winner: a best median of one metric would not re-rank it.
        progress.note("confirm: skipped for a multi-objective study (the Pareto front is the answer); "
                      "to re-measure a member, enqueue its params in a study of its own")
        return
    noise = driver.noise()
    order = candidates(driver, c.top_k, c.near, noise)
    if len(order) < 2:
        progress.note("confirm: skipped (fewer than two configurations completed: nothing to compare)")
        return
    driver.study.set_user_attr(record.CONFIRMATION_ORDER, order)
    views = {n: record.view(driver.study.trials[n]) for n in order}
    tuned = [n for n in order if not views[n].baseline]
    if len(tuned) > c.top_k:
        progress.note(f"confirm: {', '.join(f'#{n}' for n in tuned[c.top_k:])} join the round: a first value within "
                      f"the noise ({noise:.0%}) of the best's does not rule a config out")
    total = len(order) * c.repeats
    while True:
        done = record.confirmation(driver.study.user_attrs)  # other workers may have added to it
        # A failed launch makes a config flaky: it cannot win, so it is not measured again.
        counts = {n: c.repeats if None in done.get(n, []) else len(done.get(n, [])) for n in order}
        number = winner.confirmation_order(order, counts, c.repeats)
        if number is None or driver._stop.requested:
            break
        view = views[number]
        progress.confirming(number, "the baseline" if view.baseline else f"#{order.index(number) + 1} of "
                            f"{len(order) - 1}", sum(counts.values()) + 1, total)
        timings: dict[str, float] = {}
        label = f"confirm-{number:04d}-{counts[number] + 1}"
        result = driver.executor.run({} if view.baseline else dict(view.params), trial=None,
                                   trial_dir=driver.workdir / label, progress=progress, timings=timings, label=label)
        driver.redact.file(driver.workdir / label / "server.log")  # as a trial's: no secret in what we keep
        if result.failure_class == "interrupted":
            break  # measured nothing: the round resumes with it on the next run
        value = result.value if result.state == "COMPLETE" else None
        done = record.confirmation(driver.study.user_attrs)  # merge: never overwrite another worker's
        done.setdefault(number, []).append(value)
        driver.study.set_user_attr(record.CONFIRMATION, {str(k): v for k, v in done.items()})
        shown = (
            f"{value:,.1f}" if value is not None else f"{result.failure_class}: {result.reason} (flaky: cannot win)"
        )
        progress.note(f"    trial #{number} again: {shown} (first: {view.value:,.1f})")
    driver._emit("confirmation_finished", {"order": order,
                                         "measurements": driver.study.user_attrs.get(record.CONFIRMATION)})

def candidates(driver: StudyDriver, top_k: int, near: int = 0, noise: float = 0.0) -> list[int]:
    """The round: the `top_k` best configurations by their first value, then up to `near` more whose first
    value came within `noise` (relative) of the best's (one reading does not rule them out), then the
    baseline. An earlier round's list comes first, so a resumed round measures the same candidates."""
    ranking = study_verdict(driver.study).ranking
    earlier = [int(n) for n in driver.study.user_attrs.get(record.CONFIRMATION_ORDER) or []]
    tuned = [c for c in sorted(ranking, key=lambda c: -sign(driver) * c.first) if not c.baseline]
    top = [c.number for c in tuned[:top_k]]
    if tuned and top_k:
        best = tuned[0].first
        top += [c.number for c in tuned[top_k:] if sign(driver) * (best - c.first) <= abs(best) * noise][:near]
    base = [c.number for c in ranking if c.baseline]
    return list(dict.fromkeys(earlier + top + base))

def sign(driver: StudyDriver) -> float:
    return 1.0 if driver.cfg.objective.direction == "maximize" else -1.0
