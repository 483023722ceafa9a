"""Advising (one verb of the study): when the queue is empty, the advisors are asked in turn; the first
new, valid proposal is queued with who proposed it and why (under the study's lock, so workers between
trials at once queue it once). A proposal off the space or against the engine's rules is refused once,
with the rule; values this engine version refused are never proposed again (core/bans.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from optuna.trial import TrialState

from autotuner.advisors import AdviceError, Proposal, StudySoFar, complete
from autotuner.core import asking, bans, record
from autotuner.core.progress import Progress
from autotuner.util import locks

if TYPE_CHECKING:
    from autotuner.core.driver import StudyDriver


def study_so_far(driver: StudyDriver, trials_left: int | None) -> StudySoFar:
    views = [record.view(t) for t in driver.study.get_trials(deepcopy=False)]
    launched = [t for t in views if t.counted and t.state not in ("WAITING", "RUNNING")]
    load_key = driver.cfg.load.kind
    return StudySoFar(
        trials=launched, space=driver.space, load_key=load_key,
        max_load=driver.cfg.load.max_load,
        cpus=driver.cfg.hardware.cpus or int(driver.host.get("cpus_usable") or 1), gpus=driver.cfg.hardware.gpus,
        metric=driver.cfg.objective.metric, direction=driver.cfg.objective.direction, trials_left=trials_left,
        defaults=driver.engine.defaults(), workload=driver.executor.facts,
    )

def advise(driver: StudyDriver, progress: Progress, trials_left: int | None) -> None:
    """When the queue is empty: the first advisor with a new, valid proposal gets this slot (asked
    again after every trial, with its evidence); none: the sampler's slot."""
    if not driver.advisors:
        return
    # Workers between trials at once would each find the queue empty and queue the same proposal.
    with locks.exclusive(driver.cfg.study.storage):
        if driver.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            return
        learn_bans(driver, progress)
        so_far = study_so_far(driver, trials_left)
        for advisor in driver.advisors:
            try:  # a bug, an unreadable earlier study: that advisor's proposals are lost, never the study
                for p in advisor.propose(so_far):
                    if _take(driver, advisor.name, p, so_far, progress):
                        return
            except Exception as e:  # said once per distinct failure
                why = str(e) if isinstance(e, AdviceError) else f"{type(e).__name__}: {e}"
                _refuse(driver, progress, advisor.name, why, f"no proposal this time ({why})")

def _take(driver: StudyDriver, who: str, p: Proposal, so_far: StudySoFar, progress: Progress) -> bool:
    """Enqueue the proposal when it is new and valid; True when it took the slot."""
    if p.refused:
        _refuse(driver, progress, who, repr(sorted(p.params.items(), key=str)),
                     f"proposed {p.params}: refused ({p.refused})")
        return False
    params = complete(p.params, driver.space, so_far.defaults)
    key = record.config_key(params, False)
    if (who, key) in driver._refused or asking.settled_by(driver, params, False) is not None:
        return False
    if broken := _broken(driver, params):
        _refuse(driver, progress, who, key, f"proposed {driver.engine.describe(params)}: refused ({'; '.join(broken)})")
        return False
    reason = p.reason
    if driver._ask_user is not None:
        answer = driver._ask_user(f"{who} proposes {driver.engine.describe(params) or '(defaults)'}: {p.reason}",
                                params)
        driver._refused.add((who, key))
        if not answer:
            progress.note(f"advisor {who}: proposal declined")
            return False
        if isinstance(answer, dict) and answer != params:  # edited by the user: checked as any proposal
            if off := driver.space.contains(answer):
                progress.note(f"edited config: refused ({off})")
                return False
            params, reason = complete(answer, driver.space, so_far.defaults), f"{p.reason} (edited by the user)"
            key = record.config_key(params, False)
            if asking.settled_by(driver, params, False) is not None:
                progress.note(f"advisor {who}: the edited config {driver.engine.describe(params)} was measured "
                              "or is being measured")
                return False
            if broken := _broken(driver, params):
                progress.note(f"edited config {driver.engine.describe(params)}: refused ({'; '.join(broken)})")
                return False
    driver._refused.add((who, key))  # proposed once per run: the sampler completes what it left open
    driver.study.enqueue_trial(params, user_attrs={record.PROPOSED_BY: who, record.REASON: reason},
                             skip_if_exists=True)
    return True

def learn_bans(driver: StudyDriver, progress: Progress) -> None:
    """Values this engine version refused (core.bans): no proposer launches them again."""
    views = [record.view(t) for t in driver.study.get_trials(deepcopy=False)]
    learned = bans.learned(views, lambda p, v: driver.engine.describe({p: v}), driver.engine_version)
    for ban in learned:
        if ban not in driver.executor.bans:
            progress.note(f"never again with this engine version: {ban.why()}")
    driver.executor.bans = learned

def _broken(driver: StudyDriver, params: dict[str, Any]) -> list[str]:
    """Why a proposed config must not launch: off the space, or against the engine's rules."""
    return [why] if (why := driver.space.contains(params)) else driver.executor.infeasible(params)

def _refuse(driver: StudyDriver, progress: Progress, who: str, key: Any, why: str) -> None:
    if (who, key) not in driver._refused:
        driver._refused.add((who, key))
        progress.note(f"advisor {who}: {why}")
