"""CLI: python -m tools.gguf_export --model DIR --out FILE.gguf [--no-tokenizer]. Exit 1 with one
'gguf_export: error: ...' line on bad input (never a Python traceback)."""
from __future__ import annotations

import argparse
import sys

from .checkpoint import CheckpointError
from .export import export
from .vocab import VocabError


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.gguf_export",
                                 description="Export a K3 checkpoint folder to GGUF (llama.cpp kimi-k3 layout).")
    ap.add_argument("--model", required=True, help="K3 folder: config.json, safetensors shards + index, tiktoken.model")
    ap.add_argument("--out", required=True, help="output .gguf file")
    ap.add_argument("--no-tokenizer", action="store_true",
                    help="write no vocabulary (tokenizer.ggml.model = none): for checkpoints without "
                         "tiktoken.model such as the bench model; llama.cpp is then fed token ids")
    a = ap.parse_args(argv)
    try:
        export(a.model, a.out, with_tokenizer=not a.no_tokenizer)
    except (CheckpointError, VocabError) as e:
        print(f"gguf_export: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"gguf_export: error: {e.filename or a.out}: {e.strerror or e}", file=sys.stderr)
        return 1
    except (KeyError, TypeError, ValueError, IndexError, OverflowError, MemoryError) as e:
        # Input the checks above do not name (a key of the wrong type deep in config.json, a
        # malformed safetensors header field): one line, the folder and what failed.
        print(f"gguf_export: error: {a.model}: malformed checkpoint ({type(e).__name__}: {e})", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("gguf_export: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
