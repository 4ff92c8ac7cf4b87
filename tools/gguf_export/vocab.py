"""tiktoken.model (+ optional tokenizer_config.json) → the GGUF vocabulary llama.cpp reads for Kimi.

llama.cpp's Kimi vocabulary (its kimi-linear / kimi-k3 converters, llama-vocab.cpp):
  tokenizer.ggml.model = "gpt2" (byte-level BPE), tokenizer.ggml.pre = "kimi-k2" (the Kimi
  pre-tokenizer regex, the same as K3's pat_str, spec tokenizer.md §2.1);
  tokens: every rank's bytes in GPT-2's byte→unicode spelling, then the special slots by their
  text, then "[PAD{i}]" up to vocab_size; token types NORMAL (1) / CONTROL (3) / UNUSED (5);
  merges: "A B" for every rank whose bytes rank-BPE (restricted to lower ranks) splits into exactly
  two parts A, B (tokenizer.md §2.2, merge-list reconstruction).
Special slots (ids n_ranks .. n_ranks+255) follow src/tokenizer/vocab.cpp: names from
tokenizer_config.json's added_tokens_decoder when the file exists, else K3's default table.
"""
from __future__ import annotations

import base64
import json
import os

N_SPECIAL_SLOTS = 256  # src/tokenizer/vocab.h kNumSpecialSlots
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_UNUSED = 1, 3, 5  # gguf TokenType values
_K3_NAMED = {0: "[BOS]", 1: "[EOS]", 2: "<|end_of_msg|>", 3: "<|open|>", 4: "<|close|>", 5: "<|sep|>",
             6: "[start_header_id]", 7: "[end_header_id]", 9: "[EOT]", 18: "<|media_begin|>",
             19: "<|media_content|>", 20: "<|media_end|>", 21: "<|media_pad|>", 65: "<osagent_mode>",
             254: "[UNK]", 255: "[PAD]"}


class VocabError(ValueError):
    """Bad tokenizer file; the message names the file and the line or key."""


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte → printable unicode character map (the spelling of gpt2 vocabularies)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    out = {b: chr(b) for b in printable}
    k = 0
    for b in range(256):
        if b not in out:
            out[b] = chr(256 + k)
            k += 1
    return out


_B2U = bytes_to_unicode()


def spell(b: bytes) -> str:
    """Bytes in GPT-2 byte-level spelling."""
    return "".join(_B2U[x] for x in b)


def read_tiktoken(path: str) -> list[bytes]:
    """Parse tiktoken.model ("<base64> <rank>" per line) → bytes by rank (dense 0..n-1, unique,
    all 256 single bytes present). Raises VocabError naming the file and line."""
    if not os.path.isfile(path):
        raise VocabError(f"{path}: not found (a K3 folder ships its vocabulary as tiktoken.model)")
    by_rank: dict[int, bytes] = {}
    with open(path, "rb") as f:
        for ln, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2:
                raise VocabError(f"{path}:{ln}: expected '<base64 token> <rank>'")
            try:
                tok = base64.b64decode(parts[0], validate=True)
                rank = int(parts[1])
            except ValueError:
                raise VocabError(f"{path}:{ln}: expected '<base64 token> <rank>'") from None
            if not tok or rank < 0:
                raise VocabError(f"{path}:{ln}: empty token or negative rank")
            if rank in by_rank:
                raise VocabError(f"{path}:{ln}: rank {rank} appears twice")
            by_rank[rank] = tok
    n = len(by_rank)
    if n == 0:
        raise VocabError(f"{path}: no tokens")
    for r in range(n):
        if r not in by_rank:
            raise VocabError(f"{path}: ranks must be dense 0..{n - 1}, rank {r} is missing")
    ranks = [by_rank[r] for r in range(n)]
    if len(set(ranks)) != n:
        raise VocabError(f"{path}: a token appears under two ranks")
    have = set(ranks)
    for c in range(256):
        if bytes([c]) not in have:
            raise VocabError(f"{path}: the single byte 0x{c:02x} is missing; all 256 single bytes are required")
    return ranks


def special_slots(n_ranks: int, config_path: str | None) -> list[str]:
    """Texts of the 256 special slots (ids n_ranks ..), as src/tokenizer/vocab.cpp builds them."""
    out = [f"<|reserved_token_{n_ranks + k}|>" for k in range(N_SPECIAL_SLOTS)]
    if config_path is None:
        for k, t in _K3_NAMED.items():
            out[k] = t
        return out
    try:
        with open(config_path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise VocabError(f"{config_path}: expected JSON ({e})") from None
    dec = cfg.get("added_tokens_decoder", {}) if isinstance(cfg, dict) else None
    if not isinstance(dec, dict):
        raise VocabError(f"{config_path}: key added_tokens_decoder: expected an object")
    for key, val in dec.items():
        where = f"{config_path}: added_tokens_decoder[\"{key}\"]"
        if not key.isdigit() or not (n_ranks <= int(key) < n_ranks + N_SPECIAL_SLOTS):
            raise VocabError(f"{where}: expected an id in [{n_ranks}, {n_ranks + N_SPECIAL_SLOTS})")
        if not isinstance(val, dict) or not isinstance(val.get("content"), str) or not val["content"]:
            raise VocabError(f"{where}: expected an object with a non-empty string \"content\"")
        out[int(key) - n_ranks] = val["content"]
    return out


def _bpe_parts(rank_of: dict[bytes, int], token: bytes, max_rank: int) -> list[bytes]:
    """Rank-BPE of `token` using only merges whose result ranks below max_rank (leftmost on ties)."""
    parts = [bytes([b]) for b in token]
    while True:
        best, best_i = None, -1
        for i in range(len(parts) - 1):
            r = rank_of.get(parts[i] + parts[i + 1])
            if r is not None and r < max_rank and (best is None or r < best):
                best, best_i = r, i
        if best is None:
            return parts
        parts[best_i:best_i + 2] = [parts[best_i] + parts[best_i + 1]]


def merges(ranks: list[bytes]) -> list[str]:
    """The reconstructed merge list ("A B" in GPT-2 spelling), in rank order of the merged token."""
    rank_of = {b: r for r, b in enumerate(ranks)}
    out = []
    for r, tok in enumerate(ranks):
        if len(tok) < 2:
            continue
        parts = _bpe_parts(rank_of, tok, r)
        if len(parts) == 2:
            out.append(f"{spell(parts[0])} {spell(parts[1])}")
    return out


def gguf_vocab(model_dir: str, vocab_size: int) -> tuple[list[str], list[int], list[str]]:
    """(tokens, token types, merges) for a K3 folder's tiktoken.model, padded to vocab_size.
    Raises VocabError when tiktoken.model is missing or malformed, or vocab_size < ranks + 256."""
    tk = os.path.join(model_dir, "tiktoken.model")
    ranks = read_tiktoken(tk)
    cfg = os.path.join(model_dir, "tokenizer_config.json")
    specials = special_slots(len(ranks), cfg if os.path.isfile(cfg) else None)
    n = len(ranks) + len(specials)
    if vocab_size < n:
        raise VocabError(f"{tk}: {len(ranks)} ranks + {N_SPECIAL_SLOTS} special slots = {n} tokens, "
                         f"more than config.json vocab_size {vocab_size}")
    tokens = [spell(b) for b in ranks] + specials + [f"[PAD{i}]" for i in range(n, vocab_size)]
    types = [TOKEN_NORMAL] * len(ranks) + [TOKEN_CONTROL] * len(specials) + [TOKEN_UNUSED] * (vocab_size - n)
    return tokens, types, merges(ranks)
