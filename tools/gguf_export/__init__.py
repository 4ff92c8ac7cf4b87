"""K3 checkpoint → GGUF in llama.cpp's kimi-k3 layout.

    .venv/bin/python -m tools.gguf_export --model DIR --out FILE.gguf [--no-tokenizer]

Modules: checkpoint.py (opens and validates a published K3 folder), mxfp4_blocks.py (the
compressed-tensors → ggml block_mxfp4 re-blocking), vocab.py (tiktoken.model → GGUF tokens,
types and merges), export.py (the kimi-k3 metadata and tensor plan, written with the `gguf`
package from PyPI). Layout facts: docs/architecture.md "GGUF export".
"""
