"""KJV data prep: `bible -f "Genesis 1:1-Revelation 22:21"` (Debian bible-kjv) → verse text.

Verse references ("Ge1:1 ") are stripped; one verse per line, '\n'-terminated.
Split: train = Genesis..Jude, held-out = Revelation (the last book, 404 verses).
Usage: python -m tools.train.data OUT_DIR  → OUT_DIR/train.txt, OUT_DIR/heldout.txt
"""
import re
import subprocess
import sys
from pathlib import Path

REF = re.compile(r"^([1-3]?[A-Za-z]+)(\d+):(\d+) (.*)$")
HELDOUT_BOOKS = {"Rev", "Re"}


def load_kjv():
    out = subprocess.run(["bible", "-f", "Genesis 1:1-Revelation 22:21"], check=True,
                         capture_output=True, text=True).stdout
    verses = []
    for line in out.splitlines():
        if not line.strip():
            continue
        m = REF.match(line)
        assert m, line
        verses.append((m.group(1), m.group(4).strip()))
    return verses


def main(out_dir):
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    verses = load_kjv()
    train = [t for b, t in verses if b not in HELDOUT_BOOKS]
    held = [t for b, t in verses if b in HELDOUT_BOOKS]
    assert len(held) > 300 and len(train) > 30000, (len(held), len(train))
    (out / "train.txt").write_text("".join(t + "\n" for t in train))
    (out / "heldout.txt").write_text("".join(t + "\n" for t in held))
    print(f"verses train={len(train)} heldout={len(held)}")


if __name__ == "__main__":
    main(sys.argv[1])
