"""Files `k3 serve` writes and trusts (findings F8, F11, F13, F14, F20 of the security review), attacked end to
end on models/k3-mini:

- F8: a symlink planted as NAME.tmp (the old fixed temporary name) or as NAME itself in
  --slot-save-path never makes a slot save write outside the directory;
- F11: concurrent saves of one name (bounded rounds) always leave one complete, restorable file;
- F8/F13: a --slot-save-path or --cache-dir that every user can write, or that another user owns,
  is refused at start with a message naming the flag and the directory, exit 1;
- F20: a second server on one --cache-dir is refused with a message naming the directory;
- F14: a shard truncated before start is refused naming the shard and the sizes; a shard
  truncated while the server runs ends it by SIGBUS with a message naming the shard (model
  files must not change while k3 runs: docs/security.md).

Servers listen on 127.0.0.1 (test_server_openai's Server) and are stopped by PID.
"""
import concurrent.futures as cf
import os
import re
import resource
import shutil
import signal
import subprocess
import time

import httpx
import pytest
import test_server_openai as server_fixture
from test_server_openai import K3, MINI, Server

pytestmark = server_fixture.pytestmark


# Slots keep states cut at exact resume points (multiples of 64 ids): prompts of about 114 and
# 209 K3-mini tokens keep 64 and 192 ids.
HELDOUT = open(os.path.join(MINI, "heldout.txt"), encoding="utf-8").read()
PROMPT_A, PROMPT_B = HELDOUT[:500], HELDOUT[:900]


def complete(s, prompt, n):
    r = httpx.post(s.url + "/v1/completions", json={"prompt": prompt, "max_tokens": n, "temperature": 0}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def slot_action(s, slot, action, name, timeout=60):
    return httpx.post(f"{s.url}/slots/{slot}?action={action}", json={"filename": name}, timeout=timeout)


def kept(s):
    return [x["n_kept_tokens"] for x in httpx.get(s.url + "/slots", timeout=10).json()]


def refused_at_start(tmp_path, *flags, timeout=120):
    """Runs `k3 serve` with `flags`, which must make it exit 1 by itself; returns its stderr."""
    with open(tmp_path / "refused.log", "wb") as log:
        p = subprocess.Popen([K3, "serve", "-m", MINI, "--host", "127.0.0.1", "--port", "0", *flags],
                             stdout=subprocess.DEVNULL, stderr=log)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
            raise AssertionError("k3 serve was not refused:\n" + (tmp_path / "refused.log").read_text())
    err = (tmp_path / "refused.log").read_text()
    assert rc == 1, f"exit {rc}:\n{err}"
    assert "Traceback" not in err and "terminate called" not in err
    return err


# --- F8: planted symlinks ----------------------------------------------------------------------

def test_slot_save_never_follows_a_planted_symlink(tmp_path):
    slots = tmp_path / "slots"
    slots.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("not k3's")
    os.symlink(outside, slots / "conv.bin.tmp")  # a fixed temporary name
    os.symlink(outside, slots / "link.bin")      # the final name itself
    s = Server(str(tmp_path / "a.log"), "--slot-save-path", str(slots), "-np", "1", "-c", "256", "-t", "2")
    try:
        done = complete(s, PROMPT_A, 6)
        for name in ("conv.bin", "link.bin"):
            r = slot_action(s, 0, "save", name)
            assert r.status_code == 200, r.text
        assert outside.read_text() == "not k3's"
        assert os.path.islink(slots / "conv.bin.tmp") and not os.path.islink(slots / "link.bin")
        assert os.path.isfile(slots / "conv.bin") and not os.path.islink(slots / "conv.bin")
        assert oct(os.stat(slots / "conv.bin").st_mode & 0o777) == "0o600"
        r = slot_action(s, 0, "restore", "link.bin")
        assert r.status_code == 200, r.text
        n = r.json()["n_restored"]
        assert 0 < n <= done["usage"]["prompt_tokens"] and n % 64 == 0, r.text
        assert sorted(os.listdir(slots)) == ["conv.bin", "conv.bin.tmp", "link.bin"]
    finally:
        s.stop()


# --- F11: concurrent saves of one name -----------------------------------------------------------

def test_concurrent_saves_of_one_name_always_leave_a_restorable_file(tmp_path):
    slots = tmp_path / "slots"
    s = Server(str(tmp_path / "a.log"), "--slot-save-path", str(slots), "-np", "2", "-c", "512", "-t", "2")
    try:
        # Two slots holding states of different lengths, so that a file mixing two saves shows.
        complete(s, PROMPT_A, 5)
        assert slot_action(s, 0, "save", "a.bin").status_code == 200
        complete(s, PROMPT_B, 30)
        k = kept(s)
        if k[1] == 0:  # the second request reused slot 0: put the first state into slot 1
            assert slot_action(s, 1, "restore", "a.bin").status_code == 200
            k = kept(s)
        assert k[0] > 0 and k[1] > 0 and k[0] != k[1], k
        lengths = set(k)
        with cf.ThreadPoolExecutor(4) as ex:
            for rnd in range(30):
                futs = [ex.submit(slot_action, s, i % 2, "save", "same.bin") for i in range(4)]
                for f in futs:
                    r = f.result()
                    assert r.status_code == 200, (rnd, r.text)
                r = slot_action(s, 0, "restore", "same.bin")
                assert r.status_code == 200, (rnd, r.text)
                assert r.json()["n_restored"] in lengths, (rnd, r.json(), lengths)
                # the restored slot 0 now holds one of the two states: saves stay among `lengths`
        assert sorted(os.listdir(slots)) == ["a.bin", "same.bin"]  # no temporary file left behind
    finally:
        s.stop()


# --- F8 / F13: directories others can write -----------------------------------------------------

@pytest.mark.parametrize("flag", ["--slot-save-path", "--cache-dir"])
def test_world_writable_or_foreign_directory_is_refused_at_start(tmp_path, flag):
    d = tmp_path / "shared"
    d.mkdir()
    for mode in (0o777, 0o1777):
        os.chmod(d, mode)
        err = refused_at_start(tmp_path, flag, str(d))
        assert f"{flag}: '{d}' is writable by every user" in err, err
        assert "listening" not in err  # refused before the server listens or loads the model
    os.chmod(d, 0o700)
    if os.geteuid() == 0:  # another owner can be set up only as root
        os.chown(d, 65534, 65534)
        err = refused_at_start(tmp_path, flag, str(d))
        assert f"{flag}: '{d}' is owned by uid 65534, not by this user" in err, err
    f = tmp_path / "plain-file"
    f.write_text("x")
    assert f"{flag}: '{f}' is not a directory" in refused_at_start(tmp_path, flag, str(f))


# --- F20: one server per --cache-dir -------------------------------------------------------------

def test_second_server_on_one_cache_dir_is_refused(tmp_path):
    cache = tmp_path / "cache"
    a = Server(str(tmp_path / "a.log"), "--cache-dir", str(cache), "-c", "256", "-t", "1")
    try:
        complete(a, "And God said", 4)
        err = refused_at_start(tmp_path, "--cache-dir", str(cache), "-c", "256", "-t", "1")
        assert f"--cache-dir: '{cache}' is in use by another k3 process" in err, err
    finally:
        a.stop()
    b = Server(str(tmp_path / "b.log"), "--cache-dir", str(cache), "-c", "256", "-t", "1")  # free again
    try:
        assert complete(b, "And God said", 4)["usage"]["completion_tokens"] == 4
    finally:
        b.stop()
    assert [n for n in os.listdir(cache) if not n.endswith(".k3pc")] == []  # no temporary or lock file


# --- F14: shards that change ------------------------------------------------------------------------

def model_copy(tmp_path):
    d = tmp_path / "mini"
    shutil.copytree(MINI, d)
    return d


def test_shard_truncated_before_start_is_refused_naming_it(tmp_path):
    d = model_copy(tmp_path)
    shard = d / "model-00002-of-000003.safetensors"
    size = os.path.getsize(shard)
    os.truncate(shard, size - 100)
    r = subprocess.run([K3, "run", "-m", str(d), "-p", "hi", "-n", "1", "-t", "1"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1, r.stderr
    assert re.search(re.escape(str(shard)) + r": .*file truncated\? the file has " + str(size - 100) +
                     r" bytes, this tensor needs \d+", r.stderr), r.stderr


def test_shard_truncated_while_serving_ends_the_server_naming_it(tmp_path, monkeypatch):
    """The documented behaviour: a shard must not change while k3 runs; if one is truncated in
    place, the next read of a lost page raises SIGBUS and the server ends by it, after one line
    naming the shard (never a silent crash, never wrong output)."""
    d = model_copy(tmp_path)
    monkeypatch.setattr(server_fixture, "MINI", str(d))
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, hard))  # inherited by the server: no core file
    try:
        s = Server(str(tmp_path / "a.log"), "-np", "1", "-c", "256", "-t", "1", "--no-cache")
    finally:
        resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))
    try:
        complete(s, "And God said", 2)
        shards = sorted(d.glob("model-*.safetensors"))
        for sh in shards:
            os.truncate(sh, 0)
        with pytest.raises(httpx.HTTPError):
            complete(s, "In the beginning God created", 4)
        rc = s.proc.wait(timeout=60)
        log = s.read_log()
        assert rc == -signal.SIGBUS, f"exit {rc}:\n{log}"
        m = re.search(r"k3: SIGBUS reading '([^']+)' at byte \d+ of the (\d+) it had when opened", log)
        assert m and m.group(1) in {str(x) for x in shards}, log
        assert "Model files must not change while k3 runs" in log
    finally:
        if s.proc.poll() is None:
            os.kill(s.proc.pid, signal.SIGKILL)
            s.proc.wait()
        s.log.close()
