"""A tool-using agent against `k3 serve`, with the official openai client.

The model (models/k3-mini-chat) gets two tools over the King James Bible, lookup_verse(book,
chapter, verse) and search(text); this script runs the calls it makes locally
(tools/train/chat_tasks.py's executor) and sends the results back until the model answers.

    ./build/tools/cli/k3 serve -m models/k3-mini-chat --port 8080 &
    .venv/bin/python examples/agent.py "What does Genesis 1:3 say?"
    .venv/bin/python examples/agent.py --effort high 'Where is the verse that says "the LORD is my shepherd"?'

Prints each tool call, its result and the final answer (the last line); exits 1 when the model
gives no answer within --max-turns turns or a turn is cut by --max-tokens.
"""
import argparse
import os
import sys

import openai

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tools.train.chat_tasks import TOOLS, execute_tool  # noqa: E402


def run(client, question, *, model="k3-mini-chat", effort="low", max_turns=4, max_tokens=512, log=print):
    """The agent loop; returns the model's final answer text, or None when there is none."""
    messages = [{"role": "user", "content": question}]
    for _ in range(max_turns):
        r = client.chat.completions.create(model=model, messages=messages, tools=TOOLS,
                                           reasoning_effort=effort, temperature=0, max_tokens=max_tokens)
        choice = r.choices[0]
        msg = choice.message
        reasoning = getattr(msg, "reasoning_content", None)
        # K3 keeps its reasoning in the history: send it back with the turn.
        turn = {"role": "assistant", "content": msg.content or "", "reasoning_content": reasoning}
        if choice.finish_reason == "length":
            log(f"[turn cut at --max-tokens {max_tokens}]")
            return None
        if not msg.tool_calls:
            return msg.content
        turn["tool_calls"] = [{"id": c.id, "type": "function",
                               "function": {"name": c.function.name, "arguments": c.function.arguments}}
                              for c in msg.tool_calls]
        messages.append(turn)
        for c in msg.tool_calls:
            result = execute_tool(c.function.name, c.function.arguments)
            log(f"-> {c.function.name}({c.function.arguments})")
            log(f"<- {result}")
            messages.append({"role": "tool", "tool_call_id": c.id, "name": c.function.name, "content": result})
    log(f"[no answer within {max_turns} turns]")
    return None


def main():
    ap = argparse.ArgumentParser(description="An agent loop with lookup_verse / search against k3 serve")
    ap.add_argument("question")
    ap.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    ap.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", "none"))
    ap.add_argument("--model", default="k3-mini-chat")
    ap.add_argument("--effort", default="low", choices=["low", "high", "max"])
    ap.add_argument("--max-turns", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=512)
    a = ap.parse_args()
    client = openai.OpenAI(base_url=a.base_url, api_key=a.api_key, max_retries=0, timeout=120)
    answer = run(client, a.question, model=a.model, effort=a.effort, max_turns=a.max_turns,
                 max_tokens=a.max_tokens)
    if answer is None:
        sys.exit(1)
    print(answer)


if __name__ == "__main__":
    main()
