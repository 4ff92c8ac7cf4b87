"""Takes docs/web-page.png: the chat page of a real `k3 serve` on models/k3-mini-chat in Debian's
headless chromium, with the model's own greedy answers: a short question, then, in a new
conversation (the list shows both), a question it answers with a tool call.

The page declares no tools of its own, so this script wraps the page's `fetch` (in the browser,
not the page's code) to add the tools of tools/train/chat_tasks.py (lookup_verse, search) to each
chat request; the tool-call block in the picture is what the model generated.
Usage: .venv/bin/python scripts/web_page_picture.py [--out docs/web-page.png]
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import httpx
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
from tools.train.chat_tasks import TOOLS  # noqa: E402

K3 = os.environ.get("K3_BIN", os.path.join(ROOT, "build", "tools", "cli", "k3"))
QUESTIONS = ["Which book comes after Ruth?", "What does Genesis 1:3 say?"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "k3-mini-chat"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "web-page.png"))
    ap.add_argument("--effort", default="low")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="k3-web-picture-")
    log_path = os.path.join(tmp, "serve.log")
    log = open(log_path, "wb")
    srv = subprocess.Popen([K3, "serve", "-m", a.model, "--host", "127.0.0.1", "--port", "0", "-np", "1",
                            "-c", "2048", "-t", "2"], stdout=subprocess.DEVNULL, stderr=log)
    driver = None
    try:
        url, deadline = None, time.time() + 60
        while url is None and time.time() < deadline:
            m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", open(log_path, errors="replace").read())
            url = m.group(1) if m else None
            time.sleep(0.05)
        assert url, open(log_path, errors="replace").read()
        while httpx.get(url + "/health", timeout=5).status_code != 200:
            time.sleep(0.1)
        opts = webdriver.ChromeOptions()
        opts.binary_location = "/usr/bin/chromium"
        for arg in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                    "--force-color-profile=srgb", "--hide-scrollbars", "--window-size=1280,900",
                    "--user-data-dir=" + os.path.join(tmp, "profile")]:
            opts.add_argument(arg)
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
        driver.get(url + "/")
        wait = WebDriverWait(driver, 120, poll_frequency=0.1)
        wait.until(lambda d: d.execute_script("return document.documentElement.dataset.ready === '1'"))
        driver.execute_script("""
          const tools = arguments[0], orig = window.fetch;
          window.fetch = (u, init) => {
            if (String(u).includes('chat/completions')) {
              const b = JSON.parse(init.body);
              b.tools = tools;
              init = Object.assign({}, init, {body: JSON.stringify(b)});
            }
            return orig(u, init);
          };""", TOOLS)
        settings = driver.find_element(By.ID, "settings")
        if not settings.get_attribute("open"):
            settings.find_element(By.TAG_NAME, "summary").click()
        if not driver.find_element(By.ID, "thinking").is_selected():
            driver.find_element(By.ID, "thinking").click()
        Select(driver.find_element(By.ID, "effort")).select_by_value(a.effort)
        for fid, val in (("temperature", "0"), ("max-tokens", "256")):
            e = driver.find_element(By.ID, fid)
            e.clear()
            e.send_keys(val)
        settings.find_element(By.TAG_NAME, "summary").click()
        for i, q in enumerate(QUESTIONS):
            if i:  # each question in its own conversation (the model was tuned on one-question chats)
                driver.find_element(By.ID, "new-chat").click()
                wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, "#messages .msg"))
            driver.find_element(By.ID, "prompt").send_keys(q)
            driver.find_element(By.ID, "send").click()
            wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant")) == 1)
            wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant")[-1]
                       .get_attribute("data-status") != "streaming")
        calls = driver.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant .tool-call")
        if not calls:
            raise SystemExit("web_page_picture: the model made no tool call; no picture taken")
        print(json.dumps({"tool": calls[-1].get_attribute("data-tool"),
                          "args": calls[-1].find_element(By.CSS_SELECTOR, ".tool-args").text}))
        for summ in driver.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant details.thinking summary"):
            summ.click()  # show the thinking too
        time.sleep(0.5)
        assert driver.save_screenshot(a.out), a.out
        print(a.out)
    finally:
        if driver is not None:
            driver.quit()
        srv.send_signal(signal.SIGTERM)
        try:
            srv.wait(timeout=30)
        except subprocess.TimeoutExpired:
            srv.kill()


if __name__ == "__main__":
    main()
