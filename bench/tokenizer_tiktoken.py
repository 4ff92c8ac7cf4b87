"""tiktoken's encode throughput on the corpora bench/tokenizer.cpp uses (kitoken mixed and
UTF-8 inputs repeated to 1 MiB) plus the generated 1.1 MB multilingual test corpus, next to the
C++ encoder's (`k3 tokenize --timing`, one process per corpus, load time excluded).

Usage: .venv/bin/python bench/tokenizer_tiktoken.py [path/to/k3]
"""
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
import test_tokenizer_tiktoken as T  # noqa: E402


def main():
    k3 = sys.argv[1] if len(sys.argv) > 1 else T.k3_bin()
    import base64
    import tiktoken
    ranks = {}
    with open(T.VOCAB, "rb") as f:
        for line in f:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    enc = tiktoken.Encoding(name="kimi", pat_str=T.PAT_STR, mergeable_ranks=ranks, special_tokens={})
    data_dir = T.VOCAB.parent / "testdata"
    corpora = {}
    for name in ("mixed_input.txt", "utf8_input.txt"):
        s = (data_dir / name).read_text(encoding="utf-8")
        out = ""
        while len(out.encode()) < (1 << 20):
            out += s
        corpora[name + " x1MiB"] = out
    corpora["generated multilingual"] = T.make_corpus()
    for name, text in corpora.items():
        data = text.encode("utf-8")
        best = 1e9
        for _ in range(3):
            t0 = time.perf_counter()
            ids = T.kimi_encode(enc, text)
            best = min(best, time.perf_counter() - t0)
        with tempfile.NamedTemporaryFile(suffix=".txt") as f:
            f.write(data)
            f.flush()
            p = subprocess.run([k3, "tokenize", "--vocab", str(T.VOCAB), "--file", f.name, "--ids-only", "--timing"],
                               capture_output=True, check=True)
        same = [int(x) for x in p.stdout.split()] == ids
        print(f"{name:28s} {len(data)/1e6:5.2f} MB  tiktoken {len(data)/1e6/best:6.2f} MB/s | {p.stderr.decode().strip()}"
              f" | ids identical: {same}")


if __name__ == "__main__":
    main()
