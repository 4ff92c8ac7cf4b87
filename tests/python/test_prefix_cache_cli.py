"""The prefix cache and sequence save / restore end to end on models/k3-mini:

- `k3 serve`: a repeated and an extended prompt are served from the cache with the same greedy
  text as a server without it; /metrics counts the hits; after SIGTERM a new server on the same
  --cache-dir serves the prompt from disk; a corrupted disk entry is a miss (logged), never a
  wrong answer; POST /slots/{id}?action=save|restore|erase across two processes, with bad file
  names, a foreign file and a missing file refused.
- `k3 run --state-save / --state-load`: a run saved after 8 tokens and continued in another
  process gives exactly the ids of one 16-token run; a state of another model or a corrupt /
  truncated file is a clear error naming the file.
- `k3 chat --state-save / --state-load` resumes a conversation; the stats line reports reuse.
"""
import json
import os
import subprocess

import httpx
import pytest

from test_server_openai import K3, MINI, Server

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(MINI, "config.json")), reason="models/k3-mini missing")

HELDOUT = open(os.path.join(MINI, "heldout.txt"), encoding="utf-8").read()


def long_prompt(n_chars, start=0):
    return HELDOUT[start:start + n_chars]


def complete(server, prompt, n=12):
    r = httpx.post(server.url + "/v1/completions", json={"prompt": prompt, "max_tokens": n, "temperature": 0},
                   timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


def metric(server, name):
    text = httpx.get(server.url + "/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith("k3:" + name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"metric k3:{name} not found in:\n{text}")


@pytest.fixture
def reference(tmp_path):
    s = Server(str(tmp_path / "ref.log"), "--no-cache")
    yield s
    s.stop()


def test_serve_cache_hits_restart_and_corrupt_disk_entry(tmp_path, reference):
    cache_dir = tmp_path / "cache"
    p1 = long_prompt(2600)            # ~700 tokens: ten 64-token blocks and snapshots
    p2 = p1 + long_prompt(400, 5000)  # extends p1
    want1, want2 = complete(reference, p1), complete(reference, p2)
    s = Server(str(tmp_path / "a.log"), "--cache-dir", str(cache_dir), "--cache-ram", "64")
    try:
        assert "prefix cache: RAM 64.0 MiB" in s.read_log()
        assert complete(s, p1) == want1
        assert metric(s, "prefix_cache_hits_total") == 0
        assert complete(s, p1) == want1           # the same prompt again: resumed at its last block
        hits = metric(s, "prefix_cache_hits_total")
        assert hits >= 512 and hits % 64 == 0
        assert complete(s, p2) == want2           # an extension of it
        assert metric(s, "prefix_cache_hits_total") > hits
        assert metric(s, "prefix_cache_hit_requests_total") == 2
        assert metric(s, "prefix_cache_ram_bytes") > 0
        assert metric(s, "prefix_cache_ram_snapshots") >= 1
    finally:
        s.stop()
    files = sorted(cache_dir.glob("*.k3pc"))
    assert files, "the RAM blocks were not written to --cache-dir at shutdown"
    # A restart is served from the disk tier.
    s = Server(str(tmp_path / "b.log"), "--cache-dir", str(cache_dir))
    try:
        assert metric(s, "prefix_cache_disk_blocks") == len(files)
        assert complete(s, p2) == want2
        assert metric(s, "prefix_cache_disk_reads_total") >= 2
        assert metric(s, "prefix_cache_hits_total") >= 512
    finally:
        s.stop()
    # Corrupt every entry: all misses, the answers stay right, each bad file is logged once.
    for f in cache_dir.glob("*.k3pc"):
        b = bytearray(f.read_bytes())
        b[len(b) // 2] ^= 0x40
        f.write_bytes(bytes(b))
    s = Server(str(tmp_path / "c.log"), "--cache-dir", str(cache_dir))
    try:
        assert complete(s, p2) == want2
        assert metric(s, "prefix_cache_disk_rejected_total") >= 1
        assert metric(s, "prefix_cache_hits_total") == 0
        assert "CRC-32 mismatch" in s.read_log()
    finally:
        s.stop()


def test_slots_save_restore_across_processes(tmp_path, reference):
    slots = tmp_path / "slots"
    prompt = long_prompt(900, 2000)
    s = Server(str(tmp_path / "a.log"), "--slot-save-path", str(slots), "-np", "2")
    try:
        first = httpx.post(s.url + "/v1/completions",
                           json={"prompt": prompt, "max_tokens": 8, "temperature": 0}, timeout=120).json()
        r = httpx.post(s.url + "/slots/0?action=save", json={"filename": "conv.bin"}, timeout=60)
        assert r.status_code == 200, r.text
        saved = r.json()
        assert saved["id_slot"] == 0 and saved["filename"] == "conv.bin"
        n_prompt = first["usage"]["prompt_tokens"]
        # The kept state is cut at the prompt's exact resume point (a request extending it then
        # equals the request run alone): the last multiple of 64 that leaves >= 2 prompt ids (or
        # 1 on the prefill-chunk grid of 256).
        max_resume = n_prompt - 1 if (n_prompt - 1) % 256 == 0 else n_prompt - 2
        assert saved["n_saved"] == (n_prompt if n_prompt % 64 == 0 else max_resume // 64 * 64) > 0
        assert saved["n_written"] == os.path.getsize(slots / "conv.bin") and saved["timings"]["save_ms"] >= 0
        # Bad requests name the field.
        for body, param in [({"filename": "../x.bin"}, "filename"), ({"filename": ".hidden"}, "filename"),
                            ({}, "filename")]:
            r = httpx.post(s.url + "/slots/0?action=save", json=body, timeout=10)
            assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
        r = httpx.post(s.url + "/slots/1?action=save", json={"filename": "x.bin"}, timeout=10)
        assert r.status_code == 400 and "keeps no finished sequence" in r.json()["error"]["message"]
        r = httpx.post(s.url + "/slots/7?action=save", json={"filename": "x.bin"}, timeout=10)
        assert r.status_code == 400 and r.json()["error"]["param"] == "id_slot"
        r = httpx.post(s.url + "/slots/0?action=fly", json={"filename": "x.bin"}, timeout=10)
        assert r.status_code == 400 and r.json()["error"]["param"] == "action"
    finally:
        s.stop()
    (slots / "garbage.bin").write_bytes(b"K3SEQST1" + b"\x00" * 64)
    s = Server(str(tmp_path / "b.log"), "--slot-save-path", str(slots), "-np", "2")
    try:
        r = httpx.post(s.url + "/slots/1?action=restore", json={"filename": "conv.bin"}, timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["n_restored"] == saved["n_saved"] and r.json()["n_read"] == saved["n_written"]
        listed = httpx.get(s.url + "/slots", timeout=10).json()
        assert listed[1]["n_kept_tokens"] == saved["n_saved"]
        r = httpx.post(s.url + "/slots/0?action=restore", json={"filename": "garbage.bin"}, timeout=10)
        assert r.status_code == 400 and "garbage.bin" in r.json()["error"]["message"]
        r = httpx.post(s.url + "/slots/0?action=restore", json={"filename": "missing.bin"}, timeout=10)
        assert r.status_code == 404
        r = httpx.post(s.url + "/slots/1?action=erase", timeout=10)
        assert r.status_code == 200 and r.json()["n_erased"] == saved["n_saved"]
    finally:
        s.stop()
    # Without --slot-save-path the endpoint is off.
    r = httpx.post(reference.url + "/slots/0?action=save", json={"filename": "x.bin"}, timeout=10)
    assert r.status_code == 501


def test_restored_slot_continues_its_sequence(tmp_path, reference):
    slots = tmp_path / "slots"
    prompt_ids = httpx.post(reference.url + "/tokenize", json={"prompt": long_prompt(700, 3000)}, timeout=10).json()["tokens"]
    s = Server(str(tmp_path / "a.log"), "--slot-save-path", str(slots), "-np", "1")
    try:
        r = httpx.post(s.url + "/v1/completions", json={"prompt": prompt_ids, "max_tokens": 6, "temperature": 0,
                                                         "logprobs": 0}, timeout=120).json()
        gen = r["choices"][0]["text"]
        assert httpx.post(s.url + "/slots/0?action=save", json={"filename": "c.bin"}, timeout=60).status_code == 200
    finally:
        s.stop()
    gen_ids = httpx.post(reference.url + "/tokenize", json={"prompt": gen}, timeout=10).json()["tokens"]
    follow = prompt_ids + gen_ids[:5]  # the ids the saved state holds (the 6th was never fed) ...
    follow = follow + httpx.post(reference.url + "/tokenize", json={"prompt": " And"}, timeout=10).json()["tokens"]
    want = httpx.post(reference.url + "/v1/completions", json={"prompt": follow, "max_tokens": 8, "temperature": 0},
                      timeout=120).json()
    s = Server(str(tmp_path / "b.log"), "--slot-save-path", str(slots), "-np", "1")
    try:
        r = httpx.post(s.url + "/slots/0?action=restore", json={"filename": "c.bin"}, timeout=60)
        assert r.status_code == 200
        n_restored = r.json()["n_restored"]
        assert 0 < n_restored <= len(prompt_ids) - 2 and n_restored % 64 == 0  # cut at an exact resume point
        got = httpx.post(s.url + "/v1/completions", json={"prompt": follow, "max_tokens": 8, "temperature": 0},
                         timeout=120).json()
        assert got["choices"][0]["text"] == want["choices"][0]["text"]
        # only the ids past the restored state were computed
        assert metric(s, "prompt_tokens_total") == len(follow) - n_restored
    finally:
        s.stop()


def run_json(*args):
    p = subprocess.run([K3, "run", "-m", MINI, "--json", *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout), p.stderr


def test_run_state_save_restore_is_exact_across_processes(tmp_path):
    state = str(tmp_path / "s.bin")
    full, _ = run_json("-p", "And God said", "-n", "16", "--temp", "0")
    a, err = run_json("-p", "And God said", "-n", "8", "--temp", "0", "--state-save", state)
    assert "saved" in err and os.path.getsize(state) > 0
    b, _ = run_json("--state-load", state, "-n", "8", "--temp", "0")
    assert a["ids"] + b["ids"] == full["ids"]
    # Seeded sampling continues exactly too (the penalty history travels with the ids).
    fs, _ = run_json("-p", "In the beginning", "-n", "12", "--temp", "0.9", "--seed", "7", "--repeat-penalty", "1.3")
    a, _ = run_json("-p", "In the beginning", "-n", "12", "--temp", "0.9", "--seed", "7", "--repeat-penalty", "1.3",
                    "--state-save", state)
    assert a["ids"] == fs["ids"]


def run_err(*args):
    p = subprocess.run([K3, "run", "-m", MINI, *args], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert "Traceback" not in p.stderr and "terminate" not in p.stderr
    return p.stderr


def test_run_state_load_refuses_foreign_corrupt_and_truncated_files(tmp_path):
    state = tmp_path / "s.bin"
    run_json("-p", "And God said", "-n", "4", "--temp", "0", "--state-save", str(state))
    raw = state.read_bytes()
    bad = tmp_path / "bad.bin"
    bad.write_bytes(raw[: len(raw) // 2])
    assert "bad.bin" in run_err("--state-load", str(bad), "-n", "2")
    flipped = bytearray(raw)
    flipped[-100] ^= 1
    bad.write_bytes(bytes(flipped))
    assert "CRC-32 mismatch" in run_err("--state-load", str(bad), "-n", "2")
    bad.write_bytes(b"not a state")
    assert "bad magic" in run_err("--state-load", str(bad), "-n", "2")
    # The same model on another numeric path is another fingerprint: refused, not resumed.
    other = tmp_path / "int8.bin"
    p = subprocess.run([K3, "run", "-m", MINI, "-p", "And God said", "-n", "4", "--state-save", str(other)],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "K3_MXFP4": "int8"})
    assert p.returncode == 0, p.stderr
    p = subprocess.run([K3, "run", "-m", MINI, "--state-load", str(other), "-n", "2"], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "K3_MXFP4": "exact"})
    assert p.returncode != 0 and "another model or numeric path" in p.stderr
    assert "missing" in run_err("--state-load", str(tmp_path / "missing" / "s.bin"), "-n", "2")


def test_chat_state_save_load_and_stats(tmp_path):
    state = str(tmp_path / "chat.bin")
    msgs = "In the beginning God created the heaven and the earth. " * 30
    p = subprocess.run([K3, "chat", "-m", MINI, "--no-think", "-n", "8", "--temp", "0", "--stats", "--state-save", state],
                       input=msgs + "\nAnd the earth?\n", capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = [l for l in p.stderr.splitlines() if "cache:" in l]
    assert len(lines) == 2
    assert "reused 0/" in lines[0] and "reused 0/" not in lines[1], lines  # turn 2 resumes turn 1's prompt
    q = subprocess.run([K3, "chat", "-m", MINI, "--no-think", "-n", "8", "--temp", "0", "--stats", "--state-load", state],
                       input="And the light?\n", capture_output=True, text=True, timeout=120)
    assert q.returncode == 0, q.stderr
    assert "resumed 4 messages" in q.stderr
    line = [l for l in q.stderr.splitlines() if "cache:" in l][0]
    assert "reused 0/" not in line
    r = subprocess.run([K3, "chat", "-m", MINI, "--state-load", state, "--system", "x"], input="", capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0 and "--system" in r.stderr
