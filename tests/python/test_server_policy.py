"""The request policy of `k3 serve` (tools/server/request_policy.h), each finding's attack run
against a real server on models/k3-mini on a free loopback port:

- F5 cross-site requests: a page of another origin POSTing a completion and a /slots save as a
  browser would (Origin of that site, a "simple" text/plain body) is refused with 403 and writes
  no file; --cors-origin lets a listed site in (CORS headers, preflight 204); a Host of another
  name (DNS rebinding) gets 403; a text/plain or form body gets 415.
- F6 /metrics behind the API key (or only --metrics-key); the prefix-cache hit counters do not
  tell a prober with another key which secret a victim's prompt holds (--cache-partition key, the
  default), while --cache-partition none shows the attack working; `user` partitions.
- F18 --api-key-file: keys from a file (not on the command line), several keys, clear errors for
  an empty, missing or world-writable file.

Servers listen on 127.0.0.1 only and are stopped by PID (SIGTERM, then a bounded wait) by the
Server helper of test_server_openai.py. The binary is $K3_BIN, else $K3_ROOT/build/tools/cli/k3.
"""
import json
import os
import subprocess

import httpx
import pytest

from test_server_openai import K3, MINI, Server

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MINI, "config.json")), reason="models/k3-mini missing")

HELDOUT = open(os.path.join(MINI, "heldout.txt"), encoding="utf-8").read()
EVIL = "http://evil.example"
APP = "https://app.example"


def post(server, path, body, headers=None, key=None):
    h = {"Authorization": f"Bearer {key}"} if key else {}
    h.update(headers or {})
    return httpx.post(server.url + path, content=body if isinstance(body, (bytes, str)) else json.dumps(body),
                      headers=h, timeout=60)


def error_of(r, status):
    assert r.status_code == status, (r.status_code, r.text)
    e = r.json()["error"]
    assert set(e) >= {"message", "type", "param", "code"}
    return e


def metric_value(text, name):
    for line in text.splitlines():
        if line.startswith("k3:" + name + "{") or line.startswith("k3:" + name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"k3:{name} missing from /metrics:\n{text}")


COMPLETION = {"prompt": "And God said", "max_tokens": 2, "temperature": 0}


@pytest.fixture(scope="module")
def open_server(tmp_path_factory):
    """The default configuration: no key, loopback, slots can be saved."""
    d = tmp_path_factory.mktemp("open")
    s = Server(str(d / "serve.log"), "-np", "1", "-c", "1024", "-t", "1", "--slot-save-path", str(d / "slots"))
    s.slots = d / "slots"
    yield s
    s.stop()


def test_f5_cross_site_completion_and_slot_save_are_refused(open_server):
    s = open_server
    # what a page of evil.example makes a browser send: no preflight (text/plain), its Origin
    simple = {"Origin": EVIL, "Content-Type": "text/plain;charset=UTF-8"}
    e = error_of(post(s, "/v1/completions", COMPLETION, simple), 403)
    assert "Cross-origin request from Origin 'http://evil.example' refused" in e["message"]
    assert "--cors-origin" in e["message"] and e["type"] == "PermissionDeniedError"
    # a completion run first, so that slot 0 keeps a state the attack could write out (a prompt
    # long enough to reach an exact resume point: slots keep states cut at multiples of 64 ids)
    long_completion = dict(COMPLETION, prompt=HELDOUT[:500])
    assert post(s, "/v1/completions", long_completion, {"Content-Type": "application/json"}).status_code == 200
    error_of(post(s, "/slots/0?action=save", {"filename": "stolen.bin"}, simple), 403)
    error_of(post(s, "/slots/0?action=save", {"filename": "stolen.bin"},
                  {"Origin": EVIL, "Content-Type": "application/x-www-form-urlencoded"}), 403)
    assert not (s.slots / "stolen.bin").exists()
    error_of(post(s, "/v1/completions", COMPLETION, {"Origin": "null", "Content-Type": "text/plain"}), 403)
    # the server's own origin (the chat page at /) and clients without Origin still work
    own = {"Origin": s.url, "Content-Type": "application/json"}
    r = post(s, "/v1/completions", long_completion, own)
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
    r = post(s, "/slots/0?action=save", {"filename": "mine.bin"}, {"Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    assert (s.slots / "mine.bin").exists()


def test_f5_json_endpoints_refuse_other_content_types_with_415(open_server):
    s = open_server
    # a form post as a browser sends it (cpp-httplib parses multipart itself: the body must be well-formed)
    form = '--x\r\nContent-Disposition: form-data; name="prompt"\r\n\r\nAnd God said\r\n--x--\r\n'
    for ct in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
               "application/json; charset=latin1"):
        body = form if ct.startswith("multipart") else json.dumps(COMPLETION)
        e = error_of(post(s, "/v1/completions", body, {"Content-Type": ct}), 415)
        assert e["param"] == "Content-Type" and "application/json" in e["message"] and ct in e["message"]
        assert e["type"] == "UnsupportedMediaTypeError"
        if not ct.startswith("multipart"):
            error_of(post(s, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]},
                          {"Content-Type": ct}), 415)
            error_of(post(s, "/tokenize", {"prompt": "x"}, {"Content-Type": ct}), 415)
    for ct in ("application/json", "application/json; charset=utf-8", "Application/JSON;charset=UTF-8"):
        assert post(s, "/v1/completions", COMPLETION, {"Content-Type": ct}).status_code == 200
    # a client that sends no Content-Type (raw HTTP, httpx content=) is not a browser: accepted
    assert post(s, "/tokenize", {"prompt": "x"}).status_code == 200


def test_f5_dns_rebinding_host_is_refused(open_server):
    s = open_server
    for host in (f"evil.example:{s.port}", "evil.example", f"127.0.0.1.nip.io:{s.port}"):
        e = error_of(post(s, "/v1/completions", COMPLETION, {"Host": host, "Content-Type": "application/json"}), 403)
        assert "DNS-rebinding" in e["message"] and "--allowed-host" in e["message"]
        error_of(httpx.get(s.url + "/v1/models", headers={"Host": host}, timeout=10), 403)
    for host in (f"localhost:{s.port}", f"127.0.0.1:{s.port}", "localhost:9000"):
        r = post(s, "/v1/completions", COMPLETION, {"Host": host, "Content-Type": "application/json"})
        assert r.status_code == 200, (host, r.text)


@pytest.fixture(scope="module")
def cors_server(tmp_path_factory):
    s = Server(str(tmp_path_factory.mktemp("cors") / "serve.log"), "-np", "1", "-c", "1024", "-t", "1",
               "--api-key", "cors-key", "--cors-origin", APP, "--allowed-host", "gpu-box")
    yield s
    s.stop()


def test_f5_cors_origin_lets_a_listed_site_in_with_a_preflight(cors_server):
    s = cors_server
    pre = httpx.options(s.url + "/v1/chat/completions", timeout=10,
                        headers={"Origin": APP, "Access-Control-Request-Method": "POST",
                                 "Access-Control-Request-Headers": "authorization, content-type"})
    assert pre.status_code == 204, pre.text
    assert pre.headers["access-control-allow-origin"] == APP
    assert "POST" in pre.headers["access-control-allow-methods"]
    assert "authorization" in pre.headers["access-control-allow-headers"].lower()
    r = post(s, "/v1/completions", COMPLETION, {"Origin": APP, "Content-Type": "application/json"}, key="cors-key")
    assert r.status_code == 200, r.text
    assert r.headers["access-control-allow-origin"] == APP and r.headers["vary"] == "Origin"
    # the listed site reads the refusal too (CORS headers on the 401)
    r = post(s, "/v1/completions", COMPLETION, {"Origin": APP, "Content-Type": "application/json"})
    assert r.status_code == 401 and r.headers["access-control-allow-origin"] == APP
    # other sites: refused, preflight included
    error_of(httpx.options(s.url + "/v1/chat/completions", timeout=10,
                           headers={"Origin": EVIL, "Access-Control-Request-Method": "POST"}), 403)
    error_of(post(s, "/v1/completions", COMPLETION, {"Origin": EVIL, "Content-Type": "application/json"},
                  key="cors-key"), 403)
    # --allowed-host: that name is accepted in Host, others are not
    r = post(s, "/v1/completions", COMPLETION, {"Host": f"gpu-box:{s.port}", "Content-Type": "application/json"},
             key="cors-key")
    assert r.status_code == 200, r.text
    error_of(post(s, "/v1/completions", COMPLETION, {"Host": "evil.example", "Content-Type": "application/json"},
                  key="cors-key"), 403)


def test_f6_metrics_need_the_api_key(cors_server):
    s = cors_server
    e = error_of(httpx.get(s.url + "/metrics", timeout=10), 401)
    assert "Missing API key" in e["message"]
    error_of(httpx.get(s.url + "/metrics", headers={"Authorization": "Bearer wrong"}, timeout=10), 401)
    r = httpx.get(s.url + "/metrics", headers={"Authorization": "Bearer cors-key"}, timeout=10)
    assert r.status_code == 200 and "k3:num_requests_running" in r.text
    assert httpx.get(s.url + "/health", timeout=10).status_code == 200  # stays open


def test_f6_metrics_key_is_the_only_key_of_metrics(tmp_path):
    s = Server(str(tmp_path / "serve.log"), "-np", "1", "-c", "512", "-t", "1", "--api-key", "api", "--metrics-key", "scrape")
    try:
        assert "1 API key(s), /metrics needs a metrics key" in s.read_log()
        for key in (None, "api"):
            h = {"Authorization": f"Bearer {key}"} if key else {}
            error_of(httpx.get(s.url + "/metrics", headers=h, timeout=10), 401)
        assert httpx.get(s.url + "/metrics", headers={"Authorization": "Bearer scrape"}, timeout=10).status_code == 200
        error_of(post(s, "/v1/completions", COMPLETION, key="scrape"), 401)
        assert post(s, "/v1/completions", COMPLETION, key="api").status_code == 200
    finally:
        s.stop()


def serve_fails(tmp_path, *flags):
    """Runs `k3 serve` with flags that must be refused before it listens: (rc, stderr)."""
    out = subprocess.run([K3, "serve", "-m", MINI, "--host", "127.0.0.1", "--port", "0", *flags],
                         capture_output=True, timeout=60)
    return out.returncode, out.stderr.decode()


def test_f18_api_key_file_errors_name_the_flag_and_file(tmp_path):
    empty = tmp_path / "empty.keys"
    empty.write_text("# no keys yet\n\n")
    empty.chmod(0o600)
    rc, err = serve_fails(tmp_path, "--api-key-file", str(empty))
    assert rc == 1 and f"--api-key-file: '{empty}' holds no key" in err, err
    rc, err = serve_fails(tmp_path, "--api-key-file", str(tmp_path / "missing.keys"))
    assert rc == 1 and f"--api-key-file: cannot read '{tmp_path / 'missing.keys'}'" in err, err
    loose = tmp_path / "loose.keys"
    loose.write_text("k1\n")
    loose.chmod(0o666)
    rc, err = serve_fails(tmp_path, "--api-key-file", str(loose))
    assert rc == 1 and "writable by other users" in err and str(loose) in err, err
    rc, err = serve_fails(tmp_path, "--cache-partition", "tenant")
    assert rc == 1 and "--cache-partition: expected none, key or user" in err, err
    rc, err = serve_fails(tmp_path, "--cors-origin", "app.example")
    assert rc == 1 and "--cors-origin" in err, err


# --- prefix-cache partitions ------------------------------------------------------------------

def secret_prompt(pin):
    """A known template with a 4-digit secret early on, long enough for many cache blocks."""
    return f"Note for the bank: my PIN is {pin}. " + HELDOUT[:2400]


CANDIDATES = ["1111", "2222", "4821", "5555", "9090", "0000", "1234", "7777"]


def hit_tokens(s, metrics_key):
    r = httpx.get(s.url + "/metrics", headers={"Authorization": f"Bearer {metrics_key}"}, timeout=10)
    assert r.status_code == 200, r.text
    return metric_value(r.text, "prefix_cache_hits_total")


def probe(s, key, pin, **extra):
    r = post(s, "/v1/completions", {"prompt": secret_prompt(pin), "max_tokens": 4, "temperature": 0, **extra},
             {"Content-Type": "application/json"}, key=key)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


@pytest.mark.parametrize("partition", ["none", "key"])
def test_f6_cache_hit_counters_leak_a_secret_only_without_partitions(tmp_path, partition):
    keys = tmp_path / "api.keys"
    keys.write_text("victim-key\nprober-key\n")
    keys.chmod(0o600)
    flags = ["-np", "1", "-c", "2048", "-t", "1", "--api-key-file", str(keys)]
    if partition == "none":
        flags += ["--cache-partition", "none"]  # the default is key
    s = Server(str(tmp_path / "serve.log"), *flags)
    try:
        cmdline = open(f"/proc/{s.proc.pid}/cmdline", "rb").read()
        assert b"victim-key" not in cmdline and b"prober-key" not in cmdline  # keys off argv (ps)
        assert f"2 API key(s), /metrics needs an API key, cache partition {partition}" in s.read_log()
        want = probe(s, "victim-key", "4821")  # the victim's prompt is cached
        found = []
        texts = {}
        for pin in CANDIDATES:  # the prober times nothing: it reads the hit counter
            before = hit_tokens(s, "prober-key")
            texts[pin] = probe(s, "prober-key", pin)
            if hit_tokens(s, "prober-key") > before:
                found.append(pin)
        if partition == "none":
            assert found == ["4821"], found  # the attack of the finding works without partitions
        else:
            assert found == [], found  # no probe hits another key's blocks, the right one included
            before = hit_tokens(s, "victim-key")
            assert probe(s, "victim-key", "4821") == want  # the victim's own partition still hits
            assert hit_tokens(s, "victim-key") > before
        assert texts["4821"] == want  # the cache changes speed only, never the answer
    finally:
        s.stop()


def test_f6_user_field_partitions_the_cache(tmp_path):
    s = Server(str(tmp_path / "serve.log"), "-np", "1", "-c", "2048", "-t", "1", "--cache-partition", "user")
    try:
        want = probe(s, None, "4821", user="alice")
        before = hit_tokens(s, "unused")  # no key set: /metrics is open
        assert probe(s, None, "4821", user="bob") == want
        assert probe(s, None, "4821") == want  # no user: the shared partition
        assert hit_tokens(s, "unused") == before
        assert probe(s, None, "4821", user="alice") == want
        assert hit_tokens(s, "unused") > before
        e = error_of(post(s, "/v1/completions", {**COMPLETION, "user": 7}, {"Content-Type": "application/json"}), 400)
        assert e["param"] == "user"
    finally:
        s.stop()
