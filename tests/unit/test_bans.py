"""A value the engine build refused is never launched again with that build, whoever proposes it."""

from __future__ import annotations

from autotuner.core import bans
from autotuner.core.record import TrialView
from autotuner.engines._base import get_engine

VLLM = get_engine("vllm")


def flag_text(param, value):
    return VLLM.describe({param: value})


def failed(number, params, line, failure_class="bad-flag", version="0.32.0"):
    return TrialView(number=number, state="FAIL", params=params, values=None, failure_class=failure_class,
                     failure_reason=line, engine_version=version)


def test_a_refusal_naming_one_param_bans_that_value_for_that_engine_version():
    backend = failed(3, {"attention_backend": "FLASHINFER", "max_num_seqs": 256},
                     "vllm serve: error: argument --attention-backend: invalid choice: 'FLASHINFER'")
    (ban,) = bans.learned([backend], flag_text, "0.32.0")
    assert (ban.param, ban.value, ban.trial) == ("attention_backend", "FLASHINFER", 3)
    assert bans.broken({"attention_backend": "FLASHINFER", "max_num_seqs": 64}, [ban])
    assert not bans.broken({"attention_backend": "TRITON_ATTN", "max_num_seqs": 256}, [ban])
    assert not bans.learned([backend], flag_text, "0.33.0")  # another build may accept it


def test_a_line_naming_no_param_or_several_bans_nothing():
    vague = failed(1, {"max_num_seqs": 256, "block_size": 16}, "error: the following arguments are required: model")
    both = failed(2, {"kv_cache_dtype": "fp8_e4m3", "attention_backend": "FLASHINFER"},
                  "Invalid attention backend FLASHINFER for kv_cache_dtype fp8_e4m3", failure_class="backend")
    assert bans.learned([vague, both], flag_text, "0.32.0") == []


def test_a_value_that_ran_in_another_config_is_never_banned():
    refused = failed(4, {"attention_backend": "FLASHINFER", "kv_cache_dtype": "fp8"},
                     "ValueError: Selected backend FLASHINFER is not valid for this configuration",
                     failure_class="backend")
    ran = TrialView(number=2, state="COMPLETE", params={"attention_backend": "FLASHINFER", "kv_cache_dtype": "auto"},
                    values=[900.0], engine_version="0.32.0")
    assert bans.learned([refused], flag_text, "0.32.0")  # alone, the line bans FLASHINFER
    assert bans.learned([ran, refused], flag_text, "0.32.0") == []  # it ran: the refusal was of the pair


def test_short_values_and_numbers_are_not_read_as_named():
    assert not bans.names("error: invalid value 16 at position 1", "--max-num-seqs 16", 16)
    assert not bans.names("error: invalid argument on line 3", "-fa on", "on")
    assert bans.names("error: argument -fa: unknown value", "-fa on", "on")
    assert not bans.names("error: argument --enable-eplb-x: bad", "--enable-eplb", True)


