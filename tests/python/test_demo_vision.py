"""The demo model that sees (models/k3-mini-vision) answers about the committed example pictures
(examples/*.png, drawn by tools/train/vision_data.py; not in its training data: the training
pictures come from a different seed of the same generator), greedy:

- `k3 run -m models/k3-mini-vision --image F -p "What is in the picture?"` (thinking on, as the
  README's command) gives the description, and --no-think questions give colour, shape and count;
- the official `openai` client sends a picture as an image_url data: URL to `k3 serve` and gets the
  answer in message.content;
- the chat page (headless Chromium, as tests/python/test_web_page.py) attaches a picture with its
  file picker, sends it, and shows the answer.

Servers listen on 127.0.0.1 on a free port and are stopped with SIGTERM.
"""
from __future__ import annotations

import sys
import json
import os
import subprocess
from pathlib import Path

import pytest
import test_server_images as tsi

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
DEMO = ROOT / "models" / "k3-mini-vision"
EX = ROOT / "examples"
K3 = tsi.K3
# picture -> its answers (vision_data.answers)
PICTURES = {
    "three_red_circles.png": {"describe": "Three red circles.", "colour": "Red.", "shape": "Circles.",
                              "count": "Three."},
    "one_blue_square.png": {"describe": "One blue square.", "colour": "Blue.", "shape": "Square.", "count": "One."},
    "two_green_triangles.png": {"describe": "Two green triangles.", "colour": "Green.", "shape": "Triangles.",
                                "count": "Two."},
    "four_yellow_circles.png": {"describe": "Four yellow circles.", "colour": "Yellow.", "shape": "Circles.",
                                "count": "Four."},
}
QUESTIONS = {"describe": "What is in the picture?", "colour": "What colour are the shapes?",
             "shape": "What shape are they?", "count": "How many shapes are there?"}


def run(picture, question, *flags):
    assert os.path.exists(K3), f"k3 binary not found at {K3} (build it, or set K3_BIN)"
    r = subprocess.run([K3, "run", "-m", str(DEMO), "--image", str(EX / picture), "-p", question, "--temp", "0",
                        "-n", "24", "--json", "-t", "2", *flags], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["text"]


@pytest.mark.parametrize("picture", list(PICTURES))
def test_k3_run_describes_the_picture(picture):
    text = run(picture, QUESTIONS["describe"])
    # thinking on: an empty thinking block, then the answer in the response channel
    assert text.startswith(f"<|close|>think<|sep|>"), text
    assert f"response<|sep|>{PICTURES[picture]['describe']}<|close|>response" in text, text


def test_k3_run_prints_the_answer_by_channel():
    """Without --json, `k3 run --image` prints the user text, then the answer alone on stdout (no
    chat markup); --json adds the parsed channels beside the raw text."""
    r = subprocess.run([K3, "run", "-m", str(DEMO), "--image", str(EX / "three_red_circles.png"), "-p",
                        QUESTIONS["describe"], "--temp", "0", "-n", "24", "-t", "2", "--no-stats"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{QUESTIONS['describe']}\n{PICTURES['three_red_circles.png']['describe']}\n", r.stdout
    assert "<|" not in r.stderr, r.stderr  # the (empty) thinking prints nothing
    r = subprocess.run([K3, "run", "-m", str(DEMO), "--image", str(EX / "three_red_circles.png"), "-p",
                        QUESTIONS["describe"], "--temp", "0", "-n", "24", "-t", "2", "--json"],
                       capture_output=True, text=True, timeout=120)
    j = json.loads(r.stdout)
    assert j["content"] == PICTURES["three_red_circles.png"]["describe"] and j["reasoning"] == "", j


@pytest.mark.parametrize("qtype", ["colour", "shape", "count"])
def test_k3_run_answers_colour_shape_count(qtype):
    for picture in ("three_red_circles.png", "two_green_triangles.png"):
        text = run(picture, QUESTIONS[qtype], "--no-think")
        assert text.startswith(PICTURES[picture][qtype]), (picture, text)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = tsi.Server(str(DEMO), str(tmp_path_factory.mktemp("demo_vision") / "serve.log"))
    yield s
    s.stop()


def test_openai_client_gets_the_demo_models_answer(server):
    raw = (EX / "three_red_circles.png").read_bytes()
    c = server.client()
    r = c.chat.completions.create(model="x", messages=[tsi.user(QUESTIONS["describe"], tsi.data_url(raw))],
                                  max_tokens=32, temperature=0)
    assert r.choices[0].message.content == "Three red circles."
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.prompt_tokens > 16          # the 16 image tokens are counted
    r = c.chat.completions.create(model="x", messages=[tsi.user(QUESTIONS["count"], tsi.data_url(
        (EX / "four_yellow_circles.png").read_bytes()))], max_tokens=32, temperature=0,
        extra_body={"chat_template_kwargs": {"thinking": False}})
    assert r.choices[0].message.content == "Four."


def test_web_page_sends_a_picture_and_shows_the_answer(server, tmp_path):
    from selenium.webdriver.common.by import By
    from test_web_page import assistant_finished, configure, open_page, start_chromium, wait_for
    driver = start_chromium(tmp_path / "profile", size=(1280, 900))
    try:
        open_page(driver, server, key="none")
        configure(driver, thinking=False, temperature=0, max_tokens=32)
        picker = driver.find_element(By.ID, "attach-file")
        driver.execute_script("arguments[0].hidden = false", picker)
        picker.send_keys(str(EX / "two_green_triangles.png"))
        wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#attachments .thumb")) == 1, "the thumbnail")
        driver.find_element(By.ID, "prompt").send_keys(QUESTIONS["describe"])
        driver.find_element(By.ID, "send").click()
        m = wait_for(driver, assistant_finished, "the answer")
        assert m["error"] is None and m["status"] == "done", m
        assert m["content"].strip() == "Two green triangles.", m
    finally:
        driver.quit()


def test_examples_are_the_generators_pictures():
    """The committed pictures are what tools/train/vision_data.py draws (112×112 RGB)."""
    import numpy as np
    from PIL import Image
    from tools.train import vision_data as vd
    assert set(vd.EXAMPLES) == set(PICTURES)
    for name in PICTURES:
        im = Image.open(EX / name)
        assert im.size == (112, 112) and im.mode == "RGB", name
        assert np.array_equal(np.asarray(im), np.asarray(vd.example(name))), name
        colour, shape, n, _ = vd.EXAMPLES[name]
        assert vd.answers(colour, shape, n) == PICTURES[name]
