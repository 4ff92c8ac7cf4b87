"""Browser tests of the chat page that `k3 serve` serves at `/` (issue 16): Debian's chromium,
headless, driven through chromium-driver by selenium, against a real `k3 serve` on models/k3-mini
on a free loopback port.

Covered: the page's headers (no key needed, a Content-Security-Policy that allows this origin
only, the embedded bytes equal tools/server/web/*), streamed text arriving in several steps and
equal to the API's greedy answer, a multi-turn conversation sent as history, reload restoring the
conversation, the thinking channel collapsed / dimmed / expandable, tool calls as structured
blocks, Stop cancelling a long answer and freeing the server's only slot, HTML in a prompt and in
the model's output shown as text, server errors (401, 400) shown in the page; screenshots at a
phone and a desktop window size are written to $K3_TEST_ARTIFACTS (default
build/test-artifacts/web/ of $K3_ROOT or this checkout) and their paths printed.

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

@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    for path, pkg in [(CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")]:
        assert os.path.exists(path), f"{path} missing: install Debian's {pkg} (scripts/setup.sh does)"
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--no-first-run",
              "--disable-extensions", "--disable-background-networking", "--disable-component-update",
              "--disable-sync", "--disable-default-apps", "--force-color-profile=srgb", "--hide-scrollbars",
              f"--window-size={DESKTOP[0]},{DESKTOP[1]}",
              "--user-data-dir=" + str(tmp_path_factory.mktemp("chromium-profile"))]:
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    log = tmp_path_factory.mktemp("chromedriver") / "chromedriver.log"
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER, log_path=str(log)), options=opts)
    driver.set_page_load_timeout(WAIT)
    driver.set_script_timeout(WAIT)
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
      return [...document.querySelectorAll('#messages .msg')].map((m) => {
        const q = (s) => m.querySelector(s);
        return {role: m.dataset.role, status: m.dataset.status || null, content: q('.content').textContent,
                reasoning: q('.thinking-text') ? q('.thinking-text').textContent : null,
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
    assert httpx.get(server.url + "/app.jsx", timeout=10).status_code == 404


def test_streamed_multi_turn_chat_survives_reload(server, browser):
    d = browser
    open_page(d, server)
    new_chat(d)
    configure(d, thinking=False, temperature=0, max_tokens=48)
    hook_fetch(d)
    observe_growth(d)
    send(d, "And God said")
    first = wait_for(d, assistant_finished, "the first answer")
    assert first["status"] == "done" and first["error"] is None, first
    want1 = server.chat([{"role": "user", "content": "And God said"}], max_tokens=48, temperature=0,
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
    assert body["temperature"] == 0 and body["max_tokens"] == 48
    assert body["chat_template_kwargs"] == {"thinking": False} and "reasoning_effort" not in body
    want2 = server.chat(history, max_tokens=48, temperature=0, chat_template_kwargs={"thinking": False})
    assert second["content"] == want2["content"]

    before = page_state(d)
    d.refresh()
    wait_for(d, lambda d: d.execute_script("return document.documentElement.dataset.ready === '1'"), "the reload")
    assert page_state(d) == before
    assert [m["content"] for m in before] == ["And God said", first["content"], "And the earth", second["content"]]
    # the settings and the key (this tab's session) survive too
    assert d.find_element(By.ID, "max-tokens").get_attribute("value") == "48"
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
