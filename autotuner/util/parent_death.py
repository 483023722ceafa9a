"""A child process that gets a signal when the process that started it dies (Linux's PR_SET_PDEATHSIG).

Engines, workers and container guards use it so that even a SIGKILLed tuner leaves nothing running.
"""

from __future__ import annotations

import ctypes
import sys

# Loaded here, not between fork and exec: dlopen in a forked child of a threaded process can deadlock.
_LIBC = ctypes.CDLL("libc.so.6", use_errno=True) if sys.platform.startswith("linux") else None
_PR_SET_PDEATHSIG = 1

SUPPORTED = _LIBC is not None


def signal_on_parent_death(signum: int) -> None:
    """Have `signum` sent to this process when its parent dies; nothing where the platform cannot.
    Safe between fork and exec (no allocation, no import)."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signum)
