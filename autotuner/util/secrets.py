"""Secrets reach the engine and nothing else.

Values of the variables an experiment marks secret (and HF_TOKEN, always) are passed to the engine's
environment, shown as `NAME="$NAME"` in commands a user may paste, and replaced by `***` in every text
the tuner writes or logs: trial attributes, failure reasons, command files, and the server's log before
it is kept as an MLflow artifact.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

ALWAYS_SECRET = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
MASK = "***"
_MIN_LEN = 4  # shorter values would mask ordinary words in logs


def collect(names: Iterable[str]) -> dict[str, str]:
    """The secret variables that are set, by name, from the tuner's environment."""
    wanted = dict.fromkeys([*ALWAYS_SECRET, *names])
    return {name: os.environ[name] for name in wanted if os.environ.get(name)}


class Redactor:
    def __init__(self, secrets: dict[str, str]):
        # Longest first, so a secret containing another is masked whole.
        self._values = sorted({v for v in secrets.values() if len(v) >= _MIN_LEN}, key=len, reverse=True)

    def text(self, text: str | None) -> str | None:
        if not text or not self._values:
            return text
        for value in self._values:
            text = text.replace(value, MASK)
        return text

    def file(self, path: Path) -> None:
        """Mask secrets in a file in place (atomically), when it holds any."""
        if not self._values or not path.is_file():
            return
        data = path.read_text(errors="replace")
        masked = self.text(data)
        if masked != data:
            tmp = path.with_name(path.name + ".redacting")
            tmp.write_text(masked or "")
            tmp.replace(path)
