"""The C++ Kimi tokenizer (`k3 tokenize --ids-only`) against the `tiktoken` library.

A deterministic multilingual corpus of more than 1 MB (English with contractions, Chinese,
Japanese, Korean, code, emoji/ZWJ, CRLF and odd whitespace, long digit runs, random assigned
code points, random bytes decoded as UTF-8) is encoded by tiktoken with Kimi's pat_str and the
real ranks, with tokenization_kimi.py's 400k/25k chunking, and by the C++ encoder. Zero
differences are required. Prints both encoders' throughput (MB/s).

Needs the `k3` binary: $K3_BIN, else build/tools/cli/k3 (scripts/test.sh builds it).
"""
import base64
import os
import random
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

import pytest
import tiktoken

ROOT = Path(__file__).resolve().parents[2]
VOCAB = ROOT.parent / "shared" / "data" / "kimi-tokenizer" / "tiktoken.model"

PAT_STR = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])


def k3_bin():
    cands = [os.environ.get("K3_BIN"), ROOT / "build/tools/cli/k3", ROOT / "build-tok/tools/cli/k3"]
    for c in cands:
        if c and Path(c).is_file():
            return str(c)
    raise FileNotFoundError("k3 binary not found: set K3_BIN or build build/tools/cli/k3")


@pytest.fixture(scope="module")
def enc():
    ranks = {}
    with open(VOCAB, "rb") as f:
        for line in f:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    n = len(ranks)
    specials = {f"<|reserved_token_{i}|>": i for i in range(n, n + 256)}
    return tiktoken.Encoding(name="kimi_k3", pat_str=PAT_STR, mergeable_ranks=ranks, special_tokens=specials)


def _split_runs(s, max_len):
    """tokenization_kimi.py's _split_whitespaces_or_nonwhitespaces."""
    cur_len = 0
    cur_space = s[0].isspace() if s else False
    start = 0
    for i in range(len(s)):
        now = s[i].isspace()
        if cur_space ^ now:
            cur_len = 1
            cur_space = now
        else:
            cur_len += 1
            if cur_len > max_len:
                yield s[start:i]
                start = i
                cur_len = 1
    yield s[start:]


def kimi_encode(enc, text):
    out = []
    for i in range(0, len(text), 400_000):
        for sub in _split_runs(text[i:i + 400_000], 25_000):
            out.extend(enc.encode(sub, disallowed_special=()))
    return out


# ---------------------------------------------------------------- corpus
WORDS = ("the of and to in is you that it he was for on are as with his they I at be this have from or one had by "
         "word but not what all were we when your can said there use an each which she do how their if will up other "
         "about out many then them these so some her would make like him into time has look two more write go see "
         "number no way could people my than first water been call who oil its now find long down day did get come "
         "made may part HTTPRequest getUserName XMLHttpRequest iPhone McDonald naïve café résumé Zürich straße "
         "Ελληνικά русский язык עברית العربية हिन्दी ภาษาไทย").split()
CONTRACTIONS = ["don't", "I'M", "they'RE", "We'LL", "it'S", "you'Ve", "he'd", "CAN'T", "O'Neil", "rock'n'roll",
                "it’s", "IT'ſ", "'twas", "Y'all'd've"]
ZH = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持音"
JA = "東京タワーは高いです。私は日本語を勉強しています。々〆ー・「こんにちは」カタカナひらがな漢字〇〻"
PUNCT = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~，。、！？；：「」『』（）【】…—～·¡¿«»“”‘’")
EMOJI = ["😀", "🎉", "🚀", "👍🏽", "👨‍👩‍👧‍👦", "❤️", "🇯🇵", "🏳️‍🌈", "✊🏿", "🧑‍💻", "☕", "1️⃣", "🫠"]
WS = [" ", "  ", "\t", "\n", "\r\n", "\r", "\n\n", "\u00a0", "\u3000", "\u0085", "\u2028", "\u2009", "\x0b", "\x0c",
      " \n ", "   \t\n   ", "\x1c", "\x1f"]
CODE = [
    "def f(x):\r\n    return x**2  # square\r\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * 1.5e-3;\n}\n",
    '{"key": [1, 2, 3], "nested": {"a": null, "b": true}}\n',
    "<div class=\"x\">&amp;&lt;</div>\n",
    "SELECT * FROM users WHERE id = 42 AND name LIKE '%bob%';\n",
    "    if (x != y) { throw std::runtime_error(\"bad\"); }\n",
    "const getUserName = async () => await fetch(`/api/${id}`);\n",
    "<|open|>message role=\"user\"<|sep|>[EOS]<|end_of_msg|>[BOS]<|reserved_token_163700|>\n",
]


def assigned_codepoints():
    cps = []
    for c in range(0x20, 0x30000):
        if 0xD800 <= c <= 0xDFFF:
            continue
        if unicodedata.category(chr(c)) not in ("Cn", "Cs", "Co"):
            cps.append(c)
    return cps


def make_corpus(seed=1234, target=1_100_000):
    rng = random.Random(seed)
    cps = assigned_codepoints()
    parts = []
    size = 0

    def add(s):
        nonlocal size
        parts.append(s)
        size += len(s.encode("utf-8"))

    while size < target:
        kind = rng.randrange(11)
        if kind == 0:  # English prose with contractions and punctuation
            ws = [rng.choice(WORDS + CONTRACTIONS) for _ in range(rng.randint(5, 40))]
            s = " ".join(ws)
            add(s[0].upper() + s[1:] + rng.choice([". ", "! ", "? ", ".\n", ",\r\n"]))
        elif kind == 1:  # Chinese
            s = "".join(rng.choice(ZH) for _ in range(rng.randint(2, 60)))
            add(s + rng.choice(["。", "，", "！", "。\n", "、", "English混合", " 2024年"]))
        elif kind == 2:  # Japanese
            add("".join(rng.choice(JA) for _ in range(rng.randint(3, 40))) + rng.choice(["。\n", "、", " "]))
        elif kind == 3:  # Korean
            s = "".join(chr(rng.randint(0xAC00, 0xD7A3)) for _ in range(rng.randint(2, 30)))
            add(s + rng.choice([" ", "와中文混合 ", ".\n", "다. "]))
        elif kind == 4:  # code
            add(rng.choice(CODE))
        elif kind == 5:  # emoji runs
            add(rng.choice(["", " "]) + "".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 8))) + rng.choice(WS))
        elif kind == 6:  # whitespace / CRLF runs
            add("".join(rng.choice(WS) for _ in range(rng.randint(1, 12))) + rng.choice(WORDS))
        elif kind == 7:  # long digit runs
            add(rng.choice(["", " ", "$", "-", "x"]) + "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 80)))
                + rng.choice(["", ".5", ",000", "٣٤٥", "１２３", "²³", "Ⅻ", " "]))
        elif kind == 8:  # random assigned code points (Unicode 14 as in PCRE2 10.42 and Python 3.11)
            add("".join(chr(rng.choice(cps)) for _ in range(rng.randint(1, 30))) + rng.choice(WS + [""]))
        elif kind == 9:  # random bytes decoded as UTF-8 with replacement
            b = bytes(rng.randrange(256) for _ in range(rng.randint(1, 40)))
            add(b.decode("utf-8", errors="replace"))
        else:  # punctuation mixes and letters with combining marks
            s = "".join(rng.choice(PUNCT + ["e\u0301", "a\u0308", "ǅ", "ʰ", "ſ", "İ", "ﬁ", "'s", "'LL", "'d"])
                        for _ in range(rng.randint(1, 20)))
            add(s + rng.choice(WS + [""]))
    return "".join(parts)


def run_k3_ids(path, extra=()):
    p = subprocess.run([k3_bin(), "tokenize", "--vocab", str(VOCAB), "--file", str(path), "--ids-only", "--timing", *extra],
                       capture_output=True, check=True)
    ids = [int(x) for x in p.stdout.split()]
    return ids, p.stderr.decode()


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def test_multilingual_corpus_matches_tiktoken(enc, tmp_path):
    text = make_corpus()
    data = text.encode("utf-8")
    assert len(data) >= 1_000_000
    path = tmp_path / "corpus.txt"
    path.write_bytes(data)

    t0 = time.perf_counter()
    expected = kimi_encode(enc, text)
    py_s = time.perf_counter() - t0
    got, timing = run_k3_ids(path)

    if got != expected:
        i = first_diff(got, expected)
        ctx = enc.decode_bytes(expected[max(0, i - 5):i + 5])
        pytest.fail(f"first difference at id #{i} of {len(expected)}: got {got[i:i+5]} expected {expected[i:i+5]} near {ctx!r}")
    assert enc.decode_bytes(expected) == data
    print(f"\ncorpus {len(data)/1e6:.2f} MB, {len(expected)} ids: tiktoken {len(data)/1e6/py_s:.2f} MB/s; "
          f"k3 {timing.strip()}", file=sys.stderr)


def test_invalid_utf8_bytes_are_replaced_like_python(enc, tmp_path):
    rng = random.Random(99)
    raw = b"".join(bytes(rng.randrange(256) for _ in range(rng.randint(1, 60))) + b" ok\n" for _ in range(2000))
    path = tmp_path / "raw.bin"
    path.write_bytes(raw)
    got, _ = run_k3_ids(path)
    assert got == kimi_encode(enc, raw.decode("utf-8", errors="replace"))


def test_pathological_long_runs_match_kimi_chunking(enc, tmp_path):
    text = " " * 60_000 + "a" * 60_000 + "\n" * 30_001 + "x" + "é" * 26_000 + "1" * 30_000 + " end"
    path = tmp_path / "long.txt"
    path.write_bytes(text.encode("utf-8"))
    got, _ = run_k3_ids(path)
    assert got == kimi_encode(enc, text)
