"""K3-mini-vision: K3-mini's text model + a small MoonViT-V2 tower and projector trained here.

Data: pictures from tools/train/vision_data.py (112×112: an 8×8 patch grid, 16 image tokens), each
with the four questions of vision_data.QUESTIONS, and KJV text (the K3-mini training split).
Prompts: the K3 chat format exactly as the engine renders it — the python package `k3`'s
render_chat (tokenizer/chat_k3.cpp) for the turns, and the media block of one picture taken from
`k3 logits --image ... --ids-out` (runtime/image_prompt.cpp), spliced before the first user text
(checked against the engine's ids for every question, thinking on and off). A training sequence
is one picture and its four questions in random order as four user/assistant turns (the first
turn is exactly what `k3 run --image F -p Q` renders); the loss is on the assistant tokens.

Stages (one thread, float32 master weights, wall-time bounded):
  1. tower warm-up: the tower + projector alone, with linear heads on the mean of the image rows
     predicting colour, shape and count (cross-entropy; the heads are not exported).
  2. joint: the chat loss through K3-mini (all weights trainable), the warm-up heads' loss, and the
     next-token loss on a 128-token KJV window per step so the text perplexity is kept.
Optimizers (algorithms.md §4, as tools/train/train.py): per-head Muon for matrices (the tower's
wqkv in blocks of head_dim rows), AdamW for embeddings, head, norms, the patch conv, the position
table and the rest; the text model at --text-lr-scale × the tower's lr; QB router bias every step;
MXFP4 QAT on the routed experts. Then export (bf16 tower/projector, as published), and
held-out accuracy per question type (teacher-forced; all answer tokens argmax-correct = what greedy
decoding produces), thinking on and off.
Usage: python -m tools.train.train_vision --k3 build/tools/cli/k3 --base models/k3-mini --work W --out models/k3-mini-vision
"""
import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from tools.train import vision_data as vd
from tools.train.data import HELDOUT_BOOKS, load_kjv
from tools.train.distill import load_teacher
from tools.train.export import export_tensors
from tools.train.muon import Muon
from tools.train.quantile_balance import qb_solve
from tools.train.train import lr_at, muon_blocks
from tools.train.vision_tower import VisionTower, init_vision, pixel_patches, vision_config

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reference"))
import k3_checkpoint as kc  # noqa: E402

QTYPES = list(vd.QUESTIONS)
N_COLOUR, N_SHAPE, N_COUNT = len(vd.COLOURS), len(vd.SHAPES), len(vd.COUNTS)
FILL = 0  # right padding of a batch's shorter sequences (never a target; the model is causal)


def write_model(out, base, vc, text_sd, tower):
    """Writes OUT: base's config.json with `vc` as vision_config, the text tensors (export.py's
    rounding: bf16 trunk, MXFP4 experts) and the tower/projector in BF16; the tokenizer files.
    Returns (exact text state dict, exact tower state dict): the exported values as float32."""
    out.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((base / "config.json").read_text())
    cfg["vision_config"] = vc
    tensors, exact = export_tensors(cfg["text_config"], text_sd)
    extra, vexact = {}, {}
    for name, p in tower.state_dict().items():
        bits = kc.f32_to_bf16_bits(p.detach().float().numpy())
        extra[name] = ("BF16", bits)
        vexact[name] = torch.from_numpy(kc.bf16_bits_to_f32(bits).copy()).reshape(p.shape)
    for old in out.glob("model-*.safetensors"):
        old.unlink()
    kc.write_checkpoint(str(out), cfg, tensors, n_shards=3, extra_tensors=extra)
    for f in ("tiktoken.model", "tokenizer_config.json"):
        (out / f).write_bytes((base / f).read_bytes())
    return exact, vexact


class Chat:
    """The engine's K3 chat rendering of picture conversations (see the module doc)."""

    def __init__(self, llm, k3_bin, model_dir, work):
        self.llm, self.e = llm, llm._engine
        self.pad = llm.tokenize("<|media_pad|>", special=True)
        assert len(self.pad) == 1, self.pad
        self.pad = self.pad[0]
        pic = work / "probe.png"
        vd.draw("red", "circle", 3, np.random.default_rng(0)).save(pic)
        self.media, self.at = None, {}
        for think in (True, False):
            for qt, q in vd.QUESTIONS.items():
                f = work / "probe_ids.txt"
                cmd = [k3_bin, "logits", "-m", str(model_dir), "--image", str(pic), "-p", q, "--ids-out", str(f),
                       "--top-k", "1"] + ([] if think else ["--no-think"])
                subprocess.run(cmd, check=True, capture_output=True)
                eng = [int(x) for x in f.read_text().replace(",", " ").split()]
                txt = self.render([{"role": "user", "content": q}], think, True)
                i = next(j for j in range(len(txt)) if eng[j] != txt[j])
                media = eng[i:i + len(eng) - len(txt)]
                assert eng == txt[:i] + media + txt[i:], "media splice differs from the engine's ids"
                assert self.media in (None, media) and self.at.get(think, i) == i
                self.media, self.at[think] = media, i
        assert self.media.count(self.pad) == 16, self.media

    def render(self, messages, think, gen):
        kw = {"thinking": think, "add_generation_prompt": gen}
        return list(self.e.render_chat(json.dumps(messages), json.dumps(kw)))

    def conversation(self, qas, think):
        """qas [(question, answer)] -> (ids with the media block, [(start, end)] assistant spans)."""
        msgs, spans = [], []
        for q, a in qas:
            msgs.append({"role": "user", "content": q})
            p = len(self.render(msgs, think, True))
            msgs.append({"role": "assistant", "content": a, "reasoning_content": ""})
            full = self.render(msgs, think, False)
            spans.append((p, len(full)))
        i, m = self.at[think], len(self.media)
        ids = full[:i] + self.media + full[i:]
        return ids, [(s + m, e + m) for s, e in spans]

    def prompt(self, q, think):
        """Single-turn prompt ids (what `k3 run --image F -p q` renders) and the answer template."""
        ids = self.render([{"role": "user", "content": q}], think, True)
        i = self.at[think]
        return ids[:i] + self.media + ids[i:]


def picture_batch(rng, n):
    ims, labels = [], []
    for _ in range(n):
        im, c, s, k = vd.sample(rng)
        ims.append(np.asarray(im))
        labels.append((list(vd.COLOURS).index(c), vd.SHAPES.index(s), k - 1, c, s, k))
    return torch.from_numpy(np.stack(ims)), labels


def aux_loss(heads, emb, labels):
    z = heads(emb.mean(1))
    t = torch.tensor([lb[:3] for lb in labels])
    return (F.cross_entropy(z[:, :N_COLOUR], t[:, 0]) + F.cross_entropy(z[:, N_COLOUR:N_COLOUR + N_SHAPE], t[:, 1])
            + F.cross_entropy(z[:, N_COLOUR + N_SHAPE:], t[:, 2]))


def lm_embeds(lm, ids, pad, rows):
    """Token embeddings of ids [B, T] with the image rows [B, 16, D] at the <|media_pad|> positions."""
    x = lm.model.embed_tokens(ids)
    mask = ids == pad
    return x.masked_scatter(mask[..., None], rows.reshape(-1, rows.shape[-1]).to(x.dtype))


def vision_param_groups(tower, vc):
    muon, adam = [], []
    dh = vc["qkv_hidden_size"] // vc["vt_num_attention_heads"]
    for name, p in tower.named_parameters():
        if p.ndim == 2 and "pos_emb" not in name:
            muon.append((p, dh if name.endswith("wqkv.weight") else None))
        else:
            adam.append(p)
    return muon, adam


@torch.no_grad()
def evaluate(lm, tower, chat, n, seed):
    """Held-out accuracy per question type and thinking mode on n fresh pictures (seed differs
    from training's): the fraction whose answer tokens are all the argmax under teacher forcing."""
    rng = np.random.default_rng(seed)
    img, labels = picture_batch(rng, n)
    P, grid = pixel_patches(img)
    rows = torch.cat([tower(P[i:i + 25], grid) for i in range(0, n, 25)])
    res = {}
    for think in (True, False):
        for qt, q in vd.QUESTIONS.items():
            prompt = chat.prompt(q, think)
            ok = 0
            for i0 in range(0, n, 25):
                seqs = []
                for lb in labels[i0:i0 + 25]:
                    ans = vd.answers(lb[3], lb[4], lb[5])[qt]
                    ids, spans = chat.conversation([(q, ans)], think)
                    assert ids[:len(prompt)] == prompt
                    seqs.append((ids, spans[0]))
                T = max(len(s) for s, _ in seqs)
                x = torch.full((len(seqs), T), FILL, dtype=torch.long)
                for j, (s, _) in enumerate(seqs):
                    x[j, :len(s)] = torch.tensor(s)
                logits = lm(x, lm_embeds(lm, x, chat.pad, rows[i0:i0 + len(seqs)]))
                for j, (s, (a, b)) in enumerate(seqs):
                    pred = logits[j, a - 1:b - 1].argmax(-1)
                    ok += int(torch.equal(pred, x[j, a:b]))
            res[f"{qt}/{'think' if think else 'no_think'}"] = ok / n
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--k3", required=True, help="the k3 binary (renders the media block)")
    ap.add_argument("--base", required=True, help="K3-mini checkpoint directory")
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--warmup-minutes", type=float, default=3.0)
    ap.add_argument("--joint-minutes", type=float, default=22.0)
    ap.add_argument("--joint-steps", type=int, default=650, help="planned steps (LR schedule); time may stop earlier")
    ap.add_argument("--pictures-per-step", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--text-lr-scale", type=float, default=0.25)
    ap.add_argument("--kjv-windows", type=int, default=1, help="128-token KJV windows per joint step")
    ap.add_argument("--think-fraction", type=float, default=0.5)
    ap.add_argument("--eval-pictures", type=int, default=200)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    random.seed(a.seed)
    work, out, base = Path(a.work), Path(a.out), Path(a.base)
    work.mkdir(parents=True, exist_ok=True)
    log = open(work / "train_vision_log.jsonl", "w")

    def note(rec):
        print(json.dumps(rec), file=log, flush=True)
        print(json.dumps(rec), flush=True)

    import k3
    lm, tc = load_teacher(base)
    emb_rms = lm.model.embed_tokens.weight.pow(2).mean(-1).sqrt().mean().item()
    vc = vision_config(text_hidden=tc["hidden_size"])
    tower = VisionTower(vc)
    init_vision(tower, a.seed, out_rms=emb_rms)
    write_model(work / "init", base, vc, lm.state_dict(), tower)      # for the engine's media block
    chat = Chat(k3.LLM(str(work / "init"), threads=1, n_ctx=1024, n_parallel=1), a.k3, work / "init", work)
    heads = torch.nn.Linear(tc["hidden_size"], N_COLOUR + N_SHAPE + N_COUNT)
    kjv_text = "".join(t + "\n" for b, t in load_kjv() if b not in HELDOUT_BOOKS)   # K3-mini's train split
    kjv = np.array(chat.llm.tokenize(kjv_text), dtype=np.int64)
    note({"emb_rms": emb_rms, "vision_config": vc, "tower_params": sum(p.numel() for p in tower.parameters()),
          "kjv_tokens": int(len(kjv)), "media_ids": chat.media})
    rng = np.random.default_rng(a.seed)
    t0 = time.time()

    # stage 1: tower warm-up
    vm, va = vision_param_groups(tower, vc)
    muon_v = Muon(vm, lr=a.lr, weight_decay=0.01)
    adam_v = torch.optim.AdamW(va + list(heads.parameters()), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0)
    step = 0
    while time.time() - t0 < a.warmup_minutes * 60:
        img, labels = picture_batch(rng, 32)
        P, grid = pixel_patches(img)
        loss = aux_loss(heads, tower(P, grid), labels)
        loss.backward()
        for o in (muon_v, adam_v):
            for g in o.param_groups:
                g["lr"] = a.lr * min(1.0, (step + 1) / 20)
            o.step()
            o.zero_grad(set_to_none=True)
        if step % 20 == 0:
            note({"stage": "warmup", "step": step, "aux_loss": round(loss.item(), 4),
                  "elapsed_s": round(time.time() - t0, 1)})
        step += 1
    warm_steps = step

    # stage 2: joint
    lm.train()
    for moe in lm.moe_layers():
        moe.qat = True
    tm, ta = muon_blocks(lm, tc)
    tlr = a.lr * a.text_lr_scale
    muon_t = Muon(tm, lr=tlr, weight_decay=0.01)
    adam_t = torch.optim.AdamW([p for _, p in ta], lr=tlr, betas=(0.9, 0.95), weight_decay=0.0)
    t1 = time.time()
    ema = None
    for step in range(a.joint_steps):
        img, labels = picture_batch(rng, a.pictures_per_step)
        P, grid = pixel_patches(img)
        rows = tower(P, grid)
        seqs = []
        for lb in labels:
            ans = vd.answers(lb[3], lb[4], lb[5])
            order = list(rng.permutation(QTYPES))
            seqs.append(chat.conversation([(vd.QUESTIONS[q], ans[q]) for q in order],
                                          bool(rng.random() < a.think_fraction)))
        T = max(len(s) for s, _ in seqs)
        x = torch.full((len(seqs), T), FILL, dtype=torch.long)
        tgt = torch.full((len(seqs), T), -100, dtype=torch.long)
        for j, (s, spans) in enumerate(seqs):
            x[j, :len(s)] = torch.tensor(s)
            for st, en in spans:
                tgt[j, st - 1:en - 1] = x[j, st:en]
        logits = lm(x, lm_embeds(lm, x, chat.pad, rows))
        chat_loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=-100)
        w = torch.from_numpy(np.stack([kjv[s0:s0 + 129] for s0 in rng.integers(0, len(kjv) - 130, size=a.kjv_windows)]))
        lt = lm(w[:, :-1])
        text_loss = F.cross_entropy(lt.reshape(-1, lt.shape[-1]), w[:, 1:].reshape(-1))
        al = aux_loss(heads, rows, labels)
        loss = chat_loss + text_loss + 0.3 * al
        loss.backward()
        lr = lr_at(step, a.joint_steps, a.lr, 10)
        for o, f in ((muon_v, 1.0), (adam_v, 1.0), (muon_t, a.text_lr_scale), (adam_t, a.text_lr_scale)):
            for g in o.param_groups:
                g["lr"] = lr * f
            o.step()
            o.zero_grad(set_to_none=True)
        for moe in lm.moe_layers():
            b = moe.gate.e_score_correction_bias
            b.copy_(qb_solve(moe.last_scores, b, moe.k))
        ema = chat_loss.item() if ema is None else 0.9 * ema + 0.1 * chat_loss.item()
        if step % 10 == 0:
            note({"stage": "joint", "step": step, "chat_loss": round(chat_loss.item(), 4), "chat_ema": round(ema, 4),
                  "text_loss": round(text_loss.item(), 4), "aux_loss": round(al.item(), 4), "lr": lr,
                  "tokens": int(x.numel()) + 128 * a.kjv_windows, "elapsed_s": round(time.time() - t0, 1)})
        if time.time() - t1 > a.joint_minutes * 60:
            note({"stopped_early_at_step": step})
            break
    joint_steps = step + 1
    wall = time.time() - t0

    # export and evaluate the exported values
    lm.eval()
    text_exact, tower_exact = write_model(out, base, vc, lm.state_dict(), tower)
    lm.load_state_dict(text_exact)
    for moe in lm.moe_layers():
        moe.qat = False
    tower.load_state_dict(tower_exact)
    tower.eval()
    torch.save({"vc": vc, "tower": tower.state_dict(), "text_cfg": tc}, work / "exported_vision.pt")
    acc = evaluate(lm, tower, chat, a.eval_pictures, a.seed + 1)
    summary = {"warmup_steps": warm_steps, "joint_steps": joint_steps, "planned_joint_steps": a.joint_steps,
               "train_wall_s": round(wall, 1), "accuracy": acc, "eval_pictures": a.eval_pictures,
               "eval_seed": a.seed + 1, "args": vars(a), "vision_config": vc,
               "tower_params": sum(p.numel() for p in tower.parameters())}
    note(summary)
    (work / "vision_eval.json").write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
