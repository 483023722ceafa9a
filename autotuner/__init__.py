"""autotuner: finds the fastest configuration of an LLM inference server, overnight."""

__version__ = "0.1.0"
