"""Held-out accuracy of a picture model through the engine: `k3 serve` (default numerics) answering
the four questions of tools/train/vision_data.py about N generated pictures, sent by the `openai`
client as image_url data: URLs, greedy, thinking on and off. The pictures are those of
train_vision.py's evaluation for the same seed (vision_data.sample drawn N times from
numpy.random.default_rng(SEED)); an answer counts when message.content equals it exactly.
Usage: python -m tools.train.eval_vision_engine --k3 build/tools/cli/k3 --model models/k3-mini-vision [--n 200] [--seed 1235]
Prints one JSON object: accuracy per question type and thinking mode, n, seed.
"""
import argparse
import base64
import io
import json
import re
import signal
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import openai

from tools.train import vision_data as vd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--k3", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1235)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    pics = []
    for _ in range(a.n):
        im, c, s, k = vd.sample(rng)
        buf = io.BytesIO()
        im.save(buf, "PNG")
        pics.append(("data:image/png;base64," + base64.b64encode(buf.getvalue()).decode(), vd.answers(c, s, k)))
    log = tempfile.NamedTemporaryFile("w+b", suffix=".log")
    proc = subprocess.Popen([a.k3, "serve", "-m", a.model, "--host", "127.0.0.1", "--port", "0", "-np", "4",
                             "-t", str(a.threads), "-c", "1024", "--alias", "m"], stdout=subprocess.DEVNULL, stderr=log)
    try:
        port, deadline = None, time.time() + 60
        while port is None and time.time() < deadline:
            m = re.search(rb"listening on http://127\.0\.0\.1:(\d+)", open(log.name, "rb").read())
            if m:
                port = int(m.group(1))
            elif proc.poll() is not None:
                raise SystemExit("k3 serve exited: " + open(log.name, "rb").read().decode("utf-8", "replace"))
            else:
                time.sleep(0.05)
        if port is None:
            raise SystemExit("k3 serve did not start within 60 s")
        time.sleep(0.5)
        c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=3, timeout=120)

        def ask(job):
            url, qt, think, want = job
            r = c.chat.completions.create(model="m", max_tokens=32, temperature=0, messages=[{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": vd.QUESTIONS[qt]}]}],
                extra_body={"chat_template_kwargs": {"thinking": think}})
            return (qt, think, r.choices[0].message.content == want)

        jobs = [(url, qt, think, ans[qt]) for url, ans in pics for qt in vd.QUESTIONS for think in (True, False)]
        with ThreadPoolExecutor(4) as ex:
            results = list(ex.map(ask, jobs))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    acc = {}
    for qt in vd.QUESTIONS:
        for think in (True, False):
            ok = [r[2] for r in results if r[0] == qt and r[1] == think]
            acc[f"{qt}/{'think' if think else 'no_think'}"] = sum(ok) / len(ok)
    print(json.dumps({"engine_accuracy": acc, "n": a.n, "seed": a.seed, "model": a.model}))


if __name__ == "__main__":
    main()
