"""The one rule that names the winner of a study and its gain over the engine defaults (pure).

Every output that names a winner (progress, the MLflow parent run, report.md/json, best.json, the
best-* files, `autotuner best`, the closing lines) asks `decide`, so no two parts can disagree.

The rule, in two stages:

- **Provisional** (no confirmation round yet): every configuration has been measured once, in its
  trial. The best single value leads; the gain is that value over the baseline's single value. Said
  as provisional: the leader of many single measurements is the luckiest as much as the fastest.
- **Confirmed** (after the confirmation round): the top configurations and the baseline were launched
  again in one round, interleaved (A, B, baseline, A, B, baseline, ...), so machine drift hits all
  alike. Only those round measurements are compared: all candidates have the same number of them,
  measured the same way, and none was selected for being high (the trials' first values were, which
  is why they are left out). A candidate with a failed confirmation launch is flaky and cannot win.
  The best median leads; its gain is the ratio of its median to the baseline's, with its range (worst
  against best pairing of the two sets).
- **Only what the noise allows.** Each round measured the leader and the baseline side by side, so
  each round gives one paired gain (leader over baseline, same round). The leader is named over the
  engine defaults only when the lowest paired gain is above zero: it won every round (a sign test: two
  equal configs do so by chance 1 time in 2^rounds, 1 in 8 with the default 3). Otherwise the
  verdict is to keep the engine defaults (the winner is the baseline), and the leader is reported as
  the best contender with its gain and range. The same rule between the top two: a leader that did not
  beat the runner-up in every round is tied with it (`tied`).

This module must never read a study or a file: callers turn trials into `Candidate`s.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Candidate:
    """One configuration: the trial that first measured it and its measurements."""

    number: int  # the trial that measured it first
    first: float  # that trial's value
    baseline: bool = False
    confirmations: tuple[float | None, ...] = ()  # the confirmation round's values; None: the launch failed

    @property
    def flaky(self) -> bool:
        return any(v is None for v in self.confirmations)

    @property
    def measured(self) -> list[float]:
        return [v for v in self.confirmations if v is not None]


@dataclass(frozen=True)
class Verdict:
    winner: Candidate | None
    confirmed: bool  # chosen from the confirmation round (else provisional: single measurements)
    value: float | None = None  # the winner's median (confirmed) or its single value (provisional)
    baseline: Candidate | None = None
    baseline_value: float | None = None
    gain: float | None = None  # relative improvement over the baseline (0.25: 25% better)
    gain_range: tuple[float, float] | None = None  # the gain's lowest and highest pairing (confirmed only)
    flaky: tuple[int, ...] = ()  # trials whose configuration failed a confirmation launch
    ranking: tuple[Candidate, ...] = field(default=())  # best first: the round (by median), then the rest
    gain_low: float | None = None  # the lowest paired (same-round) gain: above zero, the gain is significant
    contender: Candidate | None = None  # the best tuned config when its gain is within noise (the defaults kept)
    contender_value: float | None = None
    contender_gain: float | None = None
    contender_range: tuple[float, float] | None = None
    tied: tuple[int, ...] = ()  # configs the winner did not beat in every round (the runner-up, if so)

    @property
    def winner_is_baseline(self) -> bool:
        return self.winner is not None and self.winner.baseline


def decide(candidates: Sequence[Candidate], direction: str) -> Verdict:
    """The winner among `candidates` (one per configuration) and its gain over the baseline."""
    sign = 1.0 if direction == "maximize" else -1.0
    baseline = next((c for c in candidates if c.baseline), None)
    in_round = [c for c in candidates if c.confirmations]
    if not in_round:
        ranking = tuple(sorted(candidates, key=lambda c: -sign * c.first))
        winner = ranking[0] if ranking else None
        base_value = baseline.first if baseline else None
        return Verdict(winner, False, winner.first if winner else None, baseline, base_value,
                       _gain(winner.first, base_value, sign) if winner else None, None, (), ranking)
    full = max(len(c.confirmations) for c in in_round)
    # Same number of measurements, none failed: only those compare by median.
    eligible = [c for c in in_round if len(c.confirmations) == full and not c.flaky]
    flaky = tuple(c.number for c in in_round if c.flaky)
    by_median = sorted(eligible, key=lambda c: -sign * statistics.median(c.measured))
    rest = sorted((c for c in candidates if c not in by_median), key=lambda c: -sign * c.first)
    ranking = tuple(by_median + rest)
    winner = by_median[0] if by_median else None
    if winner is None:
        return Verdict(None, True, None, baseline, None, None, None, flaky, ranking)
    value = statistics.median(winner.measured)
    base_ok = baseline is not None and baseline in eligible
    base_value = statistics.median(baseline.measured) if baseline is not None and base_ok else None
    gain_range = gain_low = None
    if baseline is not None and base_ok:
        gain_range = pairing_range(winner.measured, baseline.measured, sign)
        gain_low = paired_low(winner.measured, baseline.measured, sign)
    gain = _gain(value, base_value, sign)
    runner_up = next((c for c in by_median[1:] if c is not winner), None)
    tied: tuple[int, ...] = ()
    over_runner_up = None if runner_up is None else paired_low(winner.measured, runner_up.measured, sign)
    if runner_up is not None and not runner_up.baseline and over_runner_up is not None and over_runner_up <= 0:
        tied = (runner_up.number,)
    if baseline is not None and base_ok and not winner.baseline and (gain_low is None or gain_low <= 0):
        # Within noise of the defaults: keep them, and say what the best tuned config measured.
        return Verdict(baseline, True, base_value, baseline, base_value, 0.0, None, flaky, ranking, gain_low,
                       contender=winner, contender_value=value, contender_gain=gain, contender_range=gain_range)
    return Verdict(winner, True, value, baseline, base_value, gain, gain_range, flaky, ranking, gain_low, tied=tied)


def paired_low(values: Sequence[float], others: Sequence[float], sign: float) -> float | None:
    """The lowest gain of `values` over `others` measured in the same round (index), None without a pair."""
    gains = [g for a, b in zip(values, others, strict=False) if (g := _gain(a, b, sign)) is not None]
    return min(gains) if gains else None


def pairing_range(values: Sequence[float], others: Sequence[float], sign: float) -> tuple[float, float] | None:
    pairs = [g for a in values for b in others if (g := _gain(a, b, sign)) is not None]
    return (min(pairs), max(pairs)) if pairs else None


def _gain(value: float, baseline: float | None, sign: float) -> float | None:
    if baseline is None or baseline == 0:
        return None
    ratio = value / baseline
    return ratio - 1 if sign > 0 else 1 - ratio


def confirmation_order(candidates: Sequence[int], done: dict[int, int], repeats: int) -> int | None:
    """The next candidate to measure in an interleaved round (A, B, baseline, A, B, baseline, ...):
    the first in `candidates` order with the fewest measurements, until each has `repeats`.
    `done`: measurements so far per candidate (a resumed round continues where it stopped)."""
    pending = [n for n in candidates if done.get(n, 0) < repeats]
    if not pending:
        return None
    fewest = min(done.get(n, 0) for n in pending)
    return next(n for n in pending if done.get(n, 0) == fewest)
