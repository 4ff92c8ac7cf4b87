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

    def case_chat_np2(self):
        """`k3 chat` reads stdin on rank 0 and broadcasts each turn: the answers equal one process's
        (Open MPI gives rank 0 a terminal for stdout, so the dimmed notices' escapes are dropped)."""
        args = [self.k3, "chat", "-m", MINI, "--temp", "0", "-n", "12", "--no-think"]
        lines = "Hello there\nWhat is light?\n"
        e = dict(os.environ, OMP_NUM_THREADS="1")
        a = subprocess.run(args, input=lines, capture_output=True, text=True, timeout=TIMEOUT, env=e)
        b = subprocess.run(launcher() + ["-np", "2"] + args, input=lines, capture_output=True, text=True,
                           timeout=TIMEOUT, env=e)
        ok(a, "one process")
        ok(b, "2 ranks")
        strip = lambda t: re.sub(r"\x1b\[[0-9;]*m", "", t).replace("\r\n", "\n")  # noqa: E731
        assert strip(a.stdout).count("-n limit") == 2, a.stdout
        assert strip(a.stdout) == strip(b.stdout), f"2 ranks: {b.stdout!r} vs one process {a.stdout!r}"

    # --- k3 serve across ranks (rank 0 serves HTTP and broadcasts a step plan per engine step) ---
    def serve(self, n: int, model: str, extra: list[str] | None = None, ctx: int = 1024) -> "Served":
        """`k3 serve` on 127.0.0.1 (a free port): under the launcher when n > 1, else alone."""
        argv = [self.k3, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0", "--temp", "0",
                "-c", str(ctx), "--parallel", "2", "--cache-ram", "64", "--alias", "m"] + (extra or [])
        cmd = launcher() + ["-np", str(n)] + argv if n > 1 else argv
        return Served(cmd, os.path.join(self.work, f"serve-{n}-{os.getpid()}.log"))

    def completions(self, srv: "Served", prompts: list[str], n_tok: int = 12, concurrent: bool = False,
                    stream: bool = False) -> list[str]:
        """Greedy completions of `prompts` through the openai client (all at once when concurrent)."""
        import openai  # tools/requirements.txt
        from concurrent.futures import ThreadPoolExecutor
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="none", max_retries=0,
                               timeout=120)

        def one(p: str) -> str:
            if stream:
                return "".join(c.choices[0].text for c in client.completions.create(
                    model="m", prompt=p, max_tokens=n_tok, temperature=0, stream=True) if c.choices)
            return client.completions.create(model="m", prompt=p, max_tokens=n_tok, temperature=0).choices[0].text

        if not concurrent:
            return [one(p) for p in prompts]
        with ThreadPoolExecutor(len(prompts)) as ex:
            return list(ex.map(one, prompts))

    def serve_equal(self, model: str, n: int) -> None:
        """Greedy texts over the openai client: one after another (a later prompt extends an
        earlier one: prefix-cache reuse), then concurrently (batched steps), equal to one process."""
        base = "And God said, Let there be light: and there was light. " * 16
        seq = [base, base + "And God saw the light", "In the beginning"]
        conc = ["And the earth was", "without form, and void", "Let there be", "and darkness was"]
        with self.serve(1, model) as one:
            a_seq = self.completions(one, seq)
            a_conc = self.completions(one, conc, concurrent=True, stream=True)
        with self.serve(n, model) as many:
            b_seq = self.completions(many, seq)
            b_conc = self.completions(many, conc, concurrent=True, stream=True)
            reused = many.metric("k3:prefix_cache_hits_total")
        assert a_seq == b_seq, f"{n} ranks: {b_seq!r} vs one process {a_seq!r}"
        assert a_conc == b_conc, f"{n} ranks (concurrent): {b_conc!r} vs one process {a_conc!r}"
        assert all(len(t) > 0 for t in a_seq + a_conc), a_seq + a_conc
        assert reused is not None and reused >= 64, f"no prefix-cache reuse across requests: {reused}"
        assert many.returncode == 0, many.log()
        assert f"{n} ranks" in many.log(), many.log()

    def case_serve_mini_np2(self):
        self.serve_equal(MINI, 2)

    def case_serve_prompt_lookup_np2(self):  # speculative decoding: drafts verified on every rank
        base = "And God said, Let there be light: and there was light. " * 16
        flags = ["--spec-type", "ngram-simple", "--draft-max", "4"]
        with self.serve(1, MINI, flags) as one:
            a = self.completions(one, [base], 24)
        with self.serve(2, MINI, flags) as many:
            b = self.completions(many, [base], 24)
            drafted = many.metric("k3:spec_drafted_total")
        assert a == b, f"2 ranks: {b!r} vs one process {a!r}"
        assert drafted and drafted > 0, f"no drafts verified: {drafted}"
        assert many.returncode == 0, many.log()

    def case_serve_constrained_np2(self):
        """Requests whose sampling only rank 0 parses (json_schema and tool_choice constraints,
        logit_bias, sampled at temperature 1 with a seed) reach every rank in the step plan: the
        answers equal one process's, and the group keeps serving."""
        import openai  # tools/requirements.txt
        schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                                   "age": {"type": "integer", "minimum": 0, "maximum": 99}},
                  "required": ["name", "age"], "additionalProperties": False}
        tools = [{"type": "function", "function": {"name": "add", "parameters": {
            "type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}},
            "required": ["a"], "additionalProperties": False}}}]
        msgs = [{"role": "user", "content": "Describe a person as JSON."}]
        nothink = {"chat_template_kwargs": {"thinking": False}}

        def answers(srv):
            c = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="none", max_retries=0, timeout=120)
            out = []
            for i in range(2):
                r = c.chat.completions.create(model="m", messages=msgs, max_tokens=80, temperature=1.0, seed=5 + i,
                                              extra_body=nothink, response_format={
                                                  "type": "json_schema", "json_schema": {"name": "p", "schema": schema}})
                out.append(r.choices[0].message.content)
            r = c.chat.completions.create(model="m", messages=msgs, max_tokens=60, temperature=1.0, seed=9,
                                          extra_body=nothink, tools=tools, tool_choice="required")
            out.append(r.choices[0].message.tool_calls[0].function.arguments)
            r = c.completions.create(model="m", prompt="And God said", max_tokens=6, temperature=0,
                                     logit_bias={"0": -100, "1": -100})
            out.append(r.choices[0].text)
            return out

        with self.serve(1, MINI) as one:
            a = answers(one)
        with self.serve(2, MINI) as many:
            b = answers(many)
        assert a == b, f"2 ranks: {b!r} vs one process {a!r}"
        for t in a[:2]:
            json.loads(t)
        assert many.returncode == 0, many.log()

    def case_serve_idle_rank_np4(self):  # 3 experts on 4 ranks: rank 3 holds none, still steps
        self.serve_equal(self.tiny("few_experts"), 4)

    def case_serve_slots_np2(self):
        """/slots save under 2 ranks writes FILE (rank 0) and FILE.rank1of2; after erase and restore
        (every rank its own part) a request extending the kept prompt equals one process's."""
        import urllib.request
        slots = os.path.join(self.work, f"slots-{os.getpid()}")
        shutil.rmtree(slots, ignore_errors=True)
        os.makedirs(slots, mode=0o700)
        base = "And God said, Let there be light: and there was light. " * 8
        flags = ["--slot-save-path", slots, "--no-cache"]

        def post(srv, path, body):
            req = urllib.request.Request(f"http://127.0.0.1:{srv.port}{path}", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=60) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read())

        with self.serve(1, MINI, flags) as one:
            want = self.completions(one, [base + "And God saw"])
        with self.serve(2, MINI, flags) as many:
            self.completions(many, [base])
            st, r = post(many, "/slots/0?action=save", {"filename": "s.bin"})
            assert st == 200, r
            assert os.path.exists(os.path.join(slots, "s.bin")) and os.path.exists(os.path.join(slots, "s.bin.rank1of2"))
            assert post(many, "/slots/0?action=erase", {})[0] == 200
            st, r = post(many, "/slots/0?action=restore", {"filename": "s.bin"})
            assert st == 200 and r.get("n_restored", r.get("n_tokens", 1)) > 0, r
            got = self.completions(many, [base + "And God saw"])
            st, r = post(many, "/slots/0?action=restore", {"filename": "missing.bin"})
            assert st >= 400 and "missing.bin" in json.dumps(r), (st, r)
        assert got == want, f"2 ranks after restore: {got!r} vs one process {want!r}"
        assert many.returncode == 0, many.log()

    def case_serve_killed_rank_np2(self):
        """kill -9 of rank 1 while a request streams: the group exits non-zero within 10 s, no hang;
        under Open MPI the client gets a 503 error body, under MPICH (whose launcher SIGKILLs the
        other ranks at once) its stream is cut without a finish."""
        import time
        import urllib.request
        import threading
        srv = self.serve(2, MINI, ctx=16384)  # a stream of 16000 tokens outlasts the kill by seconds
        with srv:
            result = {"body": ""}
            first = threading.Event()

            def request():  # rank 1 is killed at the stream's first chunk
                body = json.dumps({"model": "m", "prompt": "And God said", "max_tokens": 16000, "temperature": 0,
                                   "ignore_eos": True, "stream": True}).encode()
                req = urllib.request.Request(f"http://127.0.0.1:{srv.port}/v1/completions", data=body,
                                             headers={"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(req, timeout=60) as r:
                        for line in r:
                            result["body"] += line.decode(errors="replace")
                            first.set()
                except Exception as e:  # noqa: BLE001 - a closed connection is an error too
                    result["error"] = repr(e)
                first.set()

            t = threading.Thread(target=request)
            t.start()
            assert first.wait(60), "no first chunk"
            os.kill(srv.rank_pid(1), 9)
            t0 = time.monotonic()
            code = srv.wait(20)
            took = time.monotonic() - t0
            t.join(30)
        assert code is not None and code != 0, f"the group did not exit non-zero: {code}\n{srv.log()}"
        assert took < 10, f"the group took {took:.1f} s to end after rank 1 died"
        print(f"the group ended {took:.2f} s after rank 1 was killed")
        body = result.get("body", "")
        if len(launcher()) == 1:  # MPICH's hydra kills every rank with SIGKILL at once: no answer
            assert "[DONE]" not in body and '"finish_reason":"' not in body, f"the stream looked complete: {result}"
            assert "BAD TERMINATION" in srv.log(), srv.log()
            return
        # Open MPI's launcher sends SIGTERM first: rank 0 answers the running request.
        assert '"error"' in body and "503" in body and "unavailable" in body, f"no 503 error body: {result}"
        assert "from the launcher" in srv.log(), srv.log()

    def case_serve_sigterm_np2(self):
        """SIGTERM to rank 0 while a 300-token stream runs: the stream finishes (all its tokens,
        finish_reason "length"), every rank stops, exit 0."""
        import signal
        import threading
        import urllib.request
        srv = self.serve(2, MINI)
        with srv:
            out = {"body": ""}
            first = threading.Event()

            def request():
                body = json.dumps({"model": "m", "prompt": "And God said", "max_tokens": 300, "temperature": 0,
                                   "ignore_eos": True, "stream": True}).encode()
                req = urllib.request.Request(f"http://127.0.0.1:{srv.port}/v1/completions", data=body,
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=60) as r:
                    for line in r:
                        out["body"] += line.decode(errors="replace")
                        first.set()
                first.set()

            t = threading.Thread(target=request)
            t.start()
            assert first.wait(60), "no first chunk"
            os.kill(srv.rank_pid(0), signal.SIGTERM)
            code = srv.wait(30)
            t.join(30)
        assert code == 0, f"exit {code}\n{srv.log()}"
        chunks = [json.loads(x[6:]) for x in out["body"].splitlines() if x.startswith("data: {")]
        assert chunks and chunks[-1]["choices"][0]["finish_reason"] == "length", out["body"][-500:]
        assert out["body"].rstrip().endswith("data: [DONE]"), out["body"][-200:]
        assert "SIGTERM: stopping" in srv.log() and "stopped" in srv.log(), srv.log()


class Served:
    """A `k3 serve` (or its launcher) started by Cases.serve; stops it on exit."""

    def __init__(self, cmd: list[str], log_path: str):
        self.log_path = log_path
        self.logf = open(log_path, "w")
        env = dict(os.environ, OMP_NUM_THREADS="1")
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        self.returncode = None
        self.port = None
        import time
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and self.proc.poll() is None:
            log = self.log()
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log)
            if m and "ready:" in log:
                self.port = int(m.group(1))
                break
            time.sleep(0.1)
        if self.port is None:
            self.kill()
            raise AssertionError("k3 serve did not start:\n" + self.log())

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def metric(self, name: str) -> float | None:
        import urllib.request
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10).read().decode()
        m = re.search(r"^" + re.escape(name) + r"(?:\{[^}]*\})? ([0-9.e+-]+)$", text, re.M)
        return float(m.group(1)) if m else None

    def _rank_pids(self, rank: int | None) -> list[int]:
        """The pids of `rank` among the processes of this launch (by the launcher's rank variable):
        descendants of the launcher (MPICH's hydra proxies start the ranks in sessions of their own);
        every rank's with rank None."""
        def parent(pid: int) -> int:
            with open(f"/proc/{pid}/stat") as f:
                return int(f.read().rsplit(")", 1)[1].split()[1])

        def under_launcher(pid: int) -> bool:
            for _ in range(16):
                if pid == self.proc.pid:
                    return True
                if pid <= 1:
                    return False
                pid = parent(pid)
            return False

        found = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                if not under_launcher(int(pid)):
                    continue
                env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
                exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
            except (OSError, ValueError, IndexError):
                continue
            for v in (b"OMPI_COMM_WORLD_RANK=", b"PMI_RANK="):
                hit = any(e.startswith(v) for e in env) if rank is None else v + str(rank).encode() in env
                if hit and exe == "k3":
                    found.append(int(pid))
                    break
        return found

    def rank_pid(self, rank: int) -> int:
        """The pid of `rank` among the processes of this launch (_rank_pids)."""
        pids = self._rank_pids(rank)
        if not pids:
            raise AssertionError(f"no process of rank {rank} found")
        return pids[0]

    def wait(self, timeout: float):
        try:
            self.returncode = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.returncode = None
        return self.returncode

    def kill(self):
        """SIGKILL to the launcher's process group and to every rank under it (MPICH's hydra
        starts the ranks in sessions of their own, which the group kill does not reach)."""
        import signal
        if self.proc.poll() is None:
            ranks = self._rank_pids(None)
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            for pid in ranks:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        import signal
        try:
            if self.proc.poll() is None and self.returncode is None:
                launched = "mpirun" in " ".join(self.proc.args) or "mpiexec" in " ".join(self.proc.args)
                os.kill(self.rank_pid(0) if launched else self.proc.pid, signal.SIGTERM)
                self.wait(30)
        finally:
            self.kill()  # never leaves a rank running, also when the SIGTERM path failed
        self.returncode = self.proc.returncode
        self.logf.close()

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
