"""Attacks on the HTTP transport of `k3 serve` (findings F2, F3, F4, F15, F16, F19 of the security review), each
performed against a real server on models/k3-mini over loopback and checked for the fixed
behaviour:

- F2: bodies are bounded whatever their framing (Content-Length, chunked, none), a request without
  the API key is answered 401 before its body is read, header lines are limited in count and size;
- F3: slow clients cannot take the request threads (header and body deadlines; connections
  limited overall and per client IP, refused at once); /health keeps answering;
- F4: a second server on a port in use fails at start-up ("address in use");
- F15: control characters from a request are escaped in the log line;
- F16: ambiguous framing (Content-Length / Transfer-Encoding) is refused with 400;
- F19: the listen backlog holds 200 pending connections.

Servers listen on 127.0.0.1 (clients also bind 127.0.0.2..4 as source addresses, all loopback)
and are stopped by PID (SIGTERM). Every loop is bounded in count and time; the slow tests (the
deadline ones) take a few seconds each. The Server helper is test_server_openai's.
"""
import os
import re
import signal
import socket
import subprocess
import threading
import time

import httpx
import pytest
import test_server_openai as base

KEY = base.KEY
MiB = 1 << 20

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(base.MINI, "config.json")),
                                reason="models/k3-mini missing")


def start(tmp_path_factory, name, *flags):
    return base.Server(str(tmp_path_factory.mktemp(name) / "serve.log"), "-np", "1", "--queue", "2", "-c", "256",
                       "-t", "1", *flags)


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    s = start(tmp_path_factory, "keyed", "--api-key", KEY, "--header-timeout", "2", "--body-timeout", "3",
              "--timeout", "5")
    yield s
    s.stop()


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        m = re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M)
    return int(m.group(1)) / 1024


def connect(port, src="127.0.0.1", timeout=5.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s


def read_response(s, timeout=5.0):
    """Reads one response (or until the server closes); returns (status or None, head, body, closed)."""
    deadline = time.monotonic() + timeout
    data = b""
    closed = False
    while time.monotonic() < deadline:
        s.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            break
        except (ConnectionResetError, BrokenPipeError):
            closed = True
            break
        if not chunk:
            closed = True
            break
        data += chunk
        head, sep, body = data.partition(b"\r\n\r\n")
        if sep:
            m = re.search(rb"\r\ncontent-length: *(\d+)", head, re.I)
            if m and len(body) >= int(m.group(1)):
                break
    head, _, body = data.partition(b"\r\n\r\n")
    m = re.match(rb"HTTP/1\.1 (\d{3})", head)
    return (int(m.group(1)) if m else None), head.decode("latin-1"), body, closed


def is_closed(s, timeout):
    """True when the server closes the connection (EOF or reset) within `timeout` seconds."""
    return read_response(s, timeout)[3]


def error_message(body):
    import json
    e = json.loads(body)["error"]
    assert set(e) == {"message", "type", "param", "code"}
    return e["message"]


def health_ok(srv, timeout=2.0):
    try:
        return httpx.get(srv.url + "/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def upload(port, head, chunks, result):
    """Sends `head` then every chunk of `chunks` (stops at the first failed send); while it sends,
    another thread reads the response. result: status, body, seconds to the response, bytes sent."""
    s = connect(port)
    sent = [0]
    t0 = time.monotonic()

    def send():
        try:
            s.sendall(head)
            for c in chunks:
                s.sendall(c)
                sent[0] += len(c)
        except OSError:
            pass

    th = threading.Thread(target=send, daemon=True)
    th.start()
    status, _, body, _ = read_response(s, timeout=20)
    result.update(status=status, body=body, seconds=time.monotonic() - t0)
    s.close()
    th.join(timeout=10)
    result["sent"] = sent[0]


def chunked(total, piece=MiB):
    block = b"x" * piece
    for _ in range(total // piece):
        yield b"%x\r\n" % piece + block + b"\r\n"
    yield b"0\r\n\r\n"


def raw_bytes(total, piece=MiB):
    block = b"x" * piece
    for _ in range(total // piece):
        yield block


# --- F2: bodies and headers are bounded; no key, no body read ---------------------------------

@pytest.mark.parametrize("framing", ["chunked", "length-less"])
def test_F2_upload_without_the_key_gets_401_before_the_body_is_read(keyed, framing):
    """A 100 MiB upload without the API key: 401 at once, the body not read (RSS stays flat)."""
    before = rss_mib(keyed.proc.pid)
    if framing == "chunked":
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        body = chunked(100 * MiB)
    else:
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        body = raw_bytes(100 * MiB)
    r = {}
    upload(keyed.port, head, body, r)
    assert r["status"] == 401, r
    assert "Missing API key" in error_message(r["body"])
    assert r["seconds"] < 5, r["seconds"]
    assert rss_mib(keyed.proc.pid) - before < 16, (before, rss_mib(keyed.proc.pid))
    assert health_ok(keyed)


@pytest.mark.parametrize("framing", ["chunked", "length-less", "content-length"])
def test_F2_bodies_over_32_MiB_get_413_whatever_their_framing(keyed, framing):
    """With the key: a 100 MiB body gets 413 after at most the 32 MiB limit is read (cpp-httplib
    0.11.4 reads 512 MiB of a chunked body); RSS grows by less than 100 MiB."""
    before = rss_mib(keyed.proc.pid)
    auth = f"Authorization: Bearer {KEY}\r\n".encode()
    if framing == "chunked":
        head = b"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth + b"Transfer-Encoding: chunked\r\n\r\n"
        body = chunked(100 * MiB)
    elif framing == "length-less":
        # Neither Content-Length nor chunked: on a connection the client closes after the request,
        # httplib reads what is there up to the limit (the first MiB goes with the headers).
        head = b"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth + b"Connection: close\r\n\r\n" + b"x" * MiB
        body = raw_bytes(99 * MiB)
    else:
        head = b"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth + b"Content-Length: %d\r\n\r\n" % (100 * MiB)
        body = raw_bytes(100 * MiB)
    r = {}
    upload(keyed.port, head, body, r)
    assert r["status"] == 413, r
    assert "too large" in error_message(r["body"])
    assert r["sent"] < 100 * MiB, r["sent"]  # the server stopped reading
    assert rss_mib(keyed.proc.pid) - before < 100, (before, rss_mib(keyed.proc.pid))
    assert health_ok(keyed)


def test_F2_header_count_line_length_and_target_length_are_limited(keyed):
    """1000 header lines, a 64 KiB header line, a 16 KiB request target: refused at once
    (400, 400, 414) with bounded memory; cpp-httplib 0.11.4 keeps 1 M header lines (+183 MiB)."""
    before = rss_mib(keyed.proc.pid)
    s = connect(keyed.port)
    try:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(1000)) + b"\r\n")
    except OSError:
        pass
    status, head, _, _ = read_response(s, 5)
    s.close()
    assert status == 400 and "connection: close" in head.lower()

    s = connect(keyed.port)
    try:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * (64 << 10) + b"\r\n\r\n")
    except OSError:
        pass
    status, head, _, _ = read_response(s, 5)
    s.close()
    assert status == 400 and "connection: close" in head.lower()

    s = connect(keyed.port)
    s.sendall(b"GET /" + b"a" * (16 << 10) + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    status, head, _, _ = read_response(s, 5)
    s.close()
    assert status == 414 and "connection: close" in head.lower()
    assert rss_mib(keyed.proc.pid) - before < 16
    assert health_ok(keyed)


def test_F2_F3_a_flood_of_unterminated_header_lines_is_cut_at_the_header_deadline(keyed):
    """Bare-LF lines are skipped by the parser (not counted as headers); the 2 s header deadline
    still ends the request. Slow: about 2 s."""
    s = connect(keyed.port)
    s.sendall(b"GET /health HTTP/1.1\r\n")
    t0 = time.monotonic()
    closed = False
    while time.monotonic() - t0 < 6:
        try:
            s.sendall(b"X-Junk: " + b"j" * 100 + b"\n")
        except OSError:
            closed = True
            break
        time.sleep(0.01)
    if not closed:
        closed = is_closed(s, 1)
    s.close()
    assert closed and time.monotonic() - t0 < 5
    assert health_ok(keyed)


# --- F3: slow clients, connection limits ------------------------------------------------------

def test_F3_80_slow_header_connections_do_not_block_health(tmp_path_factory):
    """80 connections trickle header bytes while /health is asked: it answers at once (the
    request threads grow with the connections; --http-threads 4 is only the pool kept ready:
    blocked, it would wait for the 5 s deadline), and the 5 s header deadline ends the slow ones
    with 408. Slow: about 5 s."""
    srv = start(tmp_path_factory, "slow", "--http-threads", "4", "--header-timeout", "5")
    try:
        socks = []
        for _ in range(80):
            s = connect(srv.port)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            socks.append(s)
        t0 = time.monotonic()
        for _ in range(5):
            for s in socks:
                try:
                    s.sendall(b"X")
                except OSError:
                    pass
            t = time.monotonic()
            r = httpx.get(srv.url + "/health", timeout=5)
            assert r.status_code == 200 and time.monotonic() - t < 3
            time.sleep(0.2)
        statuses = []
        for s in socks:
            status, head, body, closed = read_response(s, max(0.5, 8 - (time.monotonic() - t0)))
            assert closed or "connection: close" in head.lower(), "a slow-header connection outlived the deadline"
            statuses.append(status)
            if status == 408:
                assert "--header-timeout" in error_message(body)
            s.close()
        assert statuses.count(408) >= 70, statuses
        assert time.monotonic() - t0 < 9
        assert health_ok(srv)
    finally:
        srv.stop()


def test_F3_body_trickle_gets_408_at_the_body_deadline(keyed):
    """A body sent one byte at a time never finishes within --body-timeout 3: 408 at about 3 s.
    Slow: about 3 s."""
    s = connect(keyed.port)
    s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + KEY.encode() +
              b"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n")
    t0 = time.monotonic()
    stop = threading.Event()

    def trickle():
        while not stop.is_set() and time.monotonic() - t0 < 8:
            try:
                s.sendall(b" ")
            except OSError:
                return
            time.sleep(0.3)

    th = threading.Thread(target=trickle, daemon=True)
    th.start()
    status, _, body, closed = read_response(s, 8)
    stop.set()
    th.join(timeout=2)
    s.close()
    assert status == 408, (status, body)
    assert "--body-timeout" in error_message(body)
    assert 2.5 < time.monotonic() - t0 < 6
    assert health_ok(keyed)


def hold(port, src):
    """A connection that is surely admitted (its first request was answered) and stays open
    (a second request begun, not finished). Retried for a while on 503: the server may still
    count a connection the test closed a moment ago."""
    for _ in range(30):
        s = connect(port, src)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        status, _, _, _ = read_response(s, 10)
        if status == 200:
            s.sendall(b"GET /health HTTP/1.1\r\n")
            return s
        s.close()
        assert status == 503, status
        time.sleep(0.1)
    raise AssertionError("no connection admitted in 3 s")


def test_F3_connections_are_limited_per_client_and_overall(tmp_path_factory):
    """--max-connections-per-client 8 --max-connections 12: the 9th connection of 127.0.0.2
    gets 429 and is closed at once while 127.0.0.1 is served; once 12 are open, the next one
    gets 503 at once; when they close, /health is served again."""
    srv = start(tmp_path_factory, "limits", "--max-connections", "12", "--max-connections-per-client", "8")
    held = []
    try:
        for _ in range(8):
            held.append(hold(srv.port, "127.0.0.2"))
        extra = connect(srv.port, "127.0.0.2")
        t = time.monotonic()
        status, head, body, _ = read_response(extra, 3)
        closed = is_closed(extra, 2)
        extra.close()
        assert status == 429 and "connection: close" in head.lower() and closed and time.monotonic() - t < 3
        assert "--max-connections-per-client" in error_message(body)
        assert health_ok(srv)

        others = [hold(srv.port, "127.0.0.3") for _ in range(4)]
        extra = connect(srv.port, "127.0.0.4")
        t = time.monotonic()
        status, head, body, _ = read_response(extra, 3)
        closed = is_closed(extra, 2)
        extra.close()
        assert status == 503 and "connection: close" in head.lower() and closed and time.monotonic() - t < 3
        assert "--max-connections" in error_message(body)

        for s in others:
            s.close()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not health_ok(srv, 1):
            time.sleep(0.1)
        assert health_ok(srv)
        assert "refused" in srv.read_log()
    finally:
        for s in held:
            s.close()
        srv.stop()


# --- F19: listen backlog ----------------------------------------------------------------------

def test_F19_the_listen_backlog_holds_200_pending_connections(tmp_path_factory):
    """While the server is stopped (SIGSTOP), 200 clients connect: every handshake completes in
    the kernel's queue (a backlog of 5 drops all but 6); after SIGCONT /health answers."""
    srv = start(tmp_path_factory, "backlog")
    socks = []
    ok = 0
    try:
        os.kill(srv.proc.pid, signal.SIGSTOP)
        try:
            for _ in range(200):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.settimeout(0.5)
                try:
                    s.connect(("127.0.0.1", srv.port))
                    ok += 1
                except OSError:
                    pass
                socks.append(s)
        finally:
            os.kill(srv.proc.pid, signal.SIGCONT)
        assert ok == 200, f"{ok} of 200 connections completed"
        for s in socks:
            s.close()
        socks = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not health_ok(srv, 1):
            time.sleep(0.1)
        assert health_ok(srv)
    finally:
        for s in socks:
            s.close()
        srv.stop()


# --- F4: one server per port ------------------------------------------------------------------

def test_F4_a_second_server_on_a_port_in_use_fails_with_address_in_use(keyed):
    """No SO_REUSEPORT: a second `k3 serve` (without a key) on the keyed server's port exits
    non-zero with "address in use"; every request still reaches the keyed server (401 without
    the key; with SO_REUSEPORT the keyless one would answer about half of them)."""
    out = subprocess.run([base.K3, "serve", "-m", base.MINI, "--host", "127.0.0.1", "--port", str(keyed.port),
                          "-t", "1"], capture_output=True, timeout=60)
    assert out.returncode != 0
    assert "address in use" in out.stderr.decode(), out.stderr.decode()
    codes = [httpx.get(keyed.url + "/v1/models", timeout=5).status_code for _ in range(20)]
    assert codes == [401] * 20


# --- F16: ambiguous framing -------------------------------------------------------------------

FRAMING = {
    "duplicate-equal-content-length": b"Content-Length: 13\r\nContent-Length: 13\r\n",
    "duplicate-different-content-length": b"Content-Length: 13\r\nContent-Length: 14\r\n",
    "non-numeric-content-length": b"Content-Length: 1x3\r\n",
    "negative-content-length": b"Content-Length: -13\r\n",
    "plus-sign-content-length": b"Content-Length: +13\r\n",
    "content-length-and-chunked": b"Content-Length: 13\r\nTransfer-Encoding: chunked\r\n",
    "zero-content-length-and-chunked": b"Content-Length: 0\r\nTransfer-Encoding: chunked\r\n",
    "gzip-transfer-encoding": b"Transfer-Encoding: gzip\r\n",
    "gzip-then-chunked": b"Transfer-Encoding: gzip, chunked\r\n",
    "chunked-twice-in-one-line": b"Transfer-Encoding: chunked, chunked\r\n",
    "two-transfer-encoding-lines": b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
    "garbage-transfer-encoding": b"Transfer-Encoding: xchunked\r\n",
}


@pytest.mark.parametrize("case", sorted(FRAMING))
def test_F16_ambiguous_framing_is_refused_with_400(keyed, case):
    s = connect(keyed.port)
    s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + KEY.encode() +
              b"\r\nContent-Type: application/json\r\n" + FRAMING[case] + b"\r\n" +
              b'{"prompt":"a"}' + b"0\r\n\r\n")
    status, head, body, closed = read_response(s, 5)
    s.close()
    assert status == 400, (status, head, body)
    if body:
        error_message(body)  # an OpenAI error body
    assert "connection: close" in head.lower()


def test_F16_plain_chunked_and_content_length_bodies_are_still_served(keyed):
    body = b'{"prompt":"And God said"}'
    for framing, payload in [(b"Transfer-Encoding: chunked\r\n", b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"),
                             (b"Content-Length: %d\r\n" % len(body), body)]:
        s = connect(keyed.port)
        s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + KEY.encode() +
                  b"\r\nContent-Type: application/json\r\n" + framing + b"\r\n" + payload)
        status, _, rbody, _ = read_response(s, 5)
        s.close()
        assert status == 200, rbody
        assert b'"tokens":[296,387,386]' in rbody.replace(b" ", b"")


# --- F15: log injection -----------------------------------------------------------------------

def test_F15_control_characters_in_the_logged_path_are_escaped(keyed):
    """A percent-encoded CR LF (decoded by the parser) and an ESC in the path must not forge a
    log line or reach the terminal: they are logged as \\x0d \\x0a \\x1b."""
    s = connect(keyed.port)
    s.sendall(b"GET /x%0d%0ak3%20serve:%20GET%20/forged%20200%1b[2J HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    status, _, _, _ = read_response(s, 5)
    s.close()
    assert status == 401  # every path but /health and the chat page needs the key on a keyed server
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and "forged" not in keyed.read_log():
        time.sleep(0.05)
    log = keyed.read_log()
    assert r"GET /x\x0d\x0ak3 serve: GET /forged 200\x1b[2J 401" in log, log[-2000:]
    assert "\x1b" not in log and "\r" not in log
    assert not any(line.startswith("k3 serve: GET /forged") for line in log.splitlines())
