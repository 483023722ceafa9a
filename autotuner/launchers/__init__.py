"""Launchers: ways to run a LaunchSpec (a local process, a Docker container), chosen by the experiment's
`launcher` field. `make_launcher` is the one place that maps that name to a launcher and checks that it
can work (daemon reachable, image present) before anything starts."""

from autotuner.launchers.make import LAUNCHERS, make_launcher

__all__ = ["LAUNCHERS", "make_launcher"]
