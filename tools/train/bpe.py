"""Byte-level BPE trainer → tiktoken.model (k3-architecture.md §5.1, tokenizer.md §2).

Pieces come from the Kimi pre-tokenizer pattern (KIMI_PAT_STR, the same string tiktoken and the
engine use), so merges never cross piece boundaries. Ranks 0..255 = single bytes (rank b = byte b);
each merge creates the next rank. Merge choice: highest pair count, ties broken by the smaller
(left bytes, right bytes) — fully deterministic. A merge whose bytes already exist reuses that rank.
Output line format: base64(token bytes) SPACE rank.
Usage: python -m tools.train.bpe TRAIN_TXT N_RANKS OUT_TIKTOKEN_MODEL
"""
import base64
import collections
import heapq
import sys

import regex

KIMI_PAT_STR = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])


def pieces(text):
    return regex.findall(KIMI_PAT_STR, text, flags=regex.V1)


def train_bpe(text, n_ranks):
    """Returns list of token byte strings; index = rank; len == n_ranks (or fewer if exhausted)."""
    counts = collections.Counter(p.encode("utf-8") for p in pieces(text))
    vocab = [bytes([b]) for b in range(256)]
    rank_of = {t: i for i, t in enumerate(vocab)}
    words = [list(w) for w in counts]            # token ids per unique piece
    freq = [counts[w] for w in counts]
    pair_count = collections.Counter()
    where = collections.defaultdict(set)
    for wi, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pair_count[(a, b)] += freq[wi]
            where[(a, b)].add(wi)
    heap = [(-c, vocab[a], vocab[b], a, b) for (a, b), c in pair_count.items()]
    heapq.heapify(heap)
    while len(vocab) < n_ranks and heap:
        negc, _, _, a, b = heapq.heappop(heap)
        if pair_count.get((a, b), 0) != -negc or negc == 0:
            continue
        new_bytes = vocab[a] + vocab[b]
        if new_bytes in rank_of:
            new = rank_of[new_bytes]
        else:
            new = len(vocab)
            vocab.append(new_bytes)
            rank_of[new_bytes] = new
        changed = set()
        for wi in list(where[(a, b)]):
            w, f = words[wi], freq[wi]
            for x, y in zip(w, w[1:]):
                pair_count[(x, y)] -= f
                changed.add((x, y))
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(new)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            words[wi] = out
            for x, y in zip(out, out[1:]):
                pair_count[(x, y)] += f
                where[(x, y)].add(wi)
                changed.add((x, y))
        for p in changed:
            c = pair_count.get(p, 0)
            if c > 0:
                heapq.heappush(heap, (-c, vocab[p[0]], vocab[p[1]], p[0], p[1]))
    return vocab


def write_tiktoken(vocab, path):
    with open(path, "w") as f:
        for r, t in enumerate(vocab):
            f.write(f"{base64.b64encode(t).decode()} {r}\n")


def main(train_txt, n_ranks, out):
    vocab = train_bpe(open(train_txt, encoding="utf-8").read(), int(n_ranks))
    assert len(vocab) == int(n_ranks), len(vocab)
    write_tiktoken(vocab, out)
    print(f"wrote {len(vocab)} ranks to {out}")


if __name__ == "__main__":
    main(*sys.argv[1:])
