"""CLI tests of streamed experts and the memory plan on models/k3-mini: `k3 run` with streamed experts (a cache smaller
than the experts, and no cache) prints exactly the mapped run's greedy ids; `--trunk-type q8`
runs; `--ram-gb` too small is refused at start-up with the plan's numbers and a suggestion;
`k3 info --plan` prints one plan per --ram-gb value (JSON: fits / refused, the arithmetic).

The binary is $K3_BIN, else build/tools/cli/k3.
"""
import json
import os
import subprocess

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
K3 = os.environ.get("K3_BIN", os.path.join(ROOT, "build", "tools", "cli", "k3"))
MINI = os.path.join(ROOT, "models", "k3-mini")


def k3(*args):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([K3, *args], capture_output=True, text=True, timeout=300, env=env)


def run_ids(*extra):
    r = k3("run", "-m", MINI, "-p", "And God said", "-n", "24", "--temp", "0", "-t", "1", "--json", *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["ids"], r.stderr


def test_streamed_run_equals_mapped_run():
    want, _ = run_ids()
    for flags in (["--expert-cache-gb", "0.002"], ["--stream-experts"], ["--expert-cache-gb", "0.002", "--no-direct-io"]):
        got, err = run_ids(*flags)
        assert got == want, flags
        assert "experts streamed (" in err
        assert "hit rate" in err


def test_q8_trunk_runs_and_stays_close():
    want, _ = run_ids()
    got, _ = run_ids("--trunk-type", "q8")
    assert len(got) == len(want)
    assert sum(a == b for a, b in zip(got, want)) >= 4  # greedy may drift after a near-tie


def test_ram_gb_too_small_is_refused():
    r = k3("run", "-m", MINI, "-p", "x", "-n", "1", "--stream-experts", "--ram-gb", "0.001")
    assert r.returncode == 1
    assert "memory plan: needs" in r.stderr and "--ram-gb gives" in r.stderr
    assert "try " in r.stderr
    r = k3("run", "-m", MINI, "-p", "x", "-n", "1", "--trunk-type", "q5")
    assert r.returncode != 0 and "--trunk-type" in r.stderr


def test_info_plan_json():
    r = k3("info", MINI, "--plan", "--ram-gb", "0.001,64", "--ram-gbs", "10", "--drive-gbs", "1", "--json")
    assert r.returncode == 0, r.stderr
    plans = json.loads(r.stdout)["plans"]
    assert [p["fits"] for p in plans] == [False, True]
    big = plans[1]
    assert big["total"] == (big["trunk"] + big["states"] + big["prefix_cache"] + big["expert_buffers"] +
                            big["reserve"] + big["expert_cache"])
    assert big["expert_cache"] == big["experts_total"] and big["hit_rate"] == 1.0
    assert big["tokens_per_s_serial"] > 0
    assert "--ram-gb gives" in plans[0]["refusal"]
    r = k3("info", MINI, "--plan")
    assert r.returncode == 1 and "--ram-gb" in r.stderr


def test_prefetch_flag():
    """--prefetch-experts on|off: both print the mapped run's ids; on reports the prediction and
    what the read-ahead became; a bad value is refused naming the flag."""
    want, _ = run_ids()
    got_on, err_on = run_ids("--stream-experts", "--prefetch-experts", "on")
    got_off, err_off = run_ids("--stream-experts", "--prefetch-experts", "off")
    assert got_on == want and got_off == want
    assert "prefetch: prediction right" in err_on and "read ahead" in err_on
    assert "prefetch off" in err_off
    r = k3("run", "-m", MINI, "-p", "x", "-n", "1", "--stream-experts", "--prefetch-experts", "maybe")
    assert r.returncode != 0
    assert "--prefetch-experts" in r.stderr and "expected on or off" in r.stderr
