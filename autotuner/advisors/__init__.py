"""Who proposes configurations besides the sampler.

An advisor reads the study so far (`StudySoFar`: the typed records of the launched trials, the search
space, the load, the machine) and proposes configurations, each with a one-line reason. It decides
nothing else: the driver completes each proposal to a full configuration of the space (`complete`),
drops it when the space or the engine's rules refuse it or when it was measured or queued already, and
enqueues the rest as Optuna trials tagged with the advisor's name and reason. The sampler fills every
slot the advisors leave empty, and learns from every trial, whoever proposed it.

Advisors are pure over what they are given (the earlier-studies one reads other studies from the
storage it is pointed at, and nothing else).
"""

from autotuner.advisors._base import AdviceError, Advisor, Proposal, StudySoFar, complete

__all__ = ["AdviceError", "Advisor", "Proposal", "StudySoFar", "complete"]
