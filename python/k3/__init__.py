"""k3: the k3.cpp engine for Kimi K3 checkpoints, from Python.

    import k3
    llm = k3.LLM("models/k3-mini")
    print(llm.generate("The capital of France is", max_tokens=16, temperature=0)[0].text)

See k3.LLM (generate, stream, chat, logits, tokenize, detokenize). Engine errors raise k3.Error.
"""
from .llm import LLM, ChatCompletion, Completion, Error, QueueFullError

__all__ = ["LLM", "Completion", "ChatCompletion", "Error", "QueueFullError"]
