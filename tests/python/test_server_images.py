"""`k3 serve` with images: OpenAI `image_url` content parts holding data: URLs (base64 PNG, JPEG,
WebP) on a gen_tiny checkpoint with a tiny random vision tower, through the official `openai`
client and raw HTTP.

- An image (and several, over several turns) is accepted; the rendered prompt equals `k3 run
  --image`'s for the same turn; usage.prompt_tokens and /tokenize count the image tokens
  (<|media_pad|> ids).
- Bad images get 400/413 bodies naming the message and part: not base64, a truncated PNG, a
  remote URL (never fetched), an unsupported media type, over --max-image-bytes (413), over
  --max-image-pixels (400), over --max-images (413), an image in an assistant message; a text-only
  checkpoint refuses images with 400.
- Two different images with the same ids never share a prefix-cache block; the same image again
  is reused (the server's cache counters).

- The chat page (headless Chromium, as tests/python/test_web_page.py): pictures attached by the
  file picker, by paste and by drop show as thumbnails, are sent as image_url data: URLs before the
  text, stay in the conversation's history, and the answer arrives.

Servers listen on 127.0.0.1 on a free port and are stopped with SIGTERM by their fixture.
"""
from __future__ import annotations

import base64
import io
import json
import os
import re
import signal
import subprocess
import sys
import time

import httpx
import numpy as np
import openai
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))

import gen_tiny  # noqa: E402

K3 = os.environ.get("K3_BIN", os.path.join(ROOT, "build", "tools", "cli", "k3"))
PAD = 256 + 21  # <|media_pad|> of the byte tokenizer


class Server:
    def __init__(self, model, log_path, *flags):
        assert os.path.exists(K3), f"k3 binary not found at {K3} (build it, or set K3_BIN)"
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen([K3, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0", "-t", "2",
                                      "-c", "2048", "--seed", "1", "--alias", "x", *flags],
                                     stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.time() + 60
        self.port = None
        while time.time() < deadline and self.port is None:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.read_log())
            if m:
                self.port = int(m.group(1))
            elif self.proc.poll() is not None:
                raise AssertionError("k3 serve exited early:\n" + self.read_log())
            else:
                time.sleep(0.05)
        assert self.port, self.read_log()
        self.url = f"http://127.0.0.1:{self.port}"
        while time.time() < deadline:
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError("k3 serve never became healthy:\n" + self.read_log())

    def read_log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def client(self):
        return openai.OpenAI(base_url=self.url + "/v1", api_key="none", max_retries=0, timeout=60)

    def post(self, path, body):
        return httpx.post(self.url + path, json=body, timeout=60)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            rc = self.proc.wait(timeout=30)
            assert rc == 0, self.read_log()
        self.log.close()


def picture(w, h, seed, fmt="PNG"):
    from PIL import Image
    a = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(a, "RGB").save(buf, fmt)
    return buf.getvalue()


def data_url(raw, mime="image/png"):
    return f"data:{mime};base64," + base64.b64encode(raw).decode()


def user(text, *urls):
    return {"role": "user", "content": [*({"type": "image_url", "image_url": {"url": u}} for u in urls),
                                        {"type": "text", "text": text}]}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("srv_img_model"))
    gen_tiny.generate(d, "k3", seed=5, vision="tiny")
    gen_tiny.write_byte_tokenizer(d)
    t = str(tmp_path_factory.mktemp("srv_txt_model"))
    gen_tiny.generate(t, "k3", seed=5)
    gen_tiny.write_byte_tokenizer(t)
    return d, t


@pytest.fixture(scope="module")
def server(models, tmp_path_factory):
    s = Server(models[0], str(tmp_path_factory.mktemp("srv_img") / "serve.log"), "-np", "2",
               "--max-image-bytes", "200000", "--max-image-pixels", "40000", "--max-images", "3")
    yield s
    s.stop()


def test_openai_client_sends_an_image_and_the_prompt_equals_k3_run(server, models, tmp_path):
    raw = picture(84, 56, 1)
    r = server.client().chat.completions.create(
        model="x", messages=[user("What is in the picture?", data_url(raw))], max_tokens=4, temperature=0,
        extra_body={"chat_template_kwargs": {"thinking": False}})
    assert r.choices[0].finish_reason in ("length", "stop")
    f = tmp_path / "a.png"
    f.write_bytes(raw)
    run = subprocess.run([K3, "run", "-m", models[0], "--image", str(f), "-p", "What is in the picture?", "-n", "4",
                          "--temp", "0", "--no-think", "--json", "-t", "2"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    j = json.loads(run.stdout)
    # usage counts every prompt id, the 6 image tokens included
    assert r.usage.prompt_tokens == len(j["prompt_ids"])
    assert r.usage.completion_tokens == len(j["ids"])
    # /tokenize shows the image tokens as <|media_pad|> ids
    t = server.post("/tokenize", {"messages": [user("What is in the picture?", data_url(raw))],
                                  "chat_template_kwargs": {"thinking": False}}).json()
    assert t["tokens"] == j["prompt_ids"] and t["tokens"].count(PAD) == 6


def test_several_images_per_message_and_per_conversation(server):
    a, b, c = picture(84, 56, 1), picture(56, 56, 2, "JPEG"), picture(56, 84, 3, "WEBP")
    msgs = [user("Compare these.", data_url(a), data_url(b, "image/jpeg")),
            {"role": "assistant", "content": "They differ."},
            user("And this one?", data_url(c, "image/webp"))]
    t = server.post("/tokenize", {"messages": msgs}).json()
    runs = []
    ids = t["tokens"]
    i = 0
    while i < len(ids):
        if ids[i] == PAD:
            j = i
            while j < len(ids) and ids[j] == PAD:
                j += 1
            runs.append(j - i)
            i = j
        else:
            i += 1
    assert runs == [6, 4, 6]
    r = server.client().chat.completions.create(model="x", messages=msgs, max_tokens=2, temperature=0)
    assert r.usage.prompt_tokens == len(ids)


def expect_error(resp, status, *needles):
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    for n in needles:
        assert n in err["message"], err["message"]
    return err


def test_bad_images_get_clear_errors(server):
    good = picture(56, 56, 4)
    chat = lambda *msgs: server.post("/v1/chat/completions", {"messages": list(msgs), "max_tokens": 1})
    expect_error(chat(user("x", "data:image/png;base64,@@@@")), 400, "messages[0].content[0]", "base64")
    expect_error(chat(user("x", "data:image/png;base64,abc")), 400, "messages[0].content[0]", "multiple of 4")
    expect_error(chat({"role": "system", "content": "s"}, user("x", data_url(good), data_url(good[:80]))), 400,
                 "messages[1].content[1]")
    expect_error(chat(user("x", "https://example.com/cat.png")), 400, "messages[0].content[0]", "does not fetch")
    expect_error(chat(user("x", data_url(good, "image/gif"))), 400, "image/gif")
    expect_error(chat(user("x", "data:image/png,rawbytes")), 400, "base64")
    big = b"\x89PNG" + b"\0" * 200000
    expect_error(chat(user("x", data_url(big))), 413, "messages[0].content[0]", "200000 bytes", "--max-image-bytes")
    expect_error(chat(user("x", data_url(picture(224, 224, 5)))), 400, "messages[0].content[0]",
                 "over the limit of 40000")
    expect_error(chat(user("x", *[data_url(good)] * 4)), 413, "messages[0].content[3]", "--max-images")
    expect_error(chat(user("x"), {"role": "assistant", "content": [{"type": "image_url",
                                                                   "image_url": {"url": data_url(good)}}]}),
                 400, "messages[1].content[0]", "user message")
    expect_error(chat(user("x", data_url(b"not an image at all"))), 400, "messages[0].content[0]")
    # the server still answers
    r = server.client().chat.completions.create(model="x", messages=[user("ok", data_url(good))], max_tokens=1)
    assert r.choices


def test_text_only_checkpoint_refuses_images(models, tmp_path):
    s = Server(models[1], str(tmp_path / "serve.log"))
    try:
        resp = s.post("/v1/chat/completions", {"messages": [user("x", data_url(picture(56, 56, 6)))],
                                               "max_tokens": 1})
        expect_error(resp, 400, "messages[0].content[0]", "no vision tower")
    finally:
        s.stop()


def hits(server):
    text = httpx.get(server.url + "/metrics", timeout=10).text
    m = re.search(r"^\S*prefix_cache_hits_total(?:\{[^}]*\})? (\S+)$", text, re.M)
    assert m, text
    return float(m.group(1))


def test_prefix_cache_reuses_the_same_image_and_never_another(server):
    text = "Describe the picture in detail, please. " * 6
    a, b = data_url(picture(84, 56, 7)), data_url(picture(84, 56, 8))
    kw = {"chat_template_kwargs": {"thinking": False}}
    ids = server.post("/tokenize", {"messages": [user(text, a)], **kw}).json()["tokens"]
    pos = ids.index(PAD)

    def ask(url):
        h0 = hits(server)
        r = server.client().chat.completions.create(model="x", messages=[user(text, url)], max_tokens=3,
                                                     temperature=0, extra_body=kw)
        return r.choices[0].message.content, hits(server) - h0

    out_a, _ = ask(a)
    again, reused = ask(a)  # the same picture: its blocks are reused
    assert reused >= pos + 6 and again == out_a
    out_b, reused = ask(b)  # another picture, the same ids: no block holding the image is shared
    assert reused <= pos
    again, reused = ask(b)
    assert reused >= pos + 6 and again == out_b


# --- the web page: pictures by file picker, paste and drag-and-drop (headless Chromium) ----------

def test_web_page_attaches_pictures_by_picker_paste_and_drop(server, tmp_path):
    from selenium.webdriver.common.by import By
    from test_web_page import assistant_finished, configure, open_page, page_state, start_chromium, wait_for
    driver = start_chromium(tmp_path / "profile", size=(1280, 900))
    try:
        open_page(driver, server, key="none")
        configure(driver, thinking=False, temperature=0, max_tokens=2)
        # record the page's requests (in the browser, around the page's fetch)
        driver.execute_script("""
          window.__bodies = [];
          const f = window.fetch;
          window.fetch = (u, o) => { if (o && o.body) window.__bodies.push(JSON.parse(o.body)); return f(u, o); };""")
        a = tmp_path / "a.png"
        a.write_bytes(picture(84, 56, 11))
        picker = driver.find_element(By.ID, "attach-file")
        driver.execute_script("arguments[0].hidden = false", picker)
        picker.send_keys(str(a))
        b64 = base64.b64encode(picture(56, 56, 12)).decode()
        # paste into the message box, then drop onto the composer: a File in a DataTransfer
        driver.execute_script("""
          const bytes = Uint8Array.from(atob(arguments[0]), (c) => c.charCodeAt(0));
          const mk = (n) => { const d = new DataTransfer(); d.items.add(new File([bytes], n, {type: 'image/png'})); return d; };
          const prompt = document.getElementById('prompt');
          prompt.dispatchEvent(new ClipboardEvent('paste', {clipboardData: mk('pasted.png'), bubbles: true, cancelable: true}));
          document.getElementById('composer').dispatchEvent(
              new DragEvent('drop', {dataTransfer: mk('dropped.png'), bubbles: true, cancelable: true}));""", b64)
        wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#attachments .thumb")) == 3,
                 "three pending thumbnails")
        driver.find_element(By.ID, "prompt").send_keys("What is in these pictures?")
        driver.find_element(By.ID, "send").click()
        m = wait_for(driver, assistant_finished, "the answer")
        assert m["error"] is None and m["status"] == "done", m
        # thumbnails in the conversation, none pending
        assert len(driver.find_elements(By.CSS_SELECTOR, "#messages .msg.user .thumb")) == 3
        assert not driver.find_elements(By.CSS_SELECTOR, "#attachments .thumb")
        body = driver.execute_script("return window.__bodies")[-1]
        parts = body["messages"][-1]["content"]
        assert [p["type"] for p in parts] == ["image_url"] * 3 + ["text"]
        assert all(p["image_url"]["url"].startswith("data:image/png;base64,") for p in parts[:3])
        assert parts[1]["image_url"]["url"].endswith(b64[-40:])
        # a second turn resends the pictures of the first (the conversation's history)
        driver.find_element(By.ID, "prompt").send_keys("And now?")
        driver.find_element(By.ID, "send").click()
        wait_for(driver, lambda d: len([x for x in page_state(d) if x["role"] == "assistant"]) == 2
                 and assistant_finished(d), "the second answer")
        body = driver.execute_script("return window.__bodies")[-1]
        assert sum(1 for msg in body["messages"] if isinstance(msg["content"], list)) == 1
    finally:
        driver.quit()
