"""The words prompts are made of, and the endpoints a workload drives: facts every workload kind shares."""

from __future__ import annotations

from typing import Literal

Endpoint = Literal["completions", "chat"]

# Paths are relative to the server's base URL (e.g. http://127.0.0.1:8080).
ENDPOINT_PATHS: dict[str, str] = {
    "completions": "/v1/completions",
    "chat": "/v1/chat/completions",
}

# Short, common, lower-case English words, nearly all a single token (with their leading space) in the
# usual BPE vocabularies, so `input_len` words come out close to `input_len` prompt tokens (the server's
# usage chunk reports the exact count). Never reorder or edit: prompts, and so results, depend on it.
WORDS: tuple[str, ...] = tuple(
    """
    the of and to in is was for on that with as by at from his it an were are which be this has also
    had not but first one their its new after who they have her she two been other when there all
    during into school time may years more most only over city some world would where later up such
    used many can state about national out known university united then made war these while under
    between well being both through part because each team film season since three game year same
    high back name group life work number people around long home day small see left right house
    book water area line place end large make good show play way side law air music field road land
    power body face light river point sea fire open order age king form money art love view hand
    care test data page town club model level head rate base list story plan cost
    """.split()
)
