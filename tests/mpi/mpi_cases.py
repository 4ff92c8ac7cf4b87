"""Distributed k3 (docs/distributed.md) against one process, bit for bit: one case per ctest test.

Usage: python tests/mpi/mpi_cases.py --k3 BUILD/tools/cli/k3 --work DIR CASE   (--list: the cases)

Every launch goes through `launch()` (the one place that knows the launcher's flags: Open MPI's
mpirun, or MPICH's mpiexec with K3_MPIEXEC=mpiexec.mpich), so the same cases run under either.
Ranks run on this machine only (shared memory, or TCP on loopback in the tcp case).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MINI = os.path.join(ROOT, "models", "k3-mini")
IDS = "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33"
TIMEOUT = 240  # seconds for one launch: a hang fails the case instead of blocking ctest


def launcher() -> list[str]:
    """The launcher command and its flags for ranks on this machine (root allowed, more ranks than cores)."""
    exe = os.environ.get("K3_MPIEXEC", "mpirun")
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    if "Open MPI" in version or "OpenRTE" in version:
        return [exe, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
    return [exe]  # MPICH (hydra): root and oversubscription need no flag


def launch(apps: list[tuple[int, list[str]]], mca: list[str] | None = None,
           env: dict | None = None) -> subprocess.CompletedProcess:
    """One launch of ranks: apps = [(n_ranks, argv), ...] (several: an MPMD line joined by ':')."""
    cmd = launcher() + (mca or [])
    for i, (n, argv) in enumerate(apps):
        if i:
            cmd.append(":")
        cmd += ["-np", str(n)] + argv
    e = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=e)


def single(argv: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    """The same command as one process, without a launcher."""
    e = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    return subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, env=e)


def ok(p: subprocess.CompletedProcess, what: str) -> subprocess.CompletedProcess:
    if p.returncode != 0:
        raise AssertionError(f"{what}: exit {p.returncode}\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}")
    return p


class Cases:
    def __init__(self, k3: str, work: str):
        self.k3 = k3
        self.work = work
        os.makedirs(work, exist_ok=True)

    def tiny(self, variant: str) -> str:
        """A tiny random checkpoint (tools/reference/gen_tiny.py, byte tokenizer), made once."""
        d = os.path.join(self.work, f"tiny-{variant}")
        if not os.path.exists(os.path.join(d, "config.json")):
            tmp = f"{d}.tmp{os.getpid()}"
            subprocess.run([sys.executable, os.path.join(ROOT, "tools", "reference", "gen_tiny.py"), "--out", tmp,
                            "--variant", variant, "--seed", "1", "--byte-tokenizer"], check=True)
            try:
                os.rename(tmp, d)
            except OSError:
                subprocess.run(["rm", "-rf", tmp])
        return d

    def poisoned_copy(self, model: str, experts: range, name: str) -> str:
        """A copy of `model` whose routed experts `experts` (every MoE layer) have NaN MXFP4 scales
        (E8M0 0xFF): a rank that computes with one of them fails or differs."""
        d = os.path.join(self.work, f"{name}-{os.getpid()}")
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(model, d)
        hit = 0
        for f in sorted(os.listdir(d)):
            if not f.endswith(".safetensors"):
                continue
            path = os.path.join(d, f)
            with open(path, "r+b") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(n))
                for t, v in header.items():
                    m = re.search(r"\.experts\.(\d+)\.w[123]\.weight_scale$", t)
                    if m and int(m.group(1)) in experts:
                        b, e = v["data_offsets"]
                        fh.seek(8 + n + b)
                        fh.write(b"\xff" * (e - b))
                        hit += 1
        assert hit > 0, f"no expert scales of {list(experts)} found in {model}"
        return d

    def logits_equal(self, model: str, n: int, numerics: str = "exact", mca: list[str] | None = None,
                     env: dict | None = None, ids: str = IDS) -> None:
        """`k3 logits --out` under n ranks writes the same bytes as one process; only rank 0 writes."""
        tag = f"{os.path.basename(model)}-{n}-{numerics}-{os.getpid()}"
        one = os.path.join(self.work, f"one-{tag}.npy")
        many = os.path.join(self.work, f"many-{tag}.npy")
        args = ["logits", "-m", model, "--ids", ids, "--numerics", numerics]
        ok(single([self.k3] + args + ["--out", one], env), "one process")
        p = ok(launch([(n, [self.k3] + args + ["--out", many])], mca, env), f"{n} ranks")
        a, b = open(one, "rb").read(), open(many, "rb").read()
        assert len(a) > 128 and a == b, f"{n} ranks: logits differ from one process ({len(a)} vs {len(b)} bytes)"
        assert p.stdout == "", f"{n} ranks: expected nothing on stdout with --out, found {p.stdout!r}"
        assert "rank 0: experts" in p.stderr and f"rank {n - 1}: experts" in p.stderr, p.stderr
        os.remove(one)
        os.remove(many)

    def run_equal(self, model: str, n: int, extra: list[str]) -> None:
        """`k3 run --json` under n ranks prints the one JSON line one process prints (ids, text)."""
        args = [self.k3, "run", "-m", model, "-p", "And God said", "-n", "24", "--json", "--no-stats"] + extra
        a = json.loads(ok(single(args), "one process").stdout)
        p = ok(launch([(n, args)]), f"{n} ranks")
        lines = p.stdout.strip().splitlines()
        assert len(lines) == 1, f"{n} ranks: expected one JSON line (rank 0 alone prints), found {lines!r}"
        b = json.loads(lines[0])
        assert a["ids"] == b["ids"] and a["text"] == b["text"], f"{n} ranks: {b['ids']} vs one process {a['ids']}"
        assert len(a["ids"]) == 24, a

    # --- the cases -------------------------------------------------------------------------------
    def case_logits_mini_np2_exact(self):
        self.logits_equal(MINI, 2)

    def case_logits_mini_np4_exact(self):
        self.logits_equal(MINI, 4)

    def case_logits_mini_np2_int8(self):
        self.logits_equal(MINI, 2, "int8")

    def case_logits_mini_np4_int8(self):
        self.logits_equal(MINI, 4, "int8")

    def case_logits_odd_np4_exact(self):  # 6 experts on 4 ranks (2,2,1,1), 515 vocabulary rows
        self.logits_equal(self.tiny("odd_experts"), 4)

    def case_logits_odd_np4_int8(self):
        self.logits_equal(self.tiny("odd_experts"), 4, "int8")

    def case_logits_odd_np3_bf16(self):
        self.logits_equal(self.tiny("odd_experts"), 3, "bf16")

    def case_logits_odd_np2_ref(self):  # the fp64 oracle kernels
        self.logits_equal(self.tiny("odd_experts"), 2, env={"K3_KERNELS": "ref"})

    def case_logits_zero_experts_np4(self):  # 3 experts on 4 ranks: rank 3 holds none
        self.logits_equal(self.tiny("few_experts"), 4)

    def case_logits_tcp_np2(self):  # the TCP transport on loopback instead of shared memory
        if "Open MPI" not in subprocess.run([launcher()[0], "--version"], capture_output=True, text=True).stdout:
            self.logits_equal(MINI, 2, env={"UCX_TLS": "tcp,self"})
            return
        self.logits_equal(MINI, 2, mca=["--mca", "btl", "tcp,self", "--mca", "pml", "ob1",
                                        "--mca", "btl_tcp_if_include", "lo"])

    def case_run_greedy_np2(self):
        self.run_equal(MINI, 2, ["--temp", "0"])

    def case_run_sampled_np2(self):
        self.run_equal(MINI, 2, ["--temp", "0.9", "--seed", "1234"])

    def case_run_streamed_experts_np2(self):  # experts read from the shards (each rank: its own)
        self.run_equal(MINI, 2, ["--temp", "0", "--stream-experts", "--no-direct-io"])

    def case_run_trunk_q8_np4(self):  # the trunk quantized at load, lm_head rows per rank
        self.run_equal(MINI, 4, ["--temp", "0", "--trunk-type", "q8"])

    def case_perplexity_np2(self):
        text = os.path.join(self.work, "heldout-head.txt")
        with open(os.path.join(MINI, "heldout.txt"), encoding="utf-8") as f, open(text, "w", encoding="utf-8") as g:
            g.write(f.read(1500))
        args = [self.k3, "perplexity", "-m", MINI, "-f", text, "-c", "64", "--json"]
        a = json.loads(ok(single(args), "one process").stdout)
        b = json.loads(ok(launch([(2, args)]), "2 ranks").stdout)
        assert a["mean_nll"] == b["mean_nll"] and a["ppl"] == b["ppl"] and a["n_scored"] == b["n_scored"], (a, b)

    def case_ranks_read_only_their_experts_np2(self):
        """Rank 0 opens a copy whose experts 8-15 (rank 1's) are poisoned, rank 1 one whose experts
        0-7 (rank 0's) are: the logits still equal one process on the clean checkpoint."""
        a = self.poisoned_copy(MINI, range(8, 16), "poison-rank1-experts")
        b = self.poisoned_copy(MINI, range(0, 8), "poison-rank0-experts")
        one = os.path.join(self.work, f"one-poison-{os.getpid()}.npy")
        many = os.path.join(self.work, f"many-poison-{os.getpid()}.npy")
        args = ["logits", "--ids", IDS, "--numerics", "int8"]
        ok(single([self.k3] + args + ["-m", MINI, "--out", one]), "one process")
        bad = single([self.k3] + args + ["-m", a, "--out", many])
        assert bad.returncode != 0 or open(many, "rb").read() != open(one, "rb").read(), "the poison is not seen"
        ok(launch([(1, [self.k3] + args + ["-m", a, "--out", many]), (1, [self.k3] + args + ["-m", b, "--out", many])]),
           "2 ranks on poisoned copies")
        assert open(one, "rb").read() == open(many, "rb").read(), "a rank computed with another rank's experts"
        for p in (a, b):
            shutil.rmtree(p)
        os.remove(one)
        os.remove(many)

    def case_refuse_other_checkpoint(self):
        """MPMD: rank 1 opens another checkpoint; every rank refuses, naming rank 1 and what differs."""
        args = ["logits", "--ids", "1,2,3"]
        p = launch([(1, [self.k3] + args + ["-m", MINI]), (1, [self.k3] + args + ["-m", self.tiny("odd_experts")])])
        assert p.returncode != 0, "a group whose ranks opened different checkpoints must not start"
        assert "rank 1 (" in p.stderr and "differs from rank 0" in p.stderr and "config.json" in p.stderr, p.stderr
        assert "pos 0" not in p.stdout, p.stdout

    def case_refuse_other_input(self):
        """MPMD: the ranks read different ids (and, for run, different prompts): every rank refuses
        before the first forward, naming rank 1, instead of desynchronising the collectives."""
        p = launch([(1, [self.k3, "logits", "-m", MINI, "--ids", "1,2,3"]),
                    (1, [self.k3, "logits", "-m", MINI, "--ids", "1,2,4"])])
        assert p.returncode == 1, (p.returncode, p.stderr)
        assert "rank(s) 1 were given other ids than rank 0" in p.stderr, p.stderr
        assert "pos 0" not in p.stdout, p.stdout
        run = [self.k3, "run", "-m", MINI, "-n", "4", "--temp", "0", "--no-stats", "-p"]
        p = launch([(1, run + ["And God said"]), (1, run + ["And God saw"])])
        assert p.returncode == 1, (p.returncode, p.stderr)
        assert "rank(s) 1 were given other prompt ids" in p.stderr, p.stderr

    # --- tensor parallel heads (KDA/MLA heads, dense-MLP columns, o_proj rows split) ------------
    def case_logits_odd_heads_np2_exact(self):  # 3 KDA + 3 MLA heads on 2 ranks (2, 1)
        self.logits_equal(self.tiny("odd_heads"), 2)

    def case_logits_odd_heads_np4_int8(self):  # 3 heads on 4 ranks: rank 3 holds none
        self.logits_equal(self.tiny("odd_heads"), 4, "int8")

    def case_logits_one_head_np4_mxfp8(self):  # 1 head: ranks 1-3 hold none
        self.logits_equal(self.tiny("one_head"), 4, "mxfp8")

    def case_run_odd_heads_greedy_np2(self):
        self.run_equal(self.tiny("odd_heads"), 2, ["--temp", "0"])

    def case_run_odd_heads_greedy_np4(self):
        self.run_equal(self.tiny("odd_heads"), 4, ["--temp", "0"])

    def case_state_round_trip_np2(self):
        """--state-save under 2 ranks writes F (rank 0) and F.rank1of2; --state-load under 2 ranks
        continues exactly as one process that saved and loaded; under 4 ranks it is refused."""
        model = self.tiny("odd_heads")
        base = [self.k3, "run", "-m", model, "-n", "6", "--temp", "0", "--json", "--no-stats"]
        f1 = os.path.join(self.work, f"state-one-{os.getpid()}")
        f2 = os.path.join(self.work, f"state-two-{os.getpid()}")
        ok(single(base + ["-p", "And God said", "--state-save", f1]), "one process save")
        a = json.loads(ok(single(base + ["--state-load", f1]), "one process load").stdout)
        ok(launch([(2, base + ["-p", "And God said", "--state-save", f2])]), "2 ranks save")
        assert os.path.exists(f2) and os.path.exists(f2 + ".rank1of2"), os.listdir(self.work)
        assert open(f2, "rb").read() != open(f1, "rb").read(), "rank 0's piece is the whole state"
        p = ok(launch([(2, base + ["--state-load", f2])]), "2 ranks load")
        b = json.loads(p.stdout.strip().splitlines()[0])
        assert a["ids"] == b["ids"] and a["text"] == b["text"], (a, b)
        p = launch([(4, base + ["--state-load", f2])])
        assert p.returncode != 0, "a 2-rank state loaded under 4 ranks"
        assert "saved by rank 0 of 2, this is rank 0 of 4" in p.stderr, p.stderr[-2000:]
        for f in (f1, f2, f2 + ".rank1of2"):
            os.remove(f)

    def case_refuse_serve_np2(self):
        p = launch([(2, [self.k3, "serve", "-m", MINI, "--port", "0"])])
        assert p.returncode != 0 and "k3 serve runs as one process in this version" in p.stderr, p.stderr
        assert "docs/distributed.md" in p.stderr, p.stderr


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k3", required=False)
    ap.add_argument("--work", default="/tmp/k3-mpi-cases")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("case", nargs="*")
    a = ap.parse_args(argv)
    names = sorted(n[len("case_"):] for n in dir(Cases) if n.startswith("case_"))
    if a.list:
        print("\n".join(names))
        return 0
    c = Cases(os.path.abspath(a.k3), a.work)
    for name in a.case or names:
        if name not in names:
            print(f"unknown case {name!r}; cases: {', '.join(names)}", file=sys.stderr)
            return 2
        getattr(c, "case_" + name)()
        print(f"ok {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
