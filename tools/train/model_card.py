"""Writes models/k3-mini/README.md (model card) from the run's artifacts:
WORK/train_log.jsonl, MODEL/config.json, MODEL/eval.json, MODEL/greedy.json."""
import json
from pathlib import Path


def _table(rows):
    return "\n".join(["| item | value |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows])


def write_card(work, mdir):
    work, mdir = Path(work), Path(mdir)
    cfg = json.loads((mdir / "config.json").read_text())
    tc = cfg["text_config"]
    la = tc["linear_attn_config"]
    ev = json.loads((mdir / "eval.json").read_text())
    gr = json.loads((mdir / "greedy.json").read_text())
    log = [json.loads(l) for l in (work / "train_log.jsonl").read_text().splitlines()]
    head = log[0]
    steps = [r for r in log if "step" in r]
    last = steps[-1]
    tps = [r["tok_per_s"] for r in steps[1:]]
    size = sum(p.stat().st_size for p in mdir.glob("model-*.safetensors"))
    arch = _table([
        ("layers", f"{tc['num_hidden_layers']} (KDA at 1-indexed {la['kda_layers']}, gated NoPE MLA at "
                   f"{la['full_attn_layers']} — ends with two MLA layers, as K3)"),
        ("hidden size", tc["hidden_size"]),
        ("vocab", f"{tc['vocab_size']} = {tc['vocab_size'] - 256} BPE ranks + 256 K3 specials"),
        ("KDA", f"{la['num_heads']} heads × {la['head_dim']}, conv {la['short_conv_kernel_size']}, "
                f"gate lower bound {la['gate_lower_bound']}, full-rank output gate"),
        ("MLA", f"{tc['num_attention_heads']} heads, q_lora {tc['q_lora_rank']}, kv_lora {tc['kv_lora_rank']}, "
                f"nope {tc['qk_nope_head_dim']}, rope-part {tc['qk_rope_head_dim']} (never rotated), "
                f"v {tc['v_head_dim']}, sigmoid output gate"),
        ("Block AttnRes", f"block size {tc['attn_res_block_size']} (snapshots at layers 0, 4, 8)"),
        ("layer 0", f"dense SiTU-GLU MLP, width {tc['intermediate_size']}"),
        ("layers 1..8", f"Stable LatentMoE: {tc['num_experts']} routed experts, top-{tc['num_experts_per_token']}, "
                        f"expert width {tc['moe_intermediate_size']}, latent {tc['routed_expert_hidden_size']}, "
                        f"{tc['num_shared_experts']} shared experts (fused width "
                        f"{tc['num_shared_experts'] * tc['moe_intermediate_size']}), sigmoid router + "
                        f"correction bias, routed_scaling_factor {tc['routed_scaling_factor']}"),
        ("activation", f"SiTU-GLU β={tc['activation_situ_beta']}, linear β={tc['activation_situ_linear_beta']}"),
        ("parameters", f"{head['params']:,} (fp32 master)"),
        ("storage", f"BF16 trunk, MXFP4 routed experts (packed U8 + E8M0 scales), F32 conv/dt_bias/A_log"
                    f"/o_norm/e_score_correction_bias; {size:,} bytes of safetensors"),
    ])
    a = head["args"]
    gl = "\n".join(f"- **{p['prompt']}** →{p['text']!r}" for p in gr["prompts"])
    card = f"""# K3-mini

A {head['params'] / 1e6:.1f} M-parameter model with the Kimi K3 architecture, trained from scratch on
the King James Bible with K3's training methods, stored in the exact published K3 checkpoint
layout. It exists so that k3.cpp can be tried end to end on a laptop (issue #5).

## Architecture

{arch}

## Data

- Text: the King James Bible from Debian's `bible-kjv` (`bible -f "Genesis 1:1-Revelation 22:21"`),
  verse references stripped, one verse per line.
- Split: train = Genesis … Jude ({head['train_tokens']:,} tokens); held-out = Revelation
  (`heldout.txt`, {ev['heldout_tokens']:,} tokens).
- Tokenizer: byte-level BPE trained on the train split (`tools/train/bpe.py`), 7936 ranks
  (0..255 = the single bytes), pre-tokenized with the Kimi `pat_str`, so merges respect piece
  boundaries; `tiktoken.model` + `tokenizer_config.json` with K3's 256 special tokens at ids
  7936..8191 (`[BOS]` 7936, `[EOS]` 7937, `<|end_of_msg|>` 7938 = eos, `[PAD]` 8191). Plain text
  is encoded with no BOS.

## Training (K3 methods, algorithms.md §1–§5)

- KDA trained with the chunkwise WY/UT form (chunk 16, row-0 anchor) and K3's lower-bounded gate.
- Router correction bias solved every step by Quantile Balancing (exact quantile over the step's
  tokens); no auxiliary loss.
- Routed experts: MXFP4 quantization-aware training (floor-scale E8M0 + RNE E2M1 fake-quant,
  straight-through gradient); the exported packed bytes are exactly the trained values.
- Optimizers: per-head Muon (NS5, Nesterov 0.95, scale 0.2·sqrt(max(m, n)) per block; KDA q/k/v in
  blocks of head_dim rows, MLA q_b/kv_b per head) for matrices; AdamW (β 0.9/0.95) for embeddings,
  head, norms, conv taps, A_log, dt_bias, AttnRes queries. lr {a['lr']}, warmup {a['warmup']}, linear decay to
  10% over the last 30% of steps; weight decay 0.01.
- Context curriculum: sequence length 64 → 128 → 256 (25% / 35% / 40% of steps) at
  {a['tokens_per_step']} tokens per step.
- {ev['steps_done']} of {a['steps']} planned steps ({ev['steps_done'] * a['tokens_per_step']:,} tokens), seed {a['seed']}; fp32, 1 thread.

Exact command (from the repository root; everything from data prep to this card):

```
tools/train/train_k3_mini.sh build/k3-mini-train
```

Debian's torch links the netlib reference BLAS (~15× slower), so the script downloads Debian's
`libopenblas0-pthread` package (`apt-get download`, unpacked under the work dir, no system
change) and preloads it for the pipeline's processes only; `K3_OPENBLAS_DIR=DIR` points at another
copy, `K3_OPENBLAS_DIR=none` keeps netlib. Wall time of training on this shared 2-core machine
(heavily contended by parallel C++ builds): **{ev['train_wall_s'] / 60:.1f} min**
(median {sorted(tps)[len(tps) // 2] if tps else 0:.0f} tokens/s).

## Results (exported weights: bf16 trunk, MXFP4 experts, fp32 compute)

| metric | value |
|---|---|
| final train loss (EMA of the last steps) | {ev['final_train_loss_ema']:.3f} |
| train-split loss / ppl (first {ev['train_slice_tokens']:,} train tokens, windowed) | {ev['train_mean_nll']:.3f} / {ev['train_ppl']:.2f} |
| held-out loss / ppl (Revelation, {ev['scored_tokens']:,} scored tokens) | **{ev['heldout_mean_nll']:.4f} / {ev['heldout_ppl']:.3f}** |
| unigram baseline ppl (train frequencies, add-one) on the same targets | {ev['unigram_ppl']:.1f} |
| expert load (max / mean tokens per expert, last logged step, worst layer / mean) | {last['load_max_over_mean']} / {last['load_max_over_mean_avg']} |

Perplexity definition (the same as `k3 perplexity`): tokenize `heldout.txt` as one string (no
BOS); windows of n_ctx = {ev['n_ctx']} tokens with stride {ev['stride']}, each with a fresh state;
the first window scores targets 1..{ev['n_ctx'] - 1}, every later window scores only its last
{ev['stride']} positions (the final window is truncated at the end of the text); ppl = exp(mean NLL) in
float64. Numbers are in `eval.json`.

Greedy 64-token continuations (`greedy.json` holds the ids; the C++ test compares `k3 run --temp 0`):

{gl}

Sample (temperature 0.8, seed 1): {gr['sample']['text']!r}

## Checks

- `k3 info models/k3-mini` validates the checkpoint with the engine's loader.
- `k3 perplexity -m models/k3-mini -f models/k3-mini/heldout.txt -c 256` must give the held-out
  ppl above (the engine's own unigram line uses in-sample counts, not the train-split baseline here).
- `k3 run -m models/k3-mini -p "And God said" -n 64 --temp 0` must print the greedy text above.
- `python tools/reference/k3_ref.py --model models/k3-mini --ids ... --greedy 64` (fp64 numpy
  oracle) reproduces `greedy.json`; `tests/python/test_trainer*.py` check the trainer against it.

## Files

`config.json`, `model-0000k-of-000003.safetensors`, `model.safetensors.index.json`
(`language_model.` names), `tiktoken.model`, `tokenizer_config.json`, `heldout.txt`, `eval.json`,
`greedy.json`. Trainer: `tools/train/` (tests: `tests/python/test_trainer*.py`).
"""
    (mdir / "README.md").write_text(card)
