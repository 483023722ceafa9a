"""Write a small Hugging Face Llama (config.json, safetensors, tokenizer) with random weights, locally.

What it is for: vLLM and SGLang load Hugging Face model folders, and no model hub is reachable here.
This module makes one from nothing: a byte-level BPE tokenizer trained with `tokenizers` on the load
generator's own word list (so a prompt of N words is about N tokens), a chat template, and a
`LlamaForCausalLM` with random bf16 weights, saved with `save_pretrained`. It never downloads anything
and must never be changed to do so.

It runs inside the vLLM venv (which has torch, transformers and tokenizers), not autotuner's: it imports
nothing from autotuner, so it lives with the scripts that set up tests and experiments (not in the
package) and is run by path (scripts/setup-vllm.sh does):

    <vllm-venv>/bin/python scripts/tiny_hf.py --out models/llama-38m [--size small] [--seed 0]

Shapes (bf16):
* "small": hidden 768, 6 layers, 12 heads (4 KV heads), FFN 2048, tied embeddings, the ~950-token
  vocabulary the BPE learns from the word list (at most 2048): ~38.5M params, 77 MB. The smallest size
  whose tuning effects rise above the noise on a 2-core CPU
  (a 3M one is dominated by Python overhead: one config measured anywhere from 625 to 3190 tok/s).
* "tiny": hidden 128, 2 layers, 4 heads (2 KV heads): ~0.5M params, for quick checks.

Requests from the load generator set `ignore_eos`, so every request returns exactly `max_tokens`, and
greedy decoding never picks a token that streams as empty text (see `write_tiny_hf_llama`), so every
streamed chunk carries text and time to first token is always measurable.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

SHAPES = {
    "small": dict(vocab_size=2048, hidden_size=768, num_hidden_layers=6, num_attention_heads=12,
                  num_key_value_heads=4, intermediate_size=2048),
    "tiny": dict(vocab_size=2048, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, intermediate_size=256),
}
MAX_POSITIONS = 4096
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = ["<s>", "</s>", "<unk>", "<|im_start|>", "<|im_end|>"]


def _corpus(seed: int) -> list[str]:
    """Training text for the BPE: the load generator's words (kept in step by a test) and common English."""
    words = WORDS.split()
    rng = random.Random(seed)
    lines = [" ".join(rng.choices(words, k=32)) for _ in range(2000)]
    lines += [w.capitalize() + "." for w in words]
    return lines


def write_tiny_hf_llama(out: Path, size: str = "small", seed: int = 0) -> Path:
    """Write the model folder `out` (config.json, model.safetensors, tokenizer files); returns `out`."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    shape = SHAPES[size]
    out.mkdir(parents=True, exist_ok=True)

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=shape["vocab_size"], special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(seed), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="</s>", model_max_length=MAX_POSITIONS)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    torch.manual_seed(seed)
    # The corpus is small: the trained vocabulary stops short of vocab_size (~950 tokens). The model's
    # vocabulary is the tokenizer's, so every id it can emit decodes.
    config = LlamaConfig(**{**shape, "vocab_size": len(fast)}, max_position_embeddings=MAX_POSITIONS,
                         tie_word_embeddings=True, bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                         pad_token_id=fast.pad_token_id, torch_dtype="bfloat16", rms_norm_eps=1e-5)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    # Tokens whose text is empty or not whole UTF-8 on its own (the special tokens, lone bytes >= 0x80) get
    # a zero output row (the embeddings are tied, so a zero embedding too): their logit is always 0 while
    # some ordinary token's is positive, so greedy decoding only emits tokens that stream as visible text.
    # Otherwise a prompt whose greedy continuation is, say, `</s>` streams 64 empty chunks: no TTFT.
    silent = [i for i in range(len(fast)) if not fast.decode([i]) or "\ufffd" in fast.decode([i])]
    with torch.no_grad():
        model.get_output_embeddings().weight[silent] = 0
    model.save_pretrained(out, safe_serialization=True)
    (out / "autotuner-model.json").write_text(json.dumps({"made_by": "scripts/tiny_hf.py", "size": size,
                                                          "seed": seed, "params": model.num_parameters()}))
    return out


# The words of autotuner.workloads.synthetic.WORDS (a unit test checks they stay the same), so prompts of the
# load generator tokenize to about one token per word.
WORDS = """
the of and to in is was for on that with as by at from his it an were are which be this
has also had not but first one their its new after who they have her she two been other when
there all during into school time may years more most only over city some world would where
later up such used many can state about national out known university united then made war
these while under between well being both through part after because each team film season
since three game year same high back city name group life work number people around while
long home day state small see left right house book water area line place end large world
make good show play way side state law air music field road land power body face light river
point sea fire city open war order age line king form war money art love view hand care
test data page town club model road level head rate base list field story plan cost game
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a random-weight Hugging Face Llama folder (no hub).")
    parser.add_argument("--out", type=Path, required=True, help="folder to write (skipped when complete)")
    parser.add_argument("--size", choices=sorted(SHAPES), default="small")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if (args.out / "autotuner-model.json").is_file():
        print(args.out)
        return 0
    t = time.perf_counter()
    print(f"writing {args.out} ({args.size}, random weights)", file=sys.stderr)
    write_tiny_hf_llama(args.out, args.size, args.seed)
    print(f"done in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
