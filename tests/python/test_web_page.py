"""Browser tests of the chat page that `k3 serve` serves at `/`: Debian's chromium,
headless, driven through chromium-driver by selenium, against a real `k3 serve` on models/k3-mini
on a free loopback port.

Covered: the page's headers (no key needed, a Content-Security-Policy that allows this origin
only, the embedded bytes equal tools/server/web/*), streamed text arriving in several steps and
equal to the API's greedy answer, a multi-turn conversation sent as history, reload restoring the
conversation, the thinking channel collapsed / dimmed / expandable, tool calls as structured
blocks, Stop cancelling a long answer and freeing the server's only slot, HTML in a prompt and in
the model's output shown as text, server errors (401, 400) shown in the page; the libraries
(marked, DOMPurify, highlight.js, KaTeX and its woff2 fonts: Debian's files) served from /vendor/; a
Markdown answer rendered, highlighted and sanitized, with code-block and message Copy (a recording
clipboard stub); math typeset by KaTeX (not in code, not prices, no links or scripts from math);
Regenerate,
Edit and resend; the conversation list (switch, Ctrl+Shift+O, rename, delete, reload, the phone
drawer), export / import as JSON with malformed files refused; the system prompt per conversation;
tokens and tokens/s under each answer; Esc, Shift+Enter and the help; dark mode; stored data that
is bad or of the earlier format. Screenshots at a phone and a desktop window size are written to
$K3_TEST_ARTIFACTS (default build/test-artifacts/web/ of $K3_ROOT or this checkout) and their paths
printed.

Deterministic answers come from the server's --test-forced-output: the test wraps the page's
`fetch` (in the browser, never in the page's code) to add "k3_forced_output" to one request.
Every wait is an explicit condition with a generous timeout (a slow 2-core CI machine).
The binary is $K3_BIN, else $K3_ROOT/build/tools/cli/k3, else build/tools/cli/k3 of this checkout.
"""
import json
import os
import re
import time

import httpx
import pytest
import test_server_openai as server_fixture
from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
K3_ROOT = os.environ.get("K3_ROOT", ROOT)
K3 = os.environ.get("K3_BIN", os.path.join(K3_ROOT, "build", "tools", "cli", "k3"))
MINI = os.path.join(ROOT, "models", "k3-mini")
WEB = os.path.join(ROOT, "tools", "server", "web")
ARTIFACTS = os.environ.get("K3_TEST_ARTIFACTS", os.path.join(K3_ROOT, "build", "test-artifacts", "web"))
CHROMIUM = "/usr/bin/chromium"          # Debian 12 package chromium (scripts/setup.sh)
CHROMEDRIVER = "/usr/bin/chromedriver"  # Debian 12 package chromium-driver
KEY = "web-test-key"
WAIT = 90  # seconds: the longest any single condition may take on a slow machine

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MINI, "config.json")), reason="models/k3-mini missing")

DESKTOP = (1280, 900)
PHONE = (390, 844)


# --- the server -------------------------------------------------------------------------------

class Server(server_fixture.Server):
    """test_server_openai's server, plus the API's own answer and the metrics text."""

    def __init__(self, log_path, *flags):
        super().__init__(log_path, *flags, start_timeout=WAIT)

    def chat(self, messages, **kw):
        """The API's own non-streamed answer, to compare the page with."""
        r = httpx.post(self.url + "/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"},
                       json={"messages": messages, **kw}, timeout=WAIT)
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["message"]

    def metrics(self):
        return httpx.get(self.url + "/metrics", headers={"Authorization": f"Bearer {KEY}"}, timeout=10).text


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # One slot and no queue: a request that still held the slot would make the next one a 429.
    s = Server(str(tmp_path_factory.mktemp("web") / "serve.log"), "-np", "1", "--queue", "0", "-c", "4096",
               "-t", "2", "--api-key", KEY, "--test-forced-output", "--seed", "1")
    yield s
    s.stop()


def metric(text, name, labels=""):
    m = re.search(r"^k3:" + re.escape(name) + r"(\{[^}]*" + re.escape(labels) + r"[^}]*\})? ([0-9.e+-]+)$", text, re.M)
    return float(m.group(2)) if m else 0.0


# --- the browser ------------------------------------------------------------------------------

def start_chromium(profile_dir, size=DESKTOP, log_path=None):
    """A headless Debian chromium under chromedriver (selenium), with a fresh profile in
    profile_dir, the window size (width, height) in CSS px, browser console logs kept and the
    page-load / script timeouts at WAIT seconds. The caller quits it."""
    for path, pkg in [(CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")]:
        assert os.path.exists(path), f"{path} missing: install Debian's {pkg} (scripts/setup.sh does)"
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--no-first-run",
              "--disable-extensions", "--disable-background-networking", "--disable-component-update",
              "--disable-sync", "--disable-default-apps", "--force-color-profile=srgb", "--hide-scrollbars",
              f"--window-size={size[0]},{size[1]}", "--user-data-dir=" + str(profile_dir)]:
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(CHROMEDRIVER, log_path=str(log_path)) if log_path else Service(CHROMEDRIVER)
    driver = webdriver.Chrome(service=service, options=opts)
    driver.set_page_load_timeout(WAIT)
    driver.set_script_timeout(WAIT)
    return driver


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = start_chromium(tmp_path_factory.mktemp("chromium-profile"),
                            log_path=tmp_path_factory.mktemp("chromedriver") / "chromedriver.log")
    yield driver
    driver.quit()


def wait_for(driver, cond, what, timeout=WAIT):
    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.05).until(lambda d: cond(d))
    except TimeoutException:
        raise AssertionError(f"timed out after {timeout} s waiting for {what}; page state: {page_state(driver)}")


def page_state(driver):
    """Every message of the page as the user sees it (text only)."""
    return driver.execute_script("""
      // content / reasoning: the text the page renders (kept as data-source where it is rendered
      // as Markdown); shown: the text of the rendered content.
      const source = (e) => e.dataset.source !== undefined ? e.dataset.source : e.textContent;
      return [...document.querySelectorAll('#messages .msg')].map((m) => {
        const q = (s) => m.querySelector(s);
        return {role: m.dataset.role, status: m.dataset.status || null, content: source(q('.content')),
                shown: q('.content').textContent,
                reasoning: q('.thinking-text') ? source(q('.thinking-text')) : null,
                tools: [...m.querySelectorAll('.tool-call')].map((t) => ({name: t.dataset.tool,
                        args: t.querySelector('.tool-args').textContent})),
                error: q('.error') && !q('.error').hidden ? q('.error').textContent : null,
                meta: q('.meta') ? q('.meta').textContent : null};
      });""")


def last_assistant(driver):
    msgs = [m for m in page_state(driver) if m["role"] == "assistant"]
    return msgs[-1] if msgs else None


def assistant_finished(driver):
    m = last_assistant(driver)
    return m if m and m["status"] != "streaming" else None


def open_page(driver, server, key=KEY):
    driver.get(server.url + "/")
    wait_for(driver, lambda d: d.execute_script("return document.documentElement.dataset.ready === '1'"), "app.js")
    settings = driver.find_element(By.ID, "settings")
    if not settings.get_attribute("open"):
        settings.find_element(By.TAG_NAME, "summary").click()
    set_field(driver, "api-key", key)


def set_field(driver, element_id, value):
    e = driver.find_element(By.ID, element_id)
    e.clear()
    e.send_keys(str(value))


def configure(driver, thinking, temperature=None, max_tokens=None, effort=None):
    box = driver.find_element(By.ID, "thinking")
    if box.is_selected() != thinking:
        box.click()
    if effort:
        Select(driver.find_element(By.ID, "effort")).select_by_value(effort)
    if temperature is not None:
        set_field(driver, "temperature", temperature)
    if max_tokens is not None:
        set_field(driver, "max-tokens", max_tokens)


def new_chat(driver):
    driver.find_element(By.ID, "new-chat").click()
    wait_for(driver, lambda d: page_state(d) == [], "an empty conversation")


def hook_fetch(driver, forced=None):
    """Wraps the page's fetch: records each chat request body, and adds k3_forced_output (once)."""
    driver.execute_script("""
      window.__k3force = arguments[0];
      if (!window.__k3bodies) {
        window.__k3bodies = [];
        const orig = window.fetch;
        window.fetch = (url, init) => {
          if (String(url).includes('chat/completions')) {
            if (window.__k3force !== null) {
              const b = JSON.parse(init.body);
              b.k3_forced_output = window.__k3force;
              window.__k3force = null;
              init = Object.assign({}, init, {body: JSON.stringify(b)});
            }
            window.__k3bodies.push(JSON.parse(init.body));
          }
          return orig(url, init);
        };
      }""", forced)


def observe_growth(driver):
    """Records the visible length of the last assistant message at every DOM change."""
    driver.execute_script("""
      window.__k3lens = [];
      new MutationObserver(() => {
        const m = [...document.querySelectorAll('#messages .msg.assistant')].pop();
        if (m) window.__k3lens.push([m.dataset.status, m.querySelector('.content').textContent.length]);
      }).observe(document.getElementById('messages'),
                 {subtree: true, childList: true, characterData: true, attributes: true});""")


def send(driver, text):
    n_before = len([m for m in page_state(driver) if m["role"] == "assistant"])
    box = driver.find_element(By.ID, "prompt")
    box.send_keys(text)
    driver.find_element(By.ID, "send").click()
    wait_for(driver, lambda d: len([m for m in page_state(d) if m["role"] == "assistant"]) == n_before + 1,
             "the answer's message")


def request_bodies(driver):
    return driver.execute_script("return window.__k3bodies || []")


def assert_no_script_errors(driver):
    """No uncaught exception and no Content-Security-Policy refusal in the browser console."""
    bad = [e["message"] for e in driver.get_log("browser")
           if "Uncaught" in e["message"] or "Content Security Policy" in e["message"] or "Refused to" in e["message"]]
    assert not bad, bad


def screenshot(driver, name, size, capsys):
    """Renders the page at `size` (a phone size as a mobile viewport) and saves it under ARTIFACTS."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": size[0], "height": size[1], "deviceScaleFactor": 1, "mobile": size[0] < 600})
    wait_for(driver, lambda d: d.execute_script("return window.innerWidth") == size[0], f"a {size[0]} px wide window")
    os.makedirs(ARTIFACTS, exist_ok=True)
    path = os.path.join(ARTIFACTS, name)
    assert driver.save_screenshot(path), path
    with capsys.disabled():  # shown in the test log even when pytest captures output
        print(f"\nscreenshot ({size[0]}x{size[1]}): {path}")
    return path


# --- tests ------------------------------------------------------------------------------------

def test_page_is_served_without_key_with_a_strict_csp(server):
    for path, name, ctype in [("/", "index.html", "text/html"), ("/app.js", "app.js", "text/javascript"),
                              ("/app.css", "app.css", "text/css")]:
        r = httpx.get(server.url + path, timeout=10)  # no Authorization header
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == ctype + "; charset=utf-8"
        with open(os.path.join(WEB, name), "rb") as f:
            src = f.read()
        assert r.content == src  # the embedded bytes are the file's
        assert not re.search(rb"https?://", src), f"{name} names an external URL"
        csp = r.headers["content-security-policy"]
        for d in ["default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'",
                  "frame-ancestors 'none'"]:
            assert d in csp, csp
        assert r.headers["x-content-type-options"] == "nosniff"
    # the page has no inline script: every <script> has a src
    with open(os.path.join(WEB, "index.html"), encoding="utf-8") as f:
        assert all("src=" in tag for tag in re.findall(r"<script[^>]*>", f.read()))
    # the API still needs the key
    assert httpx.get(server.url + "/v1/models", timeout=10).status_code == 401
    assert httpx.post(server.url + "/v1/chat/completions", json={}, timeout=10).status_code == 401
    # files that are not the page's are not served (the key opens every other path: then 404)
    assert httpx.get(server.url + "/app.jsx", timeout=10).status_code == 401
    assert httpx.get(server.url + "/app.jsx", headers={"Authorization": f"Bearer {KEY}"}, timeout=10).status_code == 404


N_STREAM = 600


def test_streamed_multi_turn_chat_survives_reload(server, browser):
    # Long enough that the page (which redraws a streaming message at most every 60 ms) shows
    # the answer grow in several steps even when K3-mini decodes fast.
    d = browser
    open_page(d, server)
    new_chat(d)
    configure(d, thinking=False, temperature=0, max_tokens=N_STREAM)
    hook_fetch(d)
    observe_growth(d)
    send(d, "And God said")
    first = wait_for(d, assistant_finished, "the first answer")
    assert first["status"] == "done" and first["error"] is None, first
    want1 = server.chat([{"role": "user", "content": "And God said"}], max_tokens=N_STREAM, temperature=0,
                        chat_template_kwargs={"thinking": False})
    assert first["content"] == want1["content"] and first["content"]
    # the text arrived in several steps while the message was streaming
    grew = sorted({n for status, n in d.execute_script("return window.__k3lens") if status == "streaming" and n > 0})
    assert len(grew) >= 3, grew

    send(d, "And the earth")
    second = wait_for(d, assistant_finished, "the second answer")
    assert second["status"] == "done", second
    history = [{"role": "user", "content": "And God said"}, {"role": "assistant", "content": first["content"]},
               {"role": "user", "content": "And the earth"}]
    body = request_bodies(d)[-1]
    assert body["messages"] == history and body["stream"] is True
    assert body["temperature"] == 0 and body["max_tokens"] == N_STREAM
    assert body["chat_template_kwargs"] == {"thinking": False} and "reasoning_effort" not in body
    want2 = server.chat(history, max_tokens=N_STREAM, temperature=0, chat_template_kwargs={"thinking": False})
    assert second["content"] == want2["content"]

    before = page_state(d)
    d.refresh()
    wait_for(d, lambda d: d.execute_script("return document.documentElement.dataset.ready === '1'"), "the reload")
    assert page_state(d) == before
    assert [m["content"] for m in before] == ["And God said", first["content"], "And the earth", second["content"]]
    # the settings and the key (this tab's session) survive too
    assert d.find_element(By.ID, "max-tokens").get_attribute("value") == str(N_STREAM)
    assert not d.find_element(By.ID, "thinking").is_selected()
    assert d.find_element(By.ID, "api-key").get_attribute("value") == KEY
    assert_no_script_errors(d)


FORCED_TOOLS = ("The user wants the weather; I should call the tool.<|close|>think<|sep|>"
                "<|open|>response<|sep|>Checking Paris.<|close|>response<|sep|>"
                "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|>"
                "<|open|>argument key=\"city\" type=\"string\"<|sep|>Paris<|close|>argument<|sep|>"
                "<|open|>argument key=\"days\" type=\"number\"<|sep|>3<|close|>argument<|sep|><|close|>call<|sep|>"
                "<|open|>call tool=\"get_time\" index=\"2\"<|sep|><|close|>call<|sep|>"
                "<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>")


def test_thinking_collapsed_tool_calls_structured_and_screenshots(server, browser, capsys):
    d = browser
    open_page(d, server)
    new_chat(d)
    configure(d, thinking=True, temperature=0.7, max_tokens=300, effort="low")
    hook_fetch(d, FORCED_TOOLS)
    send(d, "What is the weather in Paris for the next 3 days?")
    m = wait_for(d, assistant_finished, "the answer")
    assert m["status"] == "done" and m["error"] is None, m
    assert m["reasoning"] == "The user wants the weather; I should call the tool."
    assert m["content"] == "Checking Paris."
    assert [t["name"] for t in m["tools"]] == ["get_weather", "get_time"]
    assert json.loads(m["tools"][0]["args"]) == {"city": "Paris", "days": 3}
    assert json.loads(m["tools"][1]["args"]) == {}
    assert "finish: tool_calls" in m["meta"]
    body = request_bodies(d)[-1]
    assert body["reasoning_effort"] == "low" and body["chat_template_kwargs"] == {"thinking": True}

    think = d.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant details.thinking")[-1]
    assert think.get_attribute("open") is None  # collapsed
    assert not d.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant details.thinking .thinking-text")[-1].is_displayed()
    assert float(think.value_of_css_property("opacity")) < 1  # dimmed
    think.find_element(By.TAG_NAME, "summary").click()
    wait_for(d, lambda d: think.get_attribute("open") is not None, "the thinking block to open")
    assert think.find_element(By.CLASS_NAME, "thinking-text").is_displayed()

    # the next turn sends the tool calls and the reasoning back as history
    hook_fetch(d, "Sunny.<|close|>think<|sep|><|open|>response<|sep|>It will be sunny.<|end_of_msg|>")
    send(d, "Thanks")
    m2 = wait_for(d, assistant_finished, "the second answer")
    assert m2["status"] == "done" and m2["content"] == "It will be sunny." and m2["reasoning"] == "Sunny.", m2
    prev = request_bodies(d)[-1]["messages"][1]
    assert prev["role"] == "assistant" and prev["content"] == "Checking Paris."
    assert prev["reasoning_content"] == "The user wants the weather; I should call the tool."
    assert [c["function"]["name"] for c in prev["tool_calls"]] == ["get_weather", "get_time"]
    assert all(c["id"].startswith("call_") and c["type"] == "function" for c in prev["tool_calls"])

    # readable at both sizes: nothing wider than the window (settings folded, as on a first visit)
    d.find_element(By.CSS_SELECTOR, "#settings summary").click()
    wait_for(d, lambda d: d.find_element(By.ID, "settings").get_attribute("open") is None, "folded settings")
    for name, size in [("chat-desktop.png", DESKTOP), ("chat-phone.png", PHONE)]:
        path = screenshot(d, name, size, capsys)
        assert os.path.getsize(path) > 10000
        assert d.execute_script("return document.documentElement.scrollWidth <= window.innerWidth"), name
        for sel in ["#prompt", "#send", "#new-chat"]:
            r = d.execute_script("const r = arguments[0].getBoundingClientRect();"
                                 "return [r.left, r.right, r.width];", d.find_element(By.CSS_SELECTOR, sel))
            assert r[0] >= 0 and r[1] <= size[0] and r[2] > 0, (name, sel, r)
    d.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert_no_script_errors(d)


def test_stop_cancels_a_long_answer_and_frees_the_slot(server, browser):
    d = browser
    open_page(d, server)
    new_chat(d)
    configure(d, thinking=False, temperature=0.7, max_tokens=3500)
    m0 = server.metrics()
    aborted0 = metric(m0, "request_success_total", 'finished_reason="abort"')
    finished0 = {r: metric(m0, "request_success_total", f'finished_reason="{r}"') for r in ("stop", "length")}
    hook_fetch(d, " light" * 3400)
    send(d, "Say light many times")
    wait_for(d, lambda d: len(last_assistant(d)["content"]) > 30, "some streamed text")
    assert last_assistant(d)["status"] == "streaming"
    assert d.find_element(By.ID, "stop").is_displayed() and not d.find_element(By.ID, "send").is_enabled()
    d.find_element(By.ID, "stop").click()
    m = wait_for(d, assistant_finished, "the stopped answer")
    assert m["status"] == "stopped" and "stopped" in m["meta"] and m["error"] is None, m
    assert 30 < len(m["content"]) < len(" light" * 3400)
    assert m["content"] == (" light" * 3400)[: len(m["content"])]
    # the server cancelled the sequence (finish "abort") and its only slot is free again
    deadline = time.time() + WAIT
    while True:
        text = server.metrics()
        if metric(text, "num_requests_running") == 0 and metric(text, "request_success_total",
                                                                'finished_reason="abort"') == aborted0 + 1:
            break
        assert time.time() < deadline, "the stopped request still runs:\n" + text
        time.sleep(0.05)
    assert {r: metric(text, "request_success_total", f'finished_reason="{r}"') for r in ("stop", "length")} == finished0
    assert last_assistant(d)["content"] == m["content"]  # nothing more arrived
    assert not d.find_element(By.ID, "stop").is_displayed() and d.find_element(By.ID, "send").is_enabled()
    # the slot takes the next request (with one slot and no queue, a held slot would be a 429)
    hook_fetch(d, "Done.<|end_of_msg|>")
    send(d, "Stop now")
    m2 = wait_for(d, assistant_finished, "the answer after Stop")
    assert m2["status"] == "done" and m2["content"] == "Done.", m2
    # the stopped answer is part of the history of the next turn, and kept across a reload
    assert request_bodies(d)[-1]["messages"][1] == {"role": "assistant", "content": m["content"]}
    d.refresh()
    wait_for(d, lambda d: len(page_state(d)) == 4, "the restored conversation")
    assert [x["status"] for x in page_state(d) if x["role"] == "assistant"] == ["stopped", "done"]
    assert_no_script_errors(d)


INJECTED = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script><b>bold</b> &amp; &lt;'


def test_html_in_prompt_and_output_is_shown_as_text(server, browser):
    d = browser
    open_page(d, server)
    new_chat(d)
    configure(d, thinking=False, max_tokens=200)
    out = '<i>hi</i><img src=y onerror="window.__pwned=3"><a href="javascript:window.__pwned=4">x</a>'
    hook_fetch(d, out + "<|end_of_msg|>")
    send(d, INJECTED)
    m = wait_for(d, assistant_finished, "the answer")
    assert m["status"] == "done" and m["content"] == out, m
    for _ in range(2):  # as rendered live, and as restored from storage
        user = page_state(d)[0]
        assert user["role"] == "user" and user["content"] == INJECTED
        assert page_state(d)[1]["content"] == out
        assert "<i>hi</i>" in page_state(d)[1]["shown"]  # the Markdown view shows the tags as text
        assert d.execute_script("return document.querySelectorAll("
                                "'#messages img, #messages script, #messages b, #messages i, #messages a').length") == 0
        assert d.execute_script("return typeof window.__pwned") == "undefined"
        d.refresh()
        wait_for(d, lambda d: len(page_state(d)) == 2, "the restored conversation")
    assert_no_script_errors(d)


def test_server_errors_are_shown_in_the_page(server, browser):
    d = browser
    open_page(d, server, key="wrong-key")
    new_chat(d)
    configure(d, thinking=False, temperature=0.7, max_tokens=16)
    send(d, "hello")
    m = wait_for(d, assistant_finished, "the 401 answer")
    assert m["status"] == "error" and "401" in m["error"] and "Invalid API key" in m["error"], m
    wait_for(d, lambda d: "API key" in d.find_element(By.ID, "model-name").text, "the key hint")
    # a 400 from the request validation, with the field it names
    set_field(d, "api-key", KEY)
    set_field(d, "temperature", 7)
    send(d, "hello again")
    m = wait_for(d, assistant_finished, "the 400 answer")
    assert m["status"] == "error" and "400" in m["error"] and "temperature" in m["error"], m
    # the failed turns are not sent as history; a good request then works
    set_field(d, "temperature", 0)
    hook_fetch(d, "Hello.<|end_of_msg|>")
    send(d, "third time")
    m = wait_for(d, assistant_finished, "the answer")
    assert m["status"] == "done" and m["content"] == "Hello." and m["error"] is None, m
    assert request_bodies(d)[-1]["messages"] == [{"role": "user", "content": c}
                                                 for c in ("hello", "hello again", "third time")]
    assert_no_script_errors(d)


# --- Markdown, copy, regenerate, edit, conversations, system prompt, statistics ---------------

# The page's libraries: Debian's files, embedded by tools/server/web/web.cmake.
VENDOR = [("/vendor/marked.min.js", "/usr/share/javascript/marked/marked.min.js", "text/javascript"),
          ("/vendor/purify.min.js", "/usr/share/nodejs/dompurify/dist/purify.min.js", "text/javascript"),
          ("/vendor/highlight.min.js", "/usr/share/javascript/highlight.js/highlight.min.js", "text/javascript"),
          ("/vendor/hljs_light.css", "/usr/share/javascript/highlight.js/styles/github.css", "text/css"),
          ("/vendor/hljs_dark.css", "/usr/share/javascript/highlight.js/styles/atom-one-dark.css", "text/css"),
          ("/vendor/katex.min.js", "/usr/share/javascript/katex/katex.min.js", "text/javascript")]
KATEX_CSS = "/usr/share/javascript/katex/katex.min.css"   # Debian 12 package libjs-katex
KATEX_FONTS = "/usr/share/fonts/truetype/katex"            # Debian 12 package fonts-katex

CODE = "def count(path):\n    with open(path) as f:\n        return sum(1 for _ in f)"
MARKDOWN = ("## Plan\n\n1. read the **file**\n2. count the lines\n\n```python\n" + CODE + "\n```\n\n"
            'Call `count` with a path. <img src=x onerror="window.__pwned=5"><script>window.__pwned=6</script> '
            "[run](javascript:window.__pwned=7) and [docs](https://docs.python.org/3/)")
STATS = re.compile(r"(\d+) prompt tokens · (\d+) generated · ([0-9.]+) tokens/s · first token ([0-9.]+) s"
                   r" · total ([0-9.]+) s")


def stub_clipboard(driver):
    """Replaces navigator.clipboard.writeText (headless Chromium has no usable clipboard) by a
    recorder: window.__copied lists what the page copied."""
    driver.execute_script("""
      window.__copied = [];
      Object.defineProperty(navigator.clipboard, 'writeText', {configurable: true,
        value: (t) => { window.__copied.push(t); return Promise.resolve(); }});""")


def copied(driver):
    return driver.execute_script("return window.__copied")


def conv_titles(driver):
    """The conversation list, top to bottom (the title, or the rename field's value)."""
    return driver.execute_script("""
      return [...document.querySelectorAll('#conv-list .conv')].map((li) => {
        const t = li.querySelector('.conv-open, .conv-title-input');
        return t.value !== undefined && t.tagName === 'INPUT' ? t.value : t.textContent; });""")


def conv_item(driver, title):
    for li in driver.find_elements(By.CSS_SELECTOR, "#conv-list .conv"):
        if li.find_element(By.CSS_SELECTOR, ".conv-open").text == title:
            return li
    raise AssertionError(f"no conversation {title!r} in {conv_titles(driver)}")


def conv_button(driver, title, cls):
    """A button of a conversation in the list; its rename / delete icons show on hover."""
    li = conv_item(driver, title)
    webdriver.ActionChains(driver).move_to_element(li).perform()
    return li.find_element(By.CSS_SELECTOR, cls)


def contents(driver):
    return [m["content"] for m in page_state(driver)]


def wait_done(driver, what="the answer"):
    m = wait_for(driver, assistant_finished, what)
    assert m["status"] == "done" and m["error"] is None, m
    return m


def api_usage(server, messages, forced, **kw):
    """The server's own usage for a request (non-streamed), to compare the page's numbers with."""
    r = httpx.post(server.url + "/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"},
                   json={"messages": messages, "k3_forced_output": forced, **kw}, timeout=WAIT)
    assert r.status_code == 200, r.text
    return r.json()["usage"]


def idle(server):
    """Waits until no request runs (a stopped one has left its slot)."""
    deadline = time.time() + WAIT
    while metric(server.metrics(), "num_requests_running") != 0:
        assert time.time() < deadline, "a request still runs"
        time.sleep(0.05)


def press(driver, *keys, modifiers=()):
    chain = webdriver.ActionChains(driver)
    for k in modifiers:
        chain.key_down(k)
    chain.send_keys(*keys)
    for k in reversed(modifiers):
        chain.key_up(k)
    chain.perform()


def test_libraries_are_served_from_debian_packages_by_relative_urls(server):
    for url, path, ctype in VENDOR:
        r = httpx.get(server.url + url, timeout=10)  # no key needed, like the page
        assert r.status_code == 200, (url, r.text[:200])
        assert r.headers["content-type"] == ctype + "; charset=utf-8", url
        with open(os.path.realpath(path), "rb") as f:
            assert r.content == f.read(), f"{url} differs from {path}"
        assert "script-src 'self'" in r.headers["content-security-policy"]
    with open(os.path.join(WEB, "index.html"), encoding="utf-8") as f:
        html = f.read()
    refs = re.findall(r'<(?:script|link)[^>]*(?:src|href)="([^"]*)"', html)
    assert {u for u, _, _ in VENDOR} <= {"/" + r for r in refs}, refs
    assert all(not r.startswith(("/", "http:", "https:")) for r in refs), refs  # this origin, relative
    with open(os.path.join(WEB, "app.js"), encoding="utf-8") as f:
        js = f.read()
    urls = re.findall(r"fetch\('([^']*)'", js)
    assert sorted(urls) == ["v1/chat/completions", "v1/models"], urls
    assert "'Content-Type': 'application/json'" in js


def test_markdown_answer_is_rendered_highlighted_sanitized_and_copyable(server, browser, capsys):
    d = browser
    open_page(d, server)
    new_chat(d)
    configure(d, thinking=True, temperature=0.7, max_tokens=400, effort="low")
    hook_fetch(d, "I will **outline** it.<|close|>think<|sep|><|open|>response<|sep|>" + MARKDOWN + "<|end_of_msg|>")
    send(d, "How do I count the lines of a file in Python?")
    m = wait_done(d)
    assert m["content"] == MARKDOWN and m["reasoning"] == "I will **outline** it.", m
    got = d.execute_script("""
      const v = [...document.querySelectorAll('#messages .msg.assistant')].pop();
      const c = v.querySelector('.content');
      const t = (s, e = c) => [...e.querySelectorAll(s)].map((x) => x.textContent);
      return {h2: t('h2'), li: t('ol > li'), strong: t('strong'), inline: t(':not(pre) > code'),
              code: t('pre > code.hljs.language-python'), kw: t('pre code .hljs-keyword'),
              lang: t('.code-head .code-lang'), links: [...c.querySelectorAll('a')].map((a) => a.getAttribute('href')),
              thinking: t('strong', v.querySelector('.thinking-text'))};""")
    assert got["h2"] == ["Plan"] and got["li"] == ["read the file", "count the lines"] and got["strong"] == ["file"]
    assert got["inline"] == ["count"] and got["lang"] == ["python"]
    assert [c.rstrip("\n") for c in got["code"]] == [CODE]
    assert {"def", "with", "return"} <= set(got["kw"]), got["kw"]  # highlighted by highlight.js
    assert got["thinking"] == ["outline"]  # the thinking is Markdown too
    # sanitized: HTML from the model is text, the javascript: link lost its href, nothing ran
    assert got["links"] == [None, "https://docs.python.org/3/"], got["links"]
    assert '<img src=x onerror="window.__pwned=5"><script>window.__pwned=6</script>' in m["shown"]
    assert d.execute_script("return document.querySelectorAll('#messages img, #messages script, #messages iframe').length") == 0
    d.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant .content a")[-2].click()
    assert d.execute_script("return typeof window.__pwned") == "undefined"
    # the code block's Copy copies the code; the message's Copy copies its Markdown source
    stub_clipboard(d)
    block_copy = d.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant .code-copy")[-1]
    block_copy.click()
    wait_for(d, lambda d: len(copied(d)) == 1, "the code to be copied")
    assert copied(d)[0].rstrip("\n") == CODE
    wait_for(d, lambda d: block_copy.text == "Copied", "the Copied label")
    d.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant .actions .copy")[-1].click()
    wait_for(d, lambda d: len(copied(d)) == 2, "the answer to be copied")
    assert copied(d)[1] == MARKDOWN
    d.find_elements(By.CSS_SELECTOR, "#messages .msg.user .actions .copy")[-1].click()
    wait_for(d, lambda d: len(copied(d)) == 3, "the question to be copied")
    assert copied(d)[2] == "How do I count the lines of a file in Python?"
    # the same rendering after a reload (from localStorage)
    d.refresh()
    wait_for(d, lambda d: len(page_state(d)) == 2, "the restored conversation")
    assert d.execute_script("return document.querySelectorAll('#messages pre code .hljs-keyword').length") >= 3
    assert page_state(d)[1]["content"] == MARKDOWN
    assert d.find_element(By.ID, "settings").get_attribute("open") is None  # folded, as on a first visit
    for name, size in [("markdown-desktop.png", DESKTOP), ("markdown-phone.png", PHONE)]:
        path = screenshot(d, name, size, capsys)
        assert os.path.getsize(path) > 10000
        assert d.execute_script("return document.documentElement.scrollWidth <= window.innerWidth"), name
    # dark mode follows the system's preference, code highlighting included
    bg = "return [getComputedStyle(document.body).backgroundColor, getComputedStyle(document.querySelector(" \
         "'#messages pre code .hljs-keyword')).color]"
    light = d.execute_script(bg)
    d.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    wait_for(d, lambda d: d.execute_script(bg) != light, "the dark colours")
    dark = d.execute_script(bg)
    assert dark[0] == "rgb(23, 23, 26)" and dark[1] != light[1], (light, dark)
    screenshot(d, "markdown-dark-phone.png", PHONE, capsys)
    d.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
    d.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert_no_script_errors(d)


def katex_css_as_served():
    """Debian's katex.min.css without its woff and ttf font sources (only woff2 is embedded)."""
    with open(KATEX_CSS, encoding="utf-8") as f:
        return re.sub(r", *url\([^)]*\) *format\(['\"]?(woff|truetype)['\"]?\)", "", f.read())


def test_katex_fonts_are_served_as_woff2_where_its_stylesheet_points(server):
    fonts = sorted(n for n in os.listdir(KATEX_FONTS) if n.endswith(".woff2"))
    assert len(fonts) == 20, fonts  # KaTeX 0.16's font set
    for name in fonts:
        r = httpx.get(server.url + "/vendor/fonts/" + name, timeout=10)  # no key, like the page
        assert r.status_code == 200, name
        assert r.headers["content-type"] == "font/woff2", name
        with open(os.path.join(KATEX_FONTS, name), "rb") as f:
            assert r.content == f.read(), name
        assert r.content[:4] == b"wOF2", name
        assert "font-src 'self'" in r.headers["content-security-policy"]
    # the other formats are not embedded: not served (404 once the key opens the path)
    for other in [fonts[0][:-6] + ".woff", fonts[0][:-6] + ".ttf"]:
        r = httpx.get(server.url + "/vendor/fonts/" + other, headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
        assert r.status_code == 404, other
    # the stylesheet: Debian's with only the woff2 sources, each naming a served font
    r = httpx.get(server.url + "/vendor/katex.min.css", timeout=10)
    assert r.status_code == 200 and r.headers["content-type"] == "text/css; charset=utf-8"
    assert r.text == katex_css_as_served()
    urls = re.findall(r"url\(([^)]*)\)", r.text)
    assert sorted(set(urls)) == ["fonts/" + n for n in fonts], urls
    assert ".woff)" not in r.text and ".ttf)" not in r.text
    # the page's CSP: fonts from this origin; still no inline style and no other host
    csp = httpx.get(server.url + "/", timeout=10).headers["content-security-policy"]
    assert "font-src 'self'" in csp and "style-src 'self';" in csp and "unsafe" not in csp, csp
    assert not re.search(r"https?:", csp), csp


MATH_VALID = {  # the source as written (delimiters included) -> the TeX that KaTeX must receive
    "$e^{i\\pi} + 1 = 0$": "e^{i\\pi} + 1 = 0",
    "\\(a_1 * b_2 = c_{1}\\)": "a_1 * b_2 = c_{1}",
    "$$\n\\sum_{k=1}^{n} k = \\frac{n(n+1)}{2}\n$$": "\n\\sum_{k=1}^{n} k = \\frac{n(n+1)}{2}\n",
    "\\[ \\begin{pmatrix} a & b \\\\ c & d \\end{pmatrix} \\]": " \\begin{pmatrix} a & b \\\\ c & d \\end{pmatrix} ",
    "$$\\sqrt{x_1^2 + x_2^2}$$": "\\sqrt{x_1^2 + x_2^2}",
}
MATH_UNSAFE = ["$\\href{javascript:window.__pwned=1}{click}$", "$\\url{javascript:window.__pwned=2}$",
               "$<script>window.__pwned=3</script>$", "$\\htmlId{x}{y}\\includegraphics{x.png}$"]
MATH = ("Euler: " + list(MATH_VALID)[0] + " and " + list(MATH_VALID)[1] + ", a sum:\n\n" + list(MATH_VALID)[2]
        + "\n\nand a matrix\n\n" + list(MATH_VALID)[3] + "\n\ninline display " + list(MATH_VALID)[4]
        + " here.\n\nPrices: it costs $5 and $6, or between $1,000 and $2,000.\n\n"
        "In code: `$x_1$` and\n\n```\n$$y = x^2$$ \\(z\\)\n```\n\nUnsafe: " + " and ".join(MATH_UNSAFE))


TAIL = " More." * 300  # streamed after the math


def math_state(driver):
    """The last answer's math: each placeholder's source, whether KaTeX typeset it, its errors,
    the TeX it received (the MathML annotation); plus paragraphs, code and links."""
    return driver.execute_script("""
      const c = [...document.querySelectorAll('#messages .msg.assistant')].pop().querySelector('.content');
      const math = [...c.querySelectorAll('.math-tex')].map((e) => {
        const a = e.querySelector('annotation');
        return {raw: e.dataset.raw, katex: !!e.querySelector('.katex'), error: !!e.querySelector('.katex-error'),
                display: !!e.querySelector('.katex-display'), tex: a ? a.textContent : null,
                styled: e.querySelectorAll('.katex-html [style]').length, svg: e.querySelectorAll('svg').length,
                links: e.querySelectorAll('a, [href], [src]').length};
      });
      return {math, p: [...c.querySelectorAll('p')].map((p) => p.textContent),
              code: [...c.querySelectorAll('code')].map((x) => x.textContent),
              katexInCode: c.querySelectorAll('code .katex, pre .katex').length,
              links: c.querySelectorAll('a').length, scripts: document.querySelectorAll('#messages script').length,
              mainFont: [...document.fonts].some((f) => f.family.replace(/"/g, '') === 'KaTeX_Main' &&
                                                      f.status === 'loaded')};""")


def test_math_is_typeset_by_katex_safely_outside_code_and_prices(server, browser, capsys):
    d = browser
    open_page(d, server)
    new_chat(d)
    configure(d, thinking=False, max_tokens=2000)
    # math first, then a long tail: the answer is seen typeset while it still streams
    hook_fetch(d, MATH + TAIL + "<|end_of_msg|>")
    d.execute_script("""
      window.__k3mathWhileStreaming = false;
      new MutationObserver(() => {
        const m = [...document.querySelectorAll('#messages .msg.assistant')].pop();
        if (m && m.dataset.status === 'streaming' && m.querySelector('.content .katex'))
          window.__k3mathWhileStreaming = true;
      }).observe(document.getElementById('messages'), {subtree: true, childList: true});""")
    send(d, "Show me some math.")
    m = wait_done(d)
    assert m["content"] == MATH + TAIL, m["content"][:300]
    assert d.execute_script("return window.__k3mathWhileStreaming") is True
    d.execute_script("return document.fonts.ready")
    got = math_state(d)
    by_raw = {x["raw"]: x for x in got["math"]}
    assert sorted(by_raw) == sorted(list(MATH_VALID) + MATH_UNSAFE), sorted(by_raw)
    for raw, tex in MATH_VALID.items():
        x = by_raw[raw]
        # typeset, no error, and KaTeX got the TeX as written (marked left \\, _ and * alone; the
        # MathML annotation holds it without the surrounding white space)
        assert x["katex"] and not x["error"] and x["tex"] == tex.strip(), (raw, x)
        assert x["display"] == raw.startswith(("$$", "\\[")), (raw, x)
        assert x["styled"] > 0, (raw, x)  # KaTeX's layout styles survived the sanitizer (and the CSP)
    assert by_raw[list(MATH_VALID)[4]]["svg"] == 1  # the square root's SVG
    # no link, image or script comes out of math (typeset, or a TeX error shown as text); nothing ran
    for raw in MATH_UNSAFE:
        assert (by_raw[raw]["katex"] or by_raw[raw]["error"]) and by_raw[raw]["links"] == 0, (raw, by_raw[raw])
    assert got["links"] == 0 and got["scripts"] == 0
    for e in d.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant .content .math-tex"):
        e.click()
    assert d.execute_script("return typeof window.__pwned") == "undefined"
    # prices stay text; code keeps its dollars
    assert "Prices: it costs $5 and $6, or between $1,000 and $2,000." in got["p"], got["p"]
    assert got["code"] == ["$x_1$", "$$y = x^2$$ \\(z\\)\n"] and got["katexInCode"] == 0, got["code"]
    assert got["mainFont"], "KaTeX_Main was not loaded from /vendor/fonts/"
    # the same after a reload (typeset from localStorage), on a desktop and a phone
    d.refresh()
    wait_for(d, lambda d: len(page_state(d)) == 2, "the restored conversation")
    wait_for(d, lambda d: [x["katex"] or x["error"] for x in math_state(d)["math"]]
             == [True] * (len(MATH_VALID) + len(MATH_UNSAFE)), "the typeset math")
    d.execute_script("document.querySelector('#messages .msg.assistant').scrollIntoView()")
    d.execute_script("return document.fonts.ready")
    for name, size in [("math-desktop.png", DESKTOP), ("math-phone.png", PHONE)]:
        path = screenshot(d, name, size, capsys)
        assert os.path.getsize(path) > 10000
        assert d.execute_script("return document.documentElement.scrollWidth <= window.innerWidth"), name
    d.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert_no_script_errors(d)


def test_regenerate_replaces_the_last_answer_and_edit_resends(server, browser):
    d = browser
    open_page(d, server)
    new_chat(d)
    configure(d, thinking=False, temperature=0, max_tokens=64)
    hook_fetch(d, "First answer.<|end_of_msg|>")
    send(d, "Question one")
    wait_done(d)
    hook_fetch(d, "Second answer.<|end_of_msg|>")
    send(d, "Question two")
    wait_done(d)
    # Regenerate is offered on the last answer only
    regen = d.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant .regenerate")
    assert [b.is_displayed() for b in regen] == [False, True]
    d.execute_script("window.__old = [...document.querySelectorAll('#messages .msg.assistant')].pop()")
    n = len(request_bodies(d))
    hook_fetch(d, "Second answer.<|end_of_msg|>")  # the same text: the message must still be a new one
    regen[1].click()
    wait_for(d, lambda d: d.execute_script("return !document.contains(window.__old)") and assistant_finished(d),
             "the regenerated answer")
    assert len(request_bodies(d)) == n + 1
    assert request_bodies(d)[-1]["messages"] == [{"role": "user", "content": "Question one"},
                                                 {"role": "assistant", "content": "First answer."},
                                                 {"role": "user", "content": "Question two"}]
    assert contents(d) == ["Question one", "First answer.", "Question two", "Second answer."]
    assert last_assistant(d)["status"] == "done"
    hook_fetch(d, "Third answer.<|end_of_msg|>")
    d.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant .regenerate")[-1].click()
    wait_for(d, lambda d: contents(d)[-1] == "Third answer." and assistant_finished(d), "the second regeneration")
    assert contents(d) == ["Question one", "First answer.", "Question two", "Third answer."]

    # Edit, then Cancel: nothing changes
    first = d.find_elements(By.CSS_SELECTOR, "#messages .msg.user")[0]
    first.find_element(By.CSS_SELECTOR, ".edit").click()
    box = first.find_element(By.CSS_SELECTOR, ".edit-text")
    assert box.get_attribute("value") == "Question one"
    box.send_keys(" and more")
    first.find_element(By.CSS_SELECTOR, ".edit-cancel").click()
    assert not first.find_elements(By.CSS_SELECTOR, ".edit-box")
    assert contents(d) == ["Question one", "First answer.", "Question two", "Third answer."]
    # Edit the first question and send: what followed is dropped, the edited text is sent alone
    first.find_element(By.CSS_SELECTOR, ".edit").click()
    box = first.find_element(By.CSS_SELECTOR, ".edit-text")
    box.send_keys(", edited")
    hook_fetch(d, "Edited answer.<|end_of_msg|>")
    first.find_element(By.CSS_SELECTOR, ".edit-send").click()
    wait_for(d, lambda d: contents(d) == ["Question one, edited", "Edited answer."] and assistant_finished(d),
             "the answer to the edited question")
    assert request_bodies(d)[-1]["messages"] == [{"role": "user", "content": "Question one, edited"}]
    # Enter in the edit box sends too
    d.find_elements(By.CSS_SELECTOR, "#messages .msg.user")[0].find_element(By.CSS_SELECTOR, ".edit").click()
    box = d.find_element(By.CSS_SELECTOR, "#messages .msg.user .edit-text")
    hook_fetch(d, "Once more.<|end_of_msg|>")
    box.send_keys(" again\n")
    wait_for(d, lambda d: contents(d) == ["Question one, edited again", "Once more."] and assistant_finished(d),
             "the answer to the edit sent with Enter")
    d.refresh()
    wait_for(d, lambda d: len(page_state(d)) == 2, "the restored conversation")
    assert contents(d) == ["Question one, edited again", "Once more."]
    assert_no_script_errors(d)


def test_conversation_list_switch_rename_delete_survive_reload(server, browser, capsys):
    d = browser
    open_page(d, server)
    new_chat(d)
    configure(d, thinking=False, temperature=0, max_tokens=16)
    hook_fetch(d, "Alpha answer.<|end_of_msg|>")
    send(d, "Conversation alpha")
    wait_done(d)
    # Ctrl+Shift+O: a new chat; the old one stays in the list
    press(d, "o", modifiers=(Keys.CONTROL, Keys.SHIFT))
    wait_for(d, lambda d: page_state(d) == [], "the new chat")
    assert conv_titles(d)[:2] == ["New chat", "Conversation alpha"]
    hook_fetch(d, "Beta answer.<|end_of_msg|>")
    send(d, "Conversation beta")
    wait_done(d)
    assert conv_titles(d)[:2] == ["Conversation beta", "Conversation alpha"]
    # switching shows the other conversation's messages
    conv_item(d, "Conversation alpha").find_element(By.CSS_SELECTOR, ".conv-open").click()
    wait_for(d, lambda d: contents(d) == ["Conversation alpha", "Alpha answer."], "conversation alpha")
    assert "current" in conv_item(d, "Conversation alpha").get_attribute("class")
    conv_item(d, "Conversation beta").find_element(By.CSS_SELECTOR, ".conv-open").click()
    wait_for(d, lambda d: contents(d) == ["Conversation beta", "Beta answer."], "conversation beta")
    conv_item(d, "Conversation alpha").find_element(By.CSS_SELECTOR, ".conv-open").click()
    wait_for(d, lambda d: contents(d) == ["Conversation alpha", "Alpha answer."], "conversation alpha again")
    # a reload restores the list and the conversation on screen
    d.refresh()
    wait_for(d, lambda d: d.execute_script("return document.documentElement.dataset.ready === '1'"), "the reload")
    assert contents(d) == ["Conversation alpha", "Alpha answer."]
    assert conv_titles(d)[:2] == ["Conversation beta", "Conversation alpha"]
    # rename (Enter keeps, Escape cancels)
    li = conv_item(d, "Conversation alpha")
    li.find_element(By.CSS_SELECTOR, ".conv-rename").click()
    field = li.find_element(By.CSS_SELECTOR, ".conv-title-input")
    field.send_keys("Throwaway", Keys.ESCAPE)
    wait_for(d, lambda d: "Conversation alpha" in conv_titles(d), "the cancelled rename")
    li = conv_item(d, "Conversation alpha")
    li.find_element(By.CSS_SELECTOR, ".conv-rename").click()
    field = li.find_element(By.CSS_SELECTOR, ".conv-title-input")
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(Keys.NULL, "Renamed alpha", Keys.ENTER)
    wait_for(d, lambda d: conv_titles(d)[:2] == ["Conversation beta", "Renamed alpha"], "the new name")
    d.refresh()
    wait_for(d, lambda d: d.execute_script("return document.documentElement.dataset.ready === '1'"), "the reload")
    assert conv_titles(d)[:2] == ["Conversation beta", "Renamed alpha"]
    # delete asks first: Cancel keeps the conversation, OK removes it
    conv_button(d, "Conversation beta", ".conv-delete").click()
    alert = d.switch_to.alert
    assert "Conversation beta" in alert.text
    alert.dismiss()
    assert "Conversation beta" in conv_titles(d)
    conv_button(d, "Conversation beta", ".conv-delete").click()
    d.switch_to.alert.accept()
    wait_for(d, lambda d: "Conversation beta" not in conv_titles(d), "the deleted conversation to go")
    assert contents(d) == ["Conversation alpha", "Alpha answer."]  # another one was deleted
    d.refresh()
    wait_for(d, lambda d: d.execute_script("return document.documentElement.dataset.ready === '1'"), "the reload")
    assert "Conversation beta" not in conv_titles(d) and "Renamed alpha" in conv_titles(d)

    # phone: the list is a drawer, opened from the bar, closed by picking a conversation
    screenshot(d, "conversations-desktop.png", DESKTOP, capsys)
    screenshot(d, "conversations-phone-closed.png", PHONE, capsys)
    side = d.find_element(By.ID, "sidebar")
    assert not side.is_displayed() or side.rect["x"] + side.rect["width"] <= 0
    assert not [b for b in d.find_elements(By.CSS_SELECTOR, "#sidebar button") if b.is_displayed()]
    d.find_element(By.ID, "toggle-sidebar").click()
    wait_for(d, lambda d: side.is_displayed() and side.rect["x"] >= 0, "the drawer")
    time.sleep(0.3)  # the slide-in transition
    screenshot(d, "conversations-phone.png", PHONE, capsys)
    assert d.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
    # deleting the conversation on screen shows another one
    conv_button(d, "Renamed alpha", ".conv-delete").click()
    d.switch_to.alert.accept()
    wait_for(d, lambda d: "Renamed alpha" not in conv_titles(d), "the deleted conversation to go")
    assert contents(d) != ["Conversation alpha", "Alpha answer."]
    assert side.is_displayed()  # still open: picking a conversation closes it
    shown = contents(d)
    d.find_element(By.CSS_SELECTOR, "#conv-list .conv.current .conv-open").click()
    wait_for(d, lambda d: not side.is_displayed(), "the drawer to close")
    assert contents(d) == shown
    d.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert_no_script_errors(d)


EXPORT = "k3chat.conversations"


def test_export_import_round_trip_and_bad_files(server, browser, tmp_path):
    d = browser
    open_page(d, server)
    new_chat(d)
    configure(d, thinking=False, temperature=0, max_tokens=16)
    set_field(d, "system-prompt", "Be brief.")
    hook_fetch(d, "Gamma answer.<|end_of_msg|>")
    send(d, "Conversation gamma")
    wait_done(d)
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    d.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    d.find_element(By.ID, "export").click()
    wait_for(d, lambda d: [f for f in os.listdir(downloads) if f.endswith(".json")], "the export file")
    (name,) = os.listdir(downloads)
    assert re.fullmatch(r"k3-chat-\d{4}-\d{2}-\d{2}\.json", name), name
    with open(downloads / name, encoding="utf-8") as f:
        data = json.load(f)
    assert data["format"] == EXPORT and data["version"] == 1
    gamma = [c for c in data["conversations"] if c["title"] == "Conversation gamma"]
    assert len(gamma) == 1 and gamma[0]["system"] == "Be brief."
    assert [(m["role"], m["content"]) for m in gamma[0]["messages"]] == [("user", "Conversation gamma"),
                                                                        ("assistant", "Gamma answer.")]
    exported = sorted(c["title"] for c in data["conversations"])
    assert all(c["messages"] for c in data["conversations"])

    # a browser without the conversations gets them back from the file
    d.execute_script("localStorage.clear()")
    d.refresh()
    wait_for(d, lambda d: d.execute_script("return document.documentElement.dataset.ready === '1'"), "the reload")
    assert conv_titles(d) == ["New chat"]
    d.find_element(By.ID, "import-file").send_keys(str(downloads / name))
    wait_for(d, lambda d: f"Imported {len(exported)} conversation(s) from {name}" in d.find_element(By.ID, "notice").text,
             "the import notice")
    assert sorted(t for t in conv_titles(d) if t != "New chat") == exported
    conv_item(d, "Conversation gamma").find_element(By.CSS_SELECTOR, ".conv-open").click()
    wait_for(d, lambda d: contents(d) == ["Conversation gamma", "Gamma answer."], "the imported conversation")
    assert d.find_element(By.ID, "system-prompt").get_attribute("value") == "Be brief."
    # importing the same file again adds copies, it replaces nothing
    d.find_element(By.ID, "import-file").send_keys(str(downloads / name))
    wait_for(d, lambda d: len(conv_titles(d)) == 2 * len(exported), "the second import")

    # malformed files: an error naming the problem, nothing added, the page keeps working
    bad = [("not-json.json", "{oops", "not JSON"),
           ("other-format.json", json.dumps({"format": "other", "conversations": []}), "not a k3 chat export"),
           ("future.json", json.dumps({"format": EXPORT, "version": 2, "conversations": []}), "unknown export version 2"),
           ("bad-role.json", json.dumps({"format": EXPORT, "version": 1, "conversations": [
               {"messages": [{"role": "user", "content": "fine"}]},
               {"messages": [{"role": "user", "content": "ok"}, {"role": "robot", "content": "x"}]}]}),
            'conversation 2, message 2: "role" must be "user" or "assistant"'),
           ("bad-content.json", json.dumps({"format": EXPORT, "version": 1, "conversations": [
               {"messages": [{"role": "user", "content": 5}]}]}), '"content" must be a string'),
           ("bad-messages.json", json.dumps({"format": EXPORT, "version": 1, "conversations": [{"title": "x"}]}),
            '"messages" must be an array'),
           ("bad-usage.json", json.dumps({"format": EXPORT, "version": 1, "conversations": [{"messages": [
               {"role": "assistant", "content": "x", "usage": {"prompt_tokens": "many"}}]}]}), '"usage" must have')]
    for fname, text, expect in bad:
        (tmp_path / fname).write_text(text, encoding="utf-8")
        before = (conv_titles(d), d.execute_script("return localStorage.getItem('k3chat.v2')"))
        d.find_element(By.ID, "import-file").send_keys(str(tmp_path / fname))
        notice = d.find_element(By.ID, "notice")
        wait_for(d, lambda d: f"Import of {fname} failed" in notice.text, f"the error for {fname}")
        assert expect in notice.text and "is-error" in notice.get_attribute("class"), (fname, notice.text)
        assert (conv_titles(d), d.execute_script("return localStorage.getItem('k3chat.v2')")) == before, fname
    open_page(d, server)  # the settings went with localStorage.clear()
    configure(d, thinking=False, temperature=0, max_tokens=16)
    new_chat(d)
    hook_fetch(d, "Still fine.<|end_of_msg|>")
    send(d, "after the bad files")
    assert wait_done(d)["content"] == "Still fine."
    assert_no_script_errors(d)


def test_system_prompt_is_sent_per_conversation_and_answers_show_token_statistics(server, browser):
    d = browser
    open_page(d, server)
    new_chat(d)
    configure(d, thinking=False, temperature=0, max_tokens=32)
    forced = "One two three four five six seven eight nine ten.<|end_of_msg|>"
    kw = {"max_tokens": 32, "temperature": 0, "chat_template_kwargs": {"thinking": False}}
    assert d.find_element(By.ID, "system-prompt").get_attribute("value") == ""
    hook_fetch(d, forced)
    send(d, "Count to ten")
    m0 = wait_done(d)
    assert request_bodies(d)[-1]["messages"] == [{"role": "user", "content": "Count to ten"}]
    s0 = STATS.search(m0["meta"])
    assert s0, m0["meta"]
    usage0 = api_usage(server, [{"role": "user", "content": "Count to ten"}], forced, **kw)
    assert int(s0.group(1)) == usage0["prompt_tokens"] and int(s0.group(2)) == usage0["completion_tokens"]
    assert usage0["completion_tokens"] > 5 and float(s0.group(3)) > 0
    assert float(s0.group(5)) >= float(s0.group(4)) > 0

    # a new chat starts without a system prompt; this one has its own, sent first
    new_chat(d)
    assert d.find_element(By.ID, "system-prompt").get_attribute("value") == ""
    system = "You are a terse assistant. Answer in one line."
    set_field(d, "system-prompt", system)
    hook_fetch(d, forced)
    send(d, "Count to ten, please")
    m1 = wait_done(d)
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": "Count to ten, please"}]
    assert request_bodies(d)[-1]["messages"] == msgs
    s1 = STATS.search(m1["meta"])
    assert s1, m1["meta"]
    assert int(s1.group(1)) == api_usage(server, msgs, forced, **kw)["prompt_tokens"] > int(s0.group(1)) + 8
    # the field follows the conversation on screen, and survives a reload
    conv_item(d, "Count to ten").find_element(By.CSS_SELECTOR, ".conv-open").click()
    wait_for(d, lambda d: contents(d)[0] == "Count to ten", "the first conversation")
    assert d.find_element(By.ID, "system-prompt").get_attribute("value") == ""
    conv_item(d, "Count to ten, please").find_element(By.CSS_SELECTOR, ".conv-open").click()
    wait_for(d, lambda d: contents(d)[0] == "Count to ten, please", "the second conversation")
    assert d.find_element(By.ID, "system-prompt").get_attribute("value") == system
    d.refresh()
    wait_for(d, lambda d: d.execute_script("return document.documentElement.dataset.ready === '1'"), "the reload")
    assert d.find_element(By.ID, "system-prompt").get_attribute("value") == system
    assert STATS.search(page_state(d)[1]["meta"]).group(0) == s1.group(0)  # the statistics are kept
    assert_no_script_errors(d)


def test_keyboard_shortcuts_and_help(server, browser):
    d = browser
    open_page(d, server)
    new_chat(d)
    configure(d, thinking=False, temperature=0.7, max_tokens=1200)
    hook_fetch(d, " light" * 1100)
    send(d, "Say light many times")
    wait_for(d, lambda d: len(last_assistant(d)["content"]) > 30, "some streamed text")
    press(d, Keys.ESCAPE)  # Esc stops the answer
    m = wait_for(d, assistant_finished, "the stopped answer")
    assert m["status"] == "stopped", m
    idle(server)
    # Shift+Enter is a new line, Enter sends
    box = d.find_element(By.ID, "prompt")
    box.send_keys("line one")
    press(d, Keys.ENTER, modifiers=(Keys.SHIFT,))
    box.send_keys("line two")
    hook_fetch(d, "Ok.<|end_of_msg|>")
    box.send_keys(Keys.ENTER)
    wait_for(d, lambda d: len(page_state(d)) == 4 and assistant_finished(d), "the answer")
    assert page_state(d)[2]["content"] == "line one\nline two" and box.get_attribute("value") == ""
    # the help lists the shortcuts
    d.find_element(By.ID, "help-button").click()
    help_box = d.find_element(By.ID, "help")
    wait_for(d, lambda d: help_box.is_displayed(), "the help")
    for k in ["Enter", "Shift", "Ctrl", "O", "Esc"]:
        assert k in help_box.text
    d.find_element(By.ID, "help-close").click()
    wait_for(d, lambda d: not help_box.is_displayed(), "the help to close")
    assert_no_script_errors(d)


def test_stored_conversations_bad_or_old_format_are_handled(server, browser):
    d = browser
    open_page(d, server)
    good = {"id": "good-1", "title": "", "messages": [{"role": "user", "content": "Stored question"},
                                                      {"role": "assistant", "content": "Stored **answer**",
                                                       "status": "streaming"}]}

    def reload_with(items):
        d.execute_script("localStorage.clear(); for (const [k, v] of arguments[0]) localStorage.setItem(k, v);",
                         [[k, v if isinstance(v, str) else json.dumps(v)] for k, v in items])
        d.refresh()
        wait_for(d, lambda d: d.execute_script("return document.documentElement.dataset.ready === '1'"), "the reload")

    # one unreadable conversation is left out with a notice; the others load
    reload_with([("k3chat.v2", {"conversations": [{"messages": "nope"}, good], "current": "good-1"})])
    notice = d.find_element(By.ID, "notice")
    assert "stored conversation 1" in notice.text and '"messages" must be an array' in notice.text, notice.text
    assert conv_titles(d) == ["Stored question"]
    state = page_state(d)
    assert [m["content"] for m in state] == ["Stored question", "Stored **answer**"]
    assert state[1]["status"] == "interrupted" and "interrupted" in state[1]["meta"]  # a reload cut it
    assert d.execute_script("return document.querySelector('#messages .msg.assistant .content strong').textContent") == "answer"
    # storage that is not JSON: the page starts empty
    reload_with([("k3chat.v2", "{not json")])
    assert conv_titles(d) == ["New chat"] and page_state(d) == []
    # the single conversation of the earlier page version becomes the first of the list
    reload_with([("k3chat.conversation.v1", {"messages": [{"role": "user", "content": "Old question"},
                                                          {"role": "assistant", "content": "Old answer"}],
                                             "settings": {"maxTokens": "77"}})])
    assert conv_titles(d) == ["Old question"] and contents(d) == ["Old question", "Old answer"]
    assert d.find_element(By.ID, "max-tokens").get_attribute("value") == "77"
    # once saved in the new format, the old key is gone
    conv_item(d, "Old question").find_element(By.CSS_SELECTOR, ".conv-open").click()
    new_chat(d)
    assert d.execute_script("return localStorage.getItem('k3chat.conversation.v1')") is None
    assert json.loads(d.execute_script("return localStorage.getItem('k3chat.v2')"))["conversations"][0]["title"] == "Old question"
    assert_no_script_errors(d)
