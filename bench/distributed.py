#!/usr/bin/env python3
"""Distributed benchmark: `k3 bench` (and optionally `k3 serve` at batch 16) at N = 1, 2, 4 ranks,
then a projection of full K3 on 4 x 512 GB and 8 x 256 GB nodes over 25 GbE, 100 GbE and
InfiniBand from the measured counts and bytes. A benchmark, not a test (docs/performance.md
"Distributed").

Usage:
  .venv/bin/python tools/reference/gen_bench_model.py --out /tmp/k3-bench     # once, ~10 GB
  .venv/bin/python bench/distributed.py [-m /tmp/k3-bench] [--ranks 1,2,4] [-p 64] [-n 8] [-r 2]
      [-t 1] [--serve-streams 16] [--node-gbs 300]
  .venv/bin/python bench/distributed.py --project-only results.json     # the projection again

Per N it prints, from rank 0's `k3 bench --json` (every rank runs the same measurements):
prefill (pp) and decode (tg, batch 1) tokens/s, rank 0's collectives, bytes sent and seconds
inside MPI per prefill and per decoded token, and the weight bytes each rank holds (busiest vs
mean, from the start-up lines; routed experts are split evenly, so the per-token imbalance is the
routing's, which this counts only as the held bytes). With --serve-streams S it also starts
`mpirun -np N k3 serve -np S` and measures aggregate tokens/s of S concurrent greedy streams
(bench/serve_load.py). On a 2-core box N = 4 oversubscribes the cores: the numbers then show the
protocol's costs, not a speed-up.

The projection (a model, not a measurement): a decode step of full K3 on N nodes takes
  t = max-rank weight bytes / node read bandwidth  +  C * alpha * ceil(log2 N)  +  B / link bandwidth
with C = the collectives per token (per layer: the head outputs' and the hidden block's
all-gathers of the attention, the MLP's intermediate and hidden-block all-gathers and the routed
experts' all-gather; plus the logits all-gather), counted on the bench model and scaled from its
layers to K3's 93, B = the bytes a rank sends per token (the measured per-layer bytes scaled the
same way, plus K3's 163,840-row logits slice), alpha the link's per-message latency. Every
weight is split over the N nodes (tensor + expert parallel), so a node reads 1/N of the trunk
and its experts (times the routing's imbalance). One node's ceiling is node bandwidth / full-K3 bytes per
token, if the model fitted.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
K3 = os.path.join(ROOT, "build", "tools", "cli", "k3")

# Full K3 (spec distributed.md §2): bytes per decoded token are the bench's k3_full figure.
K3_LAYERS, K3_VOCAB = 93, 163840
K3_EXPERT_BYTES, K3_TRUNK_BYTES = 1.45e12, 0.110e12  # MXFP4 routed experts, BF16 trunk (+ lm_head)
# Read per decoded token at batch 1 (spec distributed.md §3.1): every trunk weight but the
# embedding, and 16 routed experts per MoE layer.
K3_TRUNK_TOKEN, K3_EXPERT_TOKEN = 111.16e9, 25.83e9
# Busiest node's expert bytes over the mean at batch 1 (spec §3.5 note 4: ~2x at N = 8; 1.5x at
# N = 4 is ASSUMED).
IMBALANCE = {4: 1.5, 8: 2.0}
NETWORKS = [  # name, bytes/s per link, one-way latency (s): spec distributed.md §3.1's assumptions
    ("25 GbE (TCP)", 25e9 / 8, 25e-6),
    ("100 GbE (TCP)", 100e9 / 8, 15e-6),
    ("InfiniBand HDR 200 Gb/s", 200e9 / 8, 1.5e-6),
]
CLUSTERS = [("4 x 512 GB", 4, 512e9), ("8 x 256 GB", 8, 256e9)]


def launcher() -> list[str]:
    v = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout
    if "Open MPI" in v:
        return ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
                "--mca", "mpi_yield_when_idle", "1"]
    return ["mpirun"]


def run_bench(model: str, n: int, a) -> dict:
    args = [K3, "bench", "-m", model, "-p", str(a.p), "-n", str(a.n), "-r", str(a.r), "--json",
            "--probe-mb", "64", "-t", str(a.t)]
    cmd = (launcher() + ["-np", str(n)] + args) if n > 1 else args
    env = dict(os.environ, OMP_NUM_THREADS=str(a.t))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr[-3000:]}")
    j = json.loads(p.stdout[p.stdout.index("{"):])
    held = [float(x) for x in re.findall(r"rank \d+: experts .*?weights ([0-9.]+) MB", p.stderr)]
    j["held_mb"] = held
    return j


def run_serve(model: str, n: int, streams: int, a) -> str:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = [K3, "serve", "-m", model, "--port", str(port), "-np", str(streams), "-t", str(a.t), "-c", "256",
            "--temp", "0"]
    cmd = (launcher() + ["-np", str(n)] + args) if n > 1 else args
    env = dict(os.environ, OMP_NUM_THREADS=str(a.t))
    srv = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                           start_new_session=True)
    try:
        deadline = time.time() + 600
        import urllib.request
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.5)
        out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "serve_load.py"), "--url",
                              f"http://127.0.0.1:{port}", "--streams", f"1,{streams}", "--tokens", str(a.n),
                              "--mixed", "0"], capture_output=True, text=True, timeout=3600)
        return out.stdout
    finally:
        os.killpg(srv.pid, 9)
        srv.wait()


def project(results: dict, node_gbs: float) -> str:
    """The full-K3 cluster table from the measured per-token counts (see the module doc)."""
    lines = ["| nodes | network | weights per node | read per node per token (busiest) | "
             "MPI per token | step time | tokens/s |", "|---|---|---|---|---|---|---|"]
    base = results.get("2") or next(v for k, v in results.items() if k != "1")
    n_layers_b, v_bench, n_b = base["n_layers"], base["vocab"], base["ranks"]["n"]
    per_tok = base["ranks"]["rank0_per_decode_token"]
    logits_b = 4.0 * v_bench / n_b * (n_b - 1)  # rank 0's logits slice, to each other rank
    # An all-gather of a vector of X bytes costs each rank X (N - 1) / N sent: X per layer, from
    # the measured bytes less the logits (the bench model has K3's widths, so a layer's vectors
    # are K3's; its layer mix is averaged).
    x_layer = max(0.0, per_tok["bytes_sent"] - logits_b) / n_layers_b / ((n_b - 1) / n_b)
    coll_per_layer = max(0.0, per_tok["collectives"] - 1) / n_layers_b
    for name, n, ram in CLUSTERS:
        imbalance = IMBALANCE[n]
        coll = coll_per_layer * K3_LAYERS + 1
        sent = x_layer * K3_LAYERS * (n - 1) / n + 4.0 * K3_VOCAB / n * (n - 1)
        held = (K3_TRUNK_BYTES + K3_EXPERT_BYTES) / n
        read = K3_TRUNK_TOKEN / n + K3_EXPERT_TOKEN / n * imbalance
        fits = "fits" if held < 0.9 * ram else "does not fit"
        for net, bw, alpha in NETWORKS:
            t_mem = read / (node_gbs * 1e9)
            t_mpi = coll * alpha * math.ceil(math.log2(n)) + sent / bw
            t = t_mem + t_mpi
            lines.append(f"| {name} | {net} | {held / 1e9:.0f} GB ({fits}) | {read / 1e9:.1f} GB | "
                         f"{coll:.0f} coll., {sent / 1e6:.2f} MB, {1e3 * t_mpi:.2f} ms | {1e3 * t:.0f} ms | "
                         f"{1 / t:.2f} |")
    one = K3_TRUNK_TOKEN + K3_EXPERT_TOKEN
    lines.append(f"| 1 node (ceiling if it fitted) | - | {(K3_TRUNK_BYTES + K3_EXPERT_BYTES) / 1e12:.2f} TB | "
                 f"{one / 1e9:.1f} GB | - | {1e3 * one / (node_gbs * 1e9):.0f} ms | {node_gbs * 1e9 / one:.2f} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", default="/tmp/k3-bench")
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("-p", type=int, default=64, help="prefill tokens")
    ap.add_argument("-n", type=int, default=8, help="decoded tokens per run")
    ap.add_argument("-r", type=int, default=2, help="runs")
    ap.add_argument("-t", type=int, default=1, help="threads per rank")
    ap.add_argument("--serve-streams", type=int, default=0, help="also k3 serve with this many streams (0: no)")
    ap.add_argument("--node-gbs", type=float, default=300.0,
                    help="a node's memory read bandwidth in GB/s for the projection (12-channel DDR5 ~ 400)")
    ap.add_argument("--out", default="", help="write the measurements as JSON here")
    ap.add_argument("--project-only", default="", help="a JSON written by --out: print only the projection")
    a = ap.parse_args()
    if a.project_only:
        print(project(json.load(open(a.project_only)), a.node_gbs))
        return 0
    if not os.path.exists(os.path.join(a.model, "config.json")):
        sys.exit(f"{a.model}: no checkpoint (make it with tools/reference/gen_bench_model.py --out {a.model})")
    results: dict[str, dict] = {}
    print("| N | pp t/s | tg t/s (batch 1) | weights held per rank MB (busiest / mean) | "
          "rank 0 per prefill: coll., MB sent, ms in MPI | rank 0 per token: coll., MB sent, ms in MPI |")
    print("|---|---|---|---|---|---|")
    for n in [int(x) for x in a.ranks.split(",")]:
        j = run_bench(a.model, n, a)
        cfg = json.load(open(os.path.join(a.model, "config.json")))
        cfg = cfg.get("text_config", cfg)
        j["n_layers"] = cfg["num_hidden_layers"]
        j["vocab"] = cfg["vocab_size"]
        results[str(n)] = j
        held = j["held_mb"] or [0.0]
        r = j.get("ranks")
        pp = r["rank0_per_prefill"] if r else None
        tg = r["rank0_per_decode_token"] if r else None
        f = (lambda k: f"{k['collectives']:.0f}, {k['bytes_sent'] / 1e6:.3f}, {1e3 * k['seconds_in_collectives']:.1f}"
             if k else "-")
        print(f"| {n} | {j['pp']['tokens_per_s']:.2f} | {j['tg']['tokens_per_s']:.3f} | "
              f"{max(held):.0f} / {sum(held) / len(held):.0f} | {f(pp)} | {f(tg)} |", flush=True)
        if a.serve_streams:
            print(f"\nk3 serve, N = {n}:\n" + run_serve(a.model, n, a.serve_streams, a), flush=True)
    if a.out:
        json.dump(results, open(a.out, "w"), indent=1)
    if len(results) > 1:
        print("\nProjection of full K3 (node read bandwidth %.0f GB/s):\n" % a.node_gbs)
        print(project(results, a.node_gbs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
