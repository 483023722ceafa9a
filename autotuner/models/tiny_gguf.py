"""Write a small llama-architecture GGUF model with random weights, made entirely on this machine.

What it is for: tuning and testing need a *real* model file that a *real* engine (llama.cpp's
``llama-server``) loads and serves, but no model hub is reachable here. This module builds one from
nothing with the ``gguf`` PyPI package: a self-made SentencePiece-style vocabulary, a ChatML-like chat
template stored in the file, and random weights (deterministic for a seed). It never downloads anything
and must never be changed to do so.

Two properties make the file useful for benchmarks:

* The rows of the output matrix that belong to the end-of-generation tokens (``</s>``, ``<|im_end|>``)
  and the other control tokens are zero, so their logit is always 0 while some ordinary token's logit is
  positive: greedy decoding never stops early and every request returns exactly ``max_tokens`` tokens.
* The vocabulary holds the 256 byte tokens ``<0xNN>``, single characters, common English words with the
  SentencePiece ``▁`` (word start) prefix and all their prefixes (SentencePiece merges pairwise, so a word
  is only reachable through its prefixes), common suffixes and letter pairs. Ordinary English prompts of
  N words tokenise to roughly N..2N tokens.

Shapes (f16 weights, f32 norms; ``--quant q8_0`` or ``q4_0`` quantizes the same weights, as llama.cpp's own
quantizer would, for a quantized model to compare with the float one):

* ``"tiny"``  vocab 2048, hidden 256, 4 layers, 4 heads (2 KV heads), FFN 768: ~4.2M params, ~8 MB.
* ``"small"`` vocab 8192, hidden 1024, 8 layers, 16 heads (4 KV heads), FFN 2816: ~107M params, ~214 MB.
  Use it where the effect of engine knobs (slots, threads, batch sizes) must show.

Usage::

    python -m autotuner.models.tiny_gguf --out models/tiny.gguf --size small [--seed 0] [--quant q8_0]

``numpy`` and ``gguf`` are imported only when a file is written (extra ``autotuner[models]``).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from autotuner.util.files import replacing

__all__ = [
    "CHAT_TEMPLATE",
    "SHAPES",
    "ModelShape",
    "build_vocab",
    "main",
    "write_tiny_llama_gguf",
]

Size = Literal["tiny", "small"]
Quant = Literal["f16", "q8_0", "q4_0"]


@dataclass(frozen=True)
class ModelShape:
    vocab_size: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    context_length: int = 16384

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def n_params(self) -> int:
        kv_dim = self.kv_heads * self.head_dim
        per_layer = (
            2 * self.hidden * self.hidden  # q, o
            + 2 * self.hidden * kv_dim  # k, v
            + 3 * self.hidden * self.ffn  # gate, up, down
            + 2 * self.hidden  # norms
        )
        return 2 * self.vocab_size * self.hidden + self.layers * per_layer + self.hidden


SHAPES: dict[str, ModelShape] = {
    "tiny": ModelShape(vocab_size=2048, hidden=256, layers=4, heads=4, kv_heads=2, ffn=768),
    "small": ModelShape(vocab_size=8192, hidden=1024, layers=8, heads=16, kv_heads=4, ffn=2816),
}

# ChatML-like. The markers are control tokens in the vocabulary; <|im_end|> is recognised by llama.cpp as
# an end-of-generation token, which is why its output row is zeroed like </s>'s.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

UNK, BOS, EOS, IM_START, IM_END = "<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"
SPECIALS = (UNK, BOS, EOS, IM_START, IM_END)  # ids 0..4
WORD_START = "\u2581"  # SentencePiece's "▁"

# Common English words, most frequent first (order decides what fits in the tiny vocabulary).
_WORDS = """
the of and to a in is that for it as was with be by on not he i this are or his from at which but have an
they you were her she there one all we their has been would will what if can when more no so who out up
about said some them other its time into only two than could new may then do first any like now my
these over such our man me even most made after also did many before must through back years where much
your way well down should because each just those people how too little state good very make world
still own see men work long get here between both life being under never day same another know while
last might us great old year off come since against go came right used take three states himself few
house use during without again place around however home small found thought went say part once high
general upon school every don does got united left number course war until always away something fact
though water less public put think almost hand enough far took head yet government system better set
told nothing night end why called didn eyes find going look asked later knew point next program city
business give group toward young days let room president side social given present several order
national possible rather second face per among form important often things looked early white case
john become large big need four within felt along children saw best church ever least power development
light thing seemed family interest want members mind country area others done turned although open god
service certain kind problem began different door thus help sense means whole matter perhaps itself york
times law human line above name example action company hands local show whether five history gave today
either act feet across taken past quite anything seen having death week experience body word half really
field am car words already themselves information tell together college shall money period held keep
sure real probably free seems political cannot behind miss question air office making brought whose
special major heard problems ago became federal moment study available known result street economic boy
model server request token tokens speed latency throughput batch test prompt answer write explain short
story about question summary data code function value system user assistant hello please thanks
""".split()

_SUFFIXES = """
s es ed ing er ers est ly tion tions ment ments ness able ible al ial ous ive ity ies ful less en ent ence
ance ant ism ist ize ise ic ical y th re un in im dis pre pro con com ex ation ations ally ings
""".split()

_SYLLABLE_ONSETS = "b c d f g h j k l m n p r s t v w z br cl cr dr fl gr pl pr sh st str th tr wh".split()
_SYLLABLE_NUCLEI = "a e i o u ai ea ee oa oo ou".split()
_SYLLABLE_CODAS = ["", "n", "r", "s", "t", "l", "nd", "st", "ng", "ck"]


def _pieces_in_priority_order() -> list[str]:
    """Text pieces, most useful first; every multi-character piece's proper prefixes come before it."""
    letters_lower = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    letters_upper = [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    digits = [str(d) for d in range(10)]
    punct = list(".,!?;:'\"-()[]{}/\\@#$%&*+=<>_|~`^")
    out: list[str] = [WORD_START, *letters_lower, *letters_upper, *digits, *punct]
    out += [WORD_START + c for c in letters_lower + letters_upper + digits + punct]

    def add_word(word: str, prefix: str) -> None:
        # SentencePiece merges two adjacent symbols at a time, so "▁the" is only reachable through a
        # chain of pieces such as "▁t", "▁th": add every prefix.
        full = prefix + word
        for end in range(len(prefix) + 1, len(full) + 1):
            out.append(full[:end])

    for word in _WORDS:
        add_word(word, WORD_START)
    for word in _WORDS[:80]:
        add_word(word[0].upper() + word[1:], WORD_START)
    for suffix in _SUFFIXES:
        add_word(suffix, "")
    out += [a + b for a in letters_lower for b in letters_lower]
    for word in _WORDS[80:]:
        add_word(word[0].upper() + word[1:], WORD_START)
    # Filler: pronounceable pseudo-words, word-initial, to fill larger vocabularies deterministically.
    for onset in _SYLLABLE_ONSETS:
        for nucleus in _SYLLABLE_NUCLEI:
            for coda in _SYLLABLE_CODAS:
                add_word(onset + nucleus + coda, WORD_START)
    for onset in _SYLLABLE_ONSETS:
        for nucleus in _SYLLABLE_NUCLEI:
            for coda in _SYLLABLE_CODAS:
                add_word(onset + nucleus + coda, "")
    # Deduplicate keeping the first occurrence (prefixes stay before their extensions).
    seen: set[str] = set()
    unique: list[str] = []
    for piece in out:
        if piece not in seen:
            seen.add(piece)
            unique.append(piece)
    return unique


def build_vocab(vocab_size: int) -> tuple[list[str], list[float], list[int]]:
    """The vocabulary: (tokens, scores, token types), ``vocab_size`` entries.

    Layout: ``<unk>`` 0, ``<s>`` 1, ``</s>`` 2, ``<|im_start|>`` 3, ``<|im_end|>`` 4, the 256 byte tokens
    ``<0x00>``..``<0xFF>`` 5..260, then text pieces. A piece's score grows with its length, so the
    SentencePiece tokenizer prefers the longest merges.
    """
    from gguf import TokenType  # local: gguf is an optional dependency

    n_fixed = len(SPECIALS) + 256
    pieces = _pieces_in_priority_order()
    if vocab_size < n_fixed + 1 + 26:
        raise ValueError(f"vocab_size {vocab_size} too small (need at least {n_fixed + 27})")
    if vocab_size - n_fixed > len(pieces):
        raise ValueError(f"vocab_size {vocab_size} too large: only {n_fixed + len(pieces)} tokens can be made")
    pieces = pieces[: vocab_size - n_fixed]
    # The prefix-first order means a cut keeps every kept piece reachable.

    tokens: list[str] = list(SPECIALS)
    scores: list[float] = [0.0] * len(SPECIALS)
    types: list[int] = [int(TokenType.UNKNOWN)] + [int(TokenType.CONTROL)] * (len(SPECIALS) - 1)
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        scores.append(0.0)
        types.append(int(TokenType.BYTE))
    for i, piece in enumerate(pieces):
        tokens.append(piece)
        scores.append(float(len(piece)) - i * 1e-4)
        types.append(int(TokenType.NORMAL))
    assert len(tokens) == vocab_size
    return tokens, scores, types


def write_tiny_llama_gguf(path: Path, *, size: Size = "small", seed: int = 0, quant: Quant = "f16") -> Path:
    """Write a random-weight llama GGUF of the given ``size`` to ``path`` (atomically) and return ``path``.

    The same ``size``, ``seed`` and ``quant`` always give the same bytes; the same ``size`` and ``seed``
    the same weights before quantization. Parent folders are created.
    """
    from autotuner.util.extras import require

    np = require("numpy", "models", "writing a GGUF model")
    gguf = require("gguf", "models", "writing a GGUF model")
    GGUFWriter, LlamaFileType = gguf.GGUFWriter, gguf.LlamaFileType
    qtype = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0}.get(quant)

    if size not in SHAPES:
        raise ValueError(f"size must be one of {sorted(SHAPES)}, not {size!r}")
    shape = SHAPES[size]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tokens, scores, types = build_vocab(shape.vocab_size)

    rng = np.random.default_rng(seed)

    def weight(rows: int, cols: int, std: float = 0.02) -> Any:  # a numpy array (numpy is imported inside the writer)
        # numpy shape (rows, cols) is GGUF/ggml shape [cols, rows]: llama.cpp's layout for matrices
        # that map a `cols`-wide input to a `rows`-wide output.
        return (rng.standard_normal((rows, cols), dtype=np.float32) * std).astype(np.float16)

    def ones(n: int) -> Any:
        return np.ones(n, dtype=np.float32)

    h, kv_dim = shape.hidden, shape.kv_heads * shape.head_dim
    with replacing(path) as tmp:  # a killed writer leaves no half model behind
        writer = GGUFWriter(tmp, "llama")

        def add_matrix(name: str, matrix: Any) -> None:
            if qtype is None:
                writer.add_tensor(name, matrix)
            else:  # blocks of 32 along each row, as llama-quantize writes them
                writer.add_tensor(name, gguf.quants.quantize(matrix.astype(np.float32), qtype), raw_dtype=qtype)

        try:
            writer.add_name(f"autotuner-random-llama-{size}")
            writer.add_file_type(int({"q8_0": LlamaFileType.MOSTLY_Q8_0, "q4_0": LlamaFileType.MOSTLY_Q4_0}.get(
                quant, LlamaFileType.MOSTLY_F16)))
            writer.add_context_length(shape.context_length)
            writer.add_embedding_length(h)
            writer.add_block_count(shape.layers)
            writer.add_feed_forward_length(shape.ffn)
            writer.add_head_count(shape.heads)
            writer.add_head_count_kv(shape.kv_heads)
            writer.add_rope_dimension_count(shape.head_dim)
            writer.add_rope_freq_base(10000.0)
            writer.add_layer_norm_rms_eps(1e-5)
            writer.add_vocab_size(shape.vocab_size)

            writer.add_tokenizer_model("llama")  # SentencePiece (SPM) with byte fallback
            writer.add_token_list(tokens)
            writer.add_token_scores(scores)
            writer.add_token_types(types)
            writer.add_unk_token_id(tokens.index(UNK))
            writer.add_bos_token_id(tokens.index(BOS))
            writer.add_eos_token_id(tokens.index(EOS))
            writer.add_add_bos_token(True)
            writer.add_add_eos_token(False)
            writer.add_chat_template(CHAT_TEMPLATE)

            add_matrix("token_embd.weight", weight(shape.vocab_size, h, std=1.0))
            for layer in range(shape.layers):
                p = f"blk.{layer}"
                writer.add_tensor(f"{p}.attn_norm.weight", ones(h))
                add_matrix(f"{p}.attn_q.weight", weight(h, h))
                add_matrix(f"{p}.attn_k.weight", weight(kv_dim, h))
                add_matrix(f"{p}.attn_v.weight", weight(kv_dim, h))
                add_matrix(f"{p}.attn_output.weight", weight(h, h))
                writer.add_tensor(f"{p}.ffn_norm.weight", ones(h))
                add_matrix(f"{p}.ffn_gate.weight", weight(shape.ffn, h))
                add_matrix(f"{p}.ffn_up.weight", weight(shape.ffn, h))
                add_matrix(f"{p}.ffn_down.weight", weight(h, shape.ffn))
            writer.add_tensor("output_norm.weight", ones(h))
            output = weight(shape.vocab_size, h, std=0.05)
            # Zero logits for </s>, <|im_end|> (end of generation) and the other control tokens: some ordinary
            # token always scores higher, so greedy decoding runs to max_tokens.
            output[: len(SPECIALS), :] = 0
            add_matrix("output.weight", output)

            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_tensors_to_file()
        finally:
            writer.close()
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m autotuner.models.tiny_gguf",
        description="Write a random-weight llama GGUF (no download) for testing and tuning llama-server.",
    )
    parser.add_argument("--out", type=Path, required=True, help="where to write the .gguf file")
    parser.add_argument("--size", choices=sorted(SHAPES), default="small", help="model shape (default: small)")
    parser.add_argument("--seed", type=int, default=0, help="random seed for the weights (default: 0)")
    parser.add_argument("--quant", choices=("f16", "q8_0", "q4_0"), default="f16",
                        help="weight type of the matrices (default: f16)")
    args = parser.parse_args(argv)
    path = write_tiny_llama_gguf(args.out, size=args.size, seed=args.seed, quant=args.quant)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
