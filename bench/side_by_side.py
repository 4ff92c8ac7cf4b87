"""Side-by-side benchmark: k3 against llama.cpp (llama-cpp-python), interleaved rounds, medians.

Run through bench/side_by_side.sh (it builds .venv-llama first). Steps:
 1. export each model to GGUF with tools/gguf_export (cached in --cache; the bench model has no
    tiktoken.model and is exported with --no-tokenizer: both engines are fed token ids);
 2. greedy check on K3-mini: k3's greedy ids (`k3 logits --generate`) against llama.cpp's argmax
    decoding of the same prompt ids, and the largest logit difference over the teacher-forced
    sequence (k3 in its exact numeric mode);
 3. R rounds; in each, for every model x threads: every k3 numeric mode (`k3 bench --json`, one
    call with -p 64 -n 32, one with -p 512) and llama.cpp (bench/side_by_side_llama.py, one
    process: pp64, pp512, tg32), the engine order alternating between rounds; each call does its
    own untimed warm-up. Before each call the page-cache residency of that engine's weight files
    is read with fincore (util-linux) and reported when below 99% (pages evicted since the last
    call; the warm-up pages them back in before timing);
 4. medians over rounds, printed as a markdown table with the ratios k3 / llama.cpp.
--trunk-memory map,copy adds a column per k3 mode with the trunk copied into 2 MiB pages
(`k3 bench --trunk-memory copy`, labelled "k3 MODE copy"); --decode-only runs tg32 alone (k3:
`-p 1 -n 32`; llama.cpp: `--tests tg32`).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
HERE = os.path.dirname(os.path.abspath(__file__))


def log(*a):
    print("side_by_side:", *a, file=sys.stderr, flush=True)


def run(cmd, env=None, timeout=3600):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if r.returncode != 0:
        raise SystemExit(f"side_by_side: command failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return r.stdout


def k3_modes(k3: str) -> dict[str, dict]:
    """{label: {"env": {...}, "args": [...]}} for every numeric mode this k3 has."""
    help_text = run([k3, "bench", "--help"])
    if "--numerics" in help_text:
        line = help_text[help_text.index("--numerics"):].split("\n")[0]
        names = [n for n in ("exact", "int8", "mxfp8", "bf16") if n in line] or ["exact"]
        return {n: {"env": {}, "args": ["--numerics", n]} for n in names}
    return {"int8": {"env": {"K3_MXFP4": "int8"}, "args": []},
            "exact": {"env": {"K3_MXFP4": "exact"}, "args": []},
            "bf16dot": {"env": {"K3_BF16_DOT": "1"}, "args": []}}


def export_cached(model_dir: str, cache: str, py: str) -> str:
    """GGUF of model_dir in cache, re-exported when a source file is newer than it."""
    name = os.path.basename(os.path.normpath(model_dir))
    out = os.path.join(cache, f"{name}.gguf")
    src = glob.glob(os.path.join(model_dir, "*"))
    if os.path.exists(out) and os.path.getmtime(out) >= max(os.path.getmtime(s) for s in src):
        return out
    os.makedirs(cache, exist_ok=True)
    cmd = [py, "-m", "tools.gguf_export", "--model", model_dir, "--out", out]
    if not os.path.exists(os.path.join(model_dir, "tiktoken.model")):
        cmd.append("--no-tokenizer")
    t0 = time.time()
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(r.stderr.strip())
    log(f"exported {out} in {time.time() - t0:.1f} s")
    return out


def resident_fraction(files: list[str]) -> float | None:
    if not shutil.which("fincore"):
        return None
    r = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES,SIZE", *files],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None
    res = size = 0
    for line in r.stdout.split("\n"):
        if line.strip():
            a, b = line.split()[:2]
            res, size = res + int(a), size + int(b)
    return res / size if size else None


def greedy_check(k3: str, mini: str, gguf: str, py_llama: str, prompt: str, n: int, exact: dict) -> list[str]:
    ids = [int(l.split("\t")[0]) for l in run([k3, "tokenize", "-m", mini, prompt]).split("\n")
           if l and not l.startswith("#")]
    idstr = ",".join(map(str, ids))
    env = dict(os.environ, **exact["env"])
    out = run([k3, "logits", "-m", mini, "--ids", idstr, "--generate", str(n), "--top-k", "1", *exact["args"]], env=env)
    k3_gen = [int(x) for x in out.strip().split("\n")[-1].split(":")[1].split(",")]
    with tempfile.TemporaryDirectory() as td:
        lp = os.path.join(td, "llama.npy")
        kp = os.path.join(td, "k3.npy")
        ll = json.loads(run([py_llama, os.path.join(HERE, "side_by_side_llama.py"), "greedy", "--gguf", gguf,
                             "--ids", idstr, "-n", str(n), "--logits", lp]))["ids"]
        seq = ids + ll
        run([k3, "logits", "-m", mini, "--ids", ",".join(map(str, seq)), "--out", kp, *exact["args"]], env=env)
        lk, lq = np.load(kp), np.load(lp)
        diff = float(np.max(np.abs(lk - lq)))
        mean_diff = float(np.mean(np.abs(lk - lq)))
        rel_rms = float(np.sqrt(np.mean((lk - lq) ** 2) / np.mean(lk ** 2)))
        scale = float(np.max(np.abs(lk)))
        argmax_same = bool(np.array_equal(lk.argmax(1), lq.argmax(1)))
    lt = json.loads(run([py_llama, os.path.join(HERE, "side_by_side_llama.py"), "tokenize", "--gguf", gguf,
                         "--text", prompt]))["ids"]
    text = lambda g: run([k3, "detokenize", "-m", mini, ",".join(map(str, g))]).rstrip("\n")
    lines = [
        f"prompt {prompt!r}: k3 ids {ids}, llama.cpp tokenizer ids {lt} ({'same' if lt == ids else 'DIFFERENT'})",
        f"greedy {n} tokens, k3 (exact mode):     {k3_gen}",
        f"greedy {n} tokens, llama.cpp:          {ll}",
        f"same greedy tokens: {'yes' if k3_gen == ll else 'NO'}; text: {text(k3_gen)!r}",
        f"teacher-forced logits over {len(seq)} positions: max |k3 - llama.cpp| = {diff:.3g}, mean {mean_diff:.3g}, relative RMS {rel_rms:.2g} "
        f"(max |logit| {scale:.3g}); argmax equal at every position: {argmax_same}",
    ]
    return lines


FAILURES: list[str] = []


def k3_bench(k3, model, threads, p, n, mode, reps):
    """(pp t/s, tg t/s) of one `k3 bench --json` call, or (None, None) when k3 fails (recorded)."""
    env = dict(os.environ, **mode["env"])
    cmd = [k3, "bench", "-m", model, "-t", str(threads), "-p", str(p), "-n", str(n), "-r", str(reps),
           "--probe-mb", "64", "--json", *mode["args"]]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if r.returncode != 0:
        FAILURES.append(f"`{' '.join(cmd[1:])}` {' '.join(f'{k}={v}' for k, v in mode['env'].items())} "
                        f"failed: exit {r.returncode} {r.stderr.strip()[-200:]}")
        log(FAILURES[-1])
        return None, None
    j = json.loads(r.stdout)
    return j["pp"]["tokens_per_s"], j["tg"]["tokens_per_s"]


def ratio_table(res: dict, labels: list, threads: list, cols: list) -> list[str]:
    """Markdown rows: medians per (model, threads, test) of every k3 column and llama.cpp, and the
    ratios k3 / llama.cpp. res: {(label, threads, test, column): [tokens/s per round]}."""
    head = "| model | threads | test | " + " | ".join(f"{c} t/s" for c in cols) + " | llama.cpp t/s | " + \
           " | ".join(f"{c} / llama.cpp" for c in cols) + " |"
    table = [head, "|" + "---|" * (4 + 2 * len(cols))]
    for label in labels:
        for t in threads:
            for test in ("pp64", "pp512", "tg32"):
                if (label, t, test, "llama.cpp") not in res:
                    continue
                ll = statistics.median(res[(label, t, test, "llama.cpp")])
                ks = [statistics.median(res[(label, t, test, c)]) if (label, t, test, c) in res else None
                      for c in cols]
                table.append(f"| {label} | {t} | {test} | " + " | ".join("failed" if k is None else f"{k:.1f}" for k in ks) +
                             f" | {ll:.1f} | " + " | ".join("-" if k is None else f"{k / ll:.2f}" for k in ks) + " |")
    return table


def table_from(path: str):
    """--table-from: the table of the samples an interrupted run left in CACHE/partial.json."""
    with open(path) as f:
        raw = json.load(f)
    res = {}
    notes = [f"{k[1:]}: {e}" for k in ("_evictions", "_failures") for e in raw.pop(k, [])]
    for k, v in raw.items():
        label, t, test, col = k.split(" | ")
        res[(label, int(t), test, col)] = v
    labels = list(dict.fromkeys(k[0] for k in res))
    threads = sorted({k[1] for k in res})
    cols = list(dict.fromkeys(k[3] for k in res if k[3] != "llama.cpp"))
    n = {label: min(len(v) for k, v in res.items() if k[0] == label and k[3] == "llama.cpp") for label in labels}
    print("\n".join(ratio_table(res, labels, threads, cols) + ["", f"from {path}: rounds completed per model {n}"] + notes))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k3", default=os.environ.get("K3_BIN", os.path.join(ROOT, "build", "tools", "cli", "k3")))
    ap.add_argument("--mini", default=os.path.join(ROOT, "models", "k3-mini"))
    ap.add_argument("--bench-model", default="/tmp/k3-bench")
    ap.add_argument("--skip-bench-model", action="store_true")
    ap.add_argument("--rounds", type=int, default=5, help="rounds on K3-mini")
    ap.add_argument("--bench-rounds", type=int, default=2, help="rounds on the bench model")
    ap.add_argument("--reps", type=int, default=5, help="runs per call on K3-mini (median); bench model: 1")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--modes", help="comma-separated k3 numeric modes to run (default: every mode k3 bench has)")
    ap.add_argument("--trunk-memory", default="map",
                    help="comma-separated k3 --trunk-memory values, a column each (map: no flag passed)")
    ap.add_argument("--decode-only", action="store_true", help="tg32 only (no prefill tests)")
    ap.add_argument("--cache", default=os.environ.get("K3_SBS_CACHE", "/tmp/k3-sbs"))
    ap.add_argument("--markdown", help="also write the report (greedy check + table) to this file")
    ap.add_argument("--table-from", metavar="PARTIAL_JSON",
                    help="only print the table of the samples in CACHE/partial.json (an interrupted run)")
    a = ap.parse_args()
    if a.table_from:
        return table_from(a.table_from)
    py_llama = sys.executable
    if not os.access(a.k3, os.X_OK):
        raise SystemExit(f"side_by_side: --k3 {a.k3}: not an executable (build k3 first)")
    modes = k3_modes(a.k3)
    if a.modes:
        want = a.modes.split(",")
        unknown = [m for m in want if m not in modes]
        if unknown:
            raise SystemExit(f"side_by_side: --modes {a.modes}: {', '.join(unknown)} not among this k3's modes {list(modes)}")
        col_modes = list(want)  # the columns: the modes asked for
        if "exact" not in want:
            want.append("exact")  # the greedy check runs in the exact mode
        modes = {m: modes[m] for m in want}
    else:
        col_modes = list(modes)
    threads = [int(t) for t in a.threads.split(",")]
    columns = {}  # column label -> k3 mode (the greedy check keeps modes["exact"])
    for tm in a.trunk_memory.split(","):
        if tm not in ("map", "copy"):
            raise SystemExit(f"side_by_side: --trunk-memory {a.trunk_memory}: expected map and/or copy")
        for m in col_modes:
            mode = modes[m]
            extra = [] if tm == "map" else ["--trunk-memory", tm]
            columns[f"k3 {m}" + ("" if tm == "map" else f" {tm}")] = {"env": mode["env"], "args": mode["args"] + extra}
    import llama_cpp
    load = os.getloadavg()
    models = [("K3-mini", a.mini, a.rounds, a.reps)]
    if not a.skip_bench_model:
        if not os.path.isfile(os.path.join(a.bench_model, "config.json")):
            raise SystemExit(f"side_by_side: --bench-model {a.bench_model}: no config.json "
                             f"(make it with tools/reference/gen_bench_model.py, or pass --skip-bench-model)")
        models.append(("bench model", a.bench_model, a.bench_rounds, 1))
    ggufs = {label: export_cached(d, a.cache, py_llama) for label, d, _, _ in models}
    report = [f"llama-cpp-python {llama_cpp.__version__}; k3 {a.k3}; k3 columns {list(columns)}; "
              f"load average at start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {os.cpu_count()} CPUs", ""]
    report += greedy_check(a.k3, a.mini, ggufs["K3-mini"], py_llama, "And God said", 32, modes["exact"]) + [""]
    for l in report:
        log(l)
    res: dict = {}
    evictions = []
    for label, d, rounds, reps in models:
        k3_files = sorted(glob.glob(os.path.join(d, "*.safetensors")))
        for r in range(rounds):
            for t in threads:
                order = ["k3", "llama"] if (r + t) % 2 == 0 else ["llama", "k3"]
                for eng in order:
                    files = k3_files if eng == "k3" else [ggufs[label]]
                    frac = resident_fraction(files)
                    if frac is not None and frac < 0.99:
                        evictions.append(f"{label} t={t} round {r + 1} before {eng}: {100 * frac:.0f}% of its weight pages resident")
                    if eng == "k3":
                        for col, mode in columns.items():
                            if a.decode_only:
                                got = (("tg32", k3_bench(a.k3, d, t, 1, 32, mode, reps)[1]),)
                            else:
                                pp64, tg32 = k3_bench(a.k3, d, t, 64, 32, mode, reps)
                                pp512, _ = k3_bench(a.k3, d, t, 512, 1, mode, reps)
                                got = (("pp64", pp64), ("pp512", pp512), ("tg32", tg32))
                            for test, v in got:
                                if v is not None:
                                    res.setdefault((label, t, test, col), []).append(v)
                    else:
                        tests = ["--tests", "tg32"] if a.decode_only else []
                        j = json.loads(run([py_llama, os.path.join(HERE, "side_by_side_llama.py"), "bench",
                                            "--gguf", ggufs[label], "--threads", str(t), "--reps", str(reps), *tests]))
                        for test, v in j.items():
                            res.setdefault((label, t, test, "llama.cpp"), []).append(v)
                log(f"{label}: round {r + 1}/{rounds}, {t} threads done (load {os.getloadavg()[0]:.2f})")
                with open(os.path.join(a.cache, "partial.json"), "w") as f:  # the samples so far
                    json.dump({**{" | ".join(map(str, k)): v for k, v in res.items()},
                               "_evictions": evictions, "_failures": sorted(set(FAILURES))}, f, indent=1)
    cols = list(columns)
    table = ratio_table(res, [m[0] for m in models], threads, cols)
    bench_part = "" if a.skip_bench_model else f"; bench model {a.bench_rounds} rounds x 1 run"
    notes = [f"medians over rounds (K3-mini {a.rounds} rounds x median of {a.reps} runs per call{bench_part}); "
             f"load average at end {os.getloadavg()[0]:.2f}"]
    notes += ["page eviction seen: " + e for e in evictions] or ["no page eviction seen before any timed call (fincore)"]
    notes += ["k3 failure: " + f for f in sorted(set(FAILURES))]
    out = "\n".join(report + table + [""] + notes)
    print(out)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(out + "\n")


if __name__ == "__main__":
    main()
