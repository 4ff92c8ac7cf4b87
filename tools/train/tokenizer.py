"""K3-mini tokenizer: tiktoken rank-BPE with the Kimi pattern over tiktoken.model
(k3-architecture.md §5.1). Plain text is encoded with no specials and no BOS.
Specials: ids N..N+255 after the N ranks, K3's table (K3_SPECIALS offsets)."""
import base64

import tiktoken

from tools.train.bpe import KIMI_PAT_STR

K3_SPECIALS = {0: "[BOS]", 1: "[EOS]", 2: "<|end_of_msg|>", 3: "<|open|>", 4: "<|close|>",
               5: "<|sep|>", 6: "[start_header_id]", 7: "[end_header_id]", 9: "[EOT]",
               18: "<|media_begin|>", 19: "<|media_content|>", 20: "<|media_end|>",
               21: "<|media_pad|>", 65: "<osagent_mode>", 254: "[UNK]", 255: "[PAD]"}
NOT_SPECIAL = {"<|close|>", "<|sep|>"}   # "special": false in K3's added_tokens_decoder


def load_ranks(path):
    ranks = {}
    for line in open(path):
        b64, r = line.split()
        ranks[base64.b64decode(b64)] = int(r)
    return ranks


def special_names(n):
    return {n + o: K3_SPECIALS.get(o, f"<|reserved_token_{n + o}|>") for o in range(256)}


def load_encoding(path):
    ranks = load_ranks(path)
    n = len(ranks)
    specials = {name: i for i, name in special_names(n).items()}
    return tiktoken.Encoding(name="k3-mini", pat_str=KIMI_PAT_STR, mergeable_ranks=ranks,
                             special_tokens=specials)
