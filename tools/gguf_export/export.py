"""Write a K3 checkpoint as GGUF in llama.cpp's kimi-k3 layout (arch "kimi-k3").

Layout (llama.cpp's src/models/kimi-k3.cpp loader and conversion/kimi_k3.py, as shipped in
llama-cpp-python 0.3.36; k3-architecture.md §2.8). GGUF shapes below are numpy order (outermost
first, like the checkpoint); GGUF stores them reversed as ggml ne.
  token_embd / output / output_norm            embed_tokens, lm_head, model.norm
  output_res_score, blk.N.attn_res_score,       AttnRes pre-fused: res_norm.weight ⊙ res_proj.weight
  blk.N.ffn_res_score                           (F32 [D]; the product of two bf16 is exact in f32)
  blk.N.attn_norm / ffn_norm                    input_layernorm / post_attention_layernorm
  KDA: attn_q/k/v, ssm_conv1d_{q,k,v} (F32 [1, C, 1, K]), ssm_f_a, ssm_f_b, ssm_beta (b_proj),
       ssm_a (F32 [H] = −exp(A_log[:H])), ssm_dt.bias (dt_bias), ssm_g (g_proj), ssm_norm (o_norm),
       attn_output
  MLA: attn_q_a, attn_q_a_norm, attn_q_b, attn_kv_a_mqa, attn_kv_a_norm, attn_k_b ([H, kv_lora,
       nope]: kv_b's k rows per head, transposed), attn_v_b ([H, v, kv_lora]), attn_gate (g_proj),
       attn_output
  dense MLP (layers < first_k_dense_replace): ffn_gate / ffn_up / ffn_down
  LatentMoE: ffn_gate_inp (router), exp_probs_b.bias (e_score_correction_bias), ffn_routed_down,
       ffn_routed_norm, ffn_routed_up, ffn_{gate,up,down}_shexp, ffn_{gate,up,down}_exps (MXFP4,
       [E, rows, cols]: w1 = gate, w3 = up, w2 = down; mxfp4_blocks.reblock)
Types: 2-D+ BF16 matrices are copied bit for bit as BF16; 1-D BF16 vectors are widened to F32
(exact; llama.cpp keeps norms in F32); F32 tensors stay F32; experts are MXFP4 (scale bytes and
4-bit codes unchanged, re-blocked). The vision tower is not exported (text only, like llama.cpp).
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Callable

import gguf
import numpy as np

from . import mxfp4_blocks, vocab
from .checkpoint import Checkpoint, CheckpointError, kc

ARCH = "kimi-k3"
BF16, F32, MXFP4 = (gguf.GGMLQuantizationType.BF16, gguf.GGMLQuantizationType.F32,
                    gguf.GGMLQuantizationType.MXFP4)
FILE_TYPE_MOSTLY_MXFP4_MOE = 38  # llama_ftype LLAMA_FTYPE_MOSTLY_MXFP4_MOE (as llama.cpp labels K3)
GATING = {"sigmoid": 2, "softmax": 1}  # llama_expert_gating_func_type


@dataclass
class Planned:
    """One GGUF tensor: name, numpy shape (logical elements), type, and a producer of its data
    (uint16 bf16 bits for BF16, float32 for F32, uint8 ggml blocks [.., rows, cols/32*17] for MXFP4)."""
    name: str
    shape: tuple
    qtype: gguf.GGMLQuantizationType
    produce: Callable[[], np.ndarray]

    @property
    def nbytes(self) -> int:
        n = int(np.prod(self.shape, dtype=np.int64))
        return n * 2 if self.qtype == BF16 else n * 4 if self.qtype == F32 else n // 32 * 17


def _cfg(tc: dict, key: str, where: str = "text_config"):
    if key not in tc:
        raise CheckpointError(f"config.json: missing key {where}.{key}")
    return tc[key]


_REQUIRED = ("hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads", "q_lora_rank",
             "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "intermediate_size",
             "num_experts", "num_experts_per_token", "moe_intermediate_size", "routed_expert_hidden_size",
             "rms_norm_eps", "linear_attn_config", "attn_res_block_size", "activation_situ_beta",
             "activation_situ_linear_beta", "max_position_embeddings")


def check_config(tc: dict, model_dir: str):
    """Keys llama.cpp's kimi-k3 needs, and the K3 choices it hard-codes. Raises CheckpointError."""
    for k in _REQUIRED:
        _cfg(tc, k)
    lac = tc["linear_attn_config"]
    for k in ("kda_layers", "full_attn_layers", "num_heads", "head_dim", "short_conv_kernel_size"):
        _cfg(lac, k, "text_config.linear_attn_config")
    p = os.path.join(model_dir, "config.json")
    if lac["num_heads"] != tc["num_attention_heads"]:
        raise CheckpointError(f"{p}: linear_attn_config.num_heads {lac['num_heads']} != num_attention_heads "
                              f"{tc['num_attention_heads']}; llama.cpp's kimi-k3 uses one head count for KDA and MLA")
    if tc.get("hidden_act") != "situ":
        raise CheckpointError(f"{p}: hidden_act {tc.get('hidden_act')!r}: kimi-k3 needs 'situ'")
    if not tc.get("mla_use_nope", False):
        raise CheckpointError(f"{p}: mla_use_nope must be true (kimi-k3's MLA has no RoPE)")
    if tc.get("moe_router_activation_func", "sigmoid") not in GATING:
        raise CheckpointError(f"{p}: moe_router_activation_func {tc['moe_router_activation_func']!r}: "
                              f"expected one of {sorted(GATING)}")
    if tc.get("num_expert_group", 1) != 1 or tc.get("topk_group", 1) != 1:
        raise CheckpointError(f"{p}: grouped top-k with num_expert_group {tc.get('num_expert_group')} is "
                              f"not expressible in kimi-k3 GGUF metadata (K3 uses 1 group)")
    L = tc["num_hidden_layers"]
    lists = sorted(lac["kda_layers"] + lac["full_attn_layers"])
    if lists != list(range(1, L + 1)):
        raise CheckpointError(f"{p}: linear_attn_config kda_layers + full_attn_layers must cover 1..{L} once")


def _bf16_to_f32(a: np.ndarray) -> np.ndarray:
    return kc.bf16_bits_to_f32(a).astype(np.float32)


def plan(ck: Checkpoint) -> list[Planned]:
    """Every GGUF tensor of the checkpoint in kimi-k3 names, in file order."""
    tc = ck.tc
    lac = tc["linear_attn_config"]
    L, D = tc["num_hidden_layers"], tc["hidden_size"]
    H = tc["num_attention_heads"]
    dn, dv, kvr = tc["qk_nope_head_dim"], tc["v_head_dim"], tc["kv_lora_rank"]
    out: list[Planned] = []
    T = ck.tensor

    def copy(gname: str, src: str):
        a = T(src)
        if a.dtype == np.uint16 and a.ndim >= 2:
            out.append(Planned(gname, a.shape, BF16, lambda s=src: T(s)))
        elif a.dtype == np.uint16:
            out.append(Planned(gname, a.shape, F32, lambda s=src: _bf16_to_f32(T(s))))
        else:
            out.append(Planned(gname, a.shape, F32, lambda s=src: np.asarray(T(s), dtype=np.float32)))

    def fused(gname: str, norm: str, proj: str):
        out.append(Planned(gname, (D,), F32,
                           lambda: _bf16_to_f32(T(norm)).reshape(D) * _bf16_to_f32(T(proj)).reshape(D)))

    def experts(gname: str, prefix: str, w: str):
        E = tc["num_experts"]
        rows, half = T(f"{prefix}experts.0.{w}.weight_packed").shape

        def produce():
            buf = np.empty((E, rows, half // 16 * 17), dtype=np.uint8)
            for e in range(E):
                buf[e] = mxfp4_blocks.reblock(T(f"{prefix}experts.{e}.{w}.weight_packed"),
                                              T(f"{prefix}experts.{e}.{w}.weight_scale"))
            return buf
        out.append(Planned(gname, (E, rows, half * 2), MXFP4, produce))

    copy("token_embd.weight", "model.embed_tokens.weight")
    fused("output_res_score.weight", "model.output_attn_res_norm.weight", "model.output_attn_res_proj.weight")
    copy("output_norm.weight", "model.norm.weight")
    if not tc.get("tie_word_embeddings", False):  # tied: llama.cpp reads token_embd as the head
        copy("output.weight", "lm_head.weight")
    for i in range(L):
        P, B = f"model.layers.{i}.", f"blk.{i}."
        A = P + "self_attn."
        copy(B + "attn_norm.weight", P + "input_layernorm.weight")
        fused(B + "attn_res_score.weight", P + "self_attention_res_norm.weight", P + "self_attention_res_proj.weight")
        copy(B + "ffn_norm.weight", P + "post_attention_layernorm.weight")
        fused(B + "ffn_res_score.weight", P + "mlp_res_norm.weight", P + "mlp_res_proj.weight")
        if kc.layer_is_kda(tc, i):
            for n in ("q", "k", "v"):
                copy(B + f"attn_{n}.weight", A + f"{n}_proj.weight")
            for n in ("q", "k", "v"):
                C, _, K = T(A + f"{n}_conv1d.weight").shape
                out.append(Planned(B + f"ssm_conv1d_{n}.weight", (1, C, 1, K), F32,
                                   lambda s=A + f"{n}_conv1d.weight", C=C, K=K: np.asarray(T(s)).reshape(1, C, 1, K)))
            copy(B + "ssm_f_a.weight", A + "f_a_proj.weight")
            copy(B + "ssm_f_b.weight", A + "f_b_proj.weight")
            copy(B + "ssm_beta.weight", A + "b_proj.weight")
            Hk = lac["num_heads"]
            out.append(Planned(B + "ssm_a", (Hk,), F32,
                               lambda s=A + "A_log", Hk=Hk: (-np.exp(np.asarray(T(s)[:Hk], np.float64))).astype(np.float32)))
            copy(B + "ssm_dt.bias", A + "dt_bias")
            copy(B + "ssm_g.weight", A + "g_proj.weight")
            copy(B + "ssm_norm.weight", A + "o_norm.weight")
            copy(B + "attn_output.weight", A + "o_proj.weight")
        else:
            copy(B + "attn_q_a.weight", A + "q_a_proj.weight")
            copy(B + "attn_q_a_norm.weight", A + "q_a_layernorm.weight")
            copy(B + "attn_q_b.weight", A + "q_b_proj.weight")
            copy(B + "attn_kv_a_mqa.weight", A + "kv_a_proj_with_mqa.weight")
            copy(B + "attn_kv_a_norm.weight", A + "kv_a_layernorm.weight")
            kvb = A + "kv_b_proj.weight"
            # kv_b rows per head h: [k_nope (dn) | v (dv)] (k3-architecture.md §2.4)
            out.append(Planned(B + "attn_k_b.weight", (H, kvr, dn), BF16,
                               lambda s=kvb: np.ascontiguousarray(
                                   T(s).reshape(H, dn + dv, kvr)[:, :dn, :].transpose(0, 2, 1))))
            out.append(Planned(B + "attn_v_b.weight", (H, dv, kvr), BF16,
                               lambda s=kvb: np.ascontiguousarray(T(s).reshape(H, dn + dv, kvr)[:, dn:, :])))
            if tc.get("mla_use_output_gate", False):
                copy(B + "attn_gate.weight", A + "g_proj.weight")
            copy(B + "attn_output.weight", A + "o_proj.weight")
        if kc.layer_is_moe(tc, i):
            M = P + "block_sparse_moe."
            copy(B + "ffn_gate_inp.weight", M + "gate.weight")
            copy(B + "exp_probs_b.bias", M + "gate.e_score_correction_bias")
            copy(B + "ffn_routed_down.weight", M + "routed_expert_down_proj.weight")
            if tc.get("latent_moe_use_norm", False):
                copy(B + "ffn_routed_norm.weight", M + "routed_expert_norm.weight")
            copy(B + "ffn_routed_up.weight", M + "routed_expert_up_proj.weight")
            if tc.get("num_shared_experts", 0) > 0:
                for g, h in (("gate", "gate_proj"), ("up", "up_proj"), ("down", "down_proj")):
                    copy(B + f"ffn_{g}_shexp.weight", M + f"shared_experts.{h}.weight")
            experts(B + "ffn_gate_exps.weight", M, "w1")
            experts(B + "ffn_up_exps.weight", M, "w3")
            experts(B + "ffn_down_exps.weight", M, "w2")
        else:
            for g in ("gate", "up", "down"):
                copy(B + f"ffn_{g}.weight", P + f"mlp.{g}_proj.weight")
    return out


def write_metadata(w: gguf.GGUFWriter, ck: Checkpoint, name: str, with_tokenizer: bool):
    """kimi-k3 hyperparameters (key names: llama.cpp's llama-arch.cpp) and the tokenizer."""
    tc, cfg = ck.tc, ck.config
    lac = tc["linear_attn_config"]
    L = tc["num_hidden_layers"]
    a = ARCH
    w.add_name(name)
    w.add_file_type(FILE_TYPE_MOSTLY_MXFP4_MOE)
    w.add_uint32(f"{a}.context_length", tc["max_position_embeddings"])
    w.add_uint32(f"{a}.embedding_length", tc["hidden_size"])
    w.add_uint32(f"{a}.block_count", L)
    w.add_uint32(f"{a}.feed_forward_length", tc["intermediate_size"])
    w.add_uint32(f"{a}.vocab_size", tc["vocab_size"])
    w.add_uint32(f"{a}.attention.head_count", tc["num_attention_heads"])
    # MLA served as MQA (1 kv head, the latent cache); 0 marks a KDA (recurrent) layer
    w.add_array(f"{a}.attention.head_count_kv",
                [1 if (i + 1) in lac["full_attn_layers"] else 0 for i in range(L)])
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", tc["rms_norm_eps"])
    w.add_uint32(f"{a}.attention.q_lora_rank", tc["q_lora_rank"])
    w.add_uint32(f"{a}.attention.kv_lora_rank", tc["kv_lora_rank"])
    w.add_uint32(f"{a}.attention.key_length", tc["kv_lora_rank"] + tc["qk_rope_head_dim"])
    w.add_uint32(f"{a}.attention.value_length", tc["kv_lora_rank"])
    w.add_uint32(f"{a}.attention.key_length_mla", tc["qk_nope_head_dim"] + tc["qk_rope_head_dim"])
    w.add_uint32(f"{a}.attention.value_length_mla", tc["v_head_dim"])
    w.add_uint32(f"{a}.rope.dimension_count", tc["qk_rope_head_dim"])
    w.add_uint32(f"{a}.ssm.conv_kernel", lac["short_conv_kernel_size"])
    w.add_uint32(f"{a}.kda.head_dim", lac["head_dim"])
    if lac.get("gate_lower_bound") is not None:
        w.add_float32(f"{a}.kda.gate_lower_bound", lac["gate_lower_bound"])
    w.add_uint32(f"{a}.expert_count", tc["num_experts"])
    w.add_uint32(f"{a}.expert_used_count", tc["num_experts_per_token"])
    w.add_uint32(f"{a}.expert_feed_forward_length", tc["moe_intermediate_size"])
    w.add_uint32(f"{a}.expert_shared_count", tc.get("num_shared_experts", 0))
    w.add_uint32(f"{a}.leading_dense_block_count", tc.get("first_k_dense_replace", 0))
    w.add_float32(f"{a}.expert_weights_scale", tc.get("routed_scaling_factor", 1.0))
    w.add_bool(f"{a}.expert_weights_norm", bool(tc.get("moe_renormalize", True)))
    w.add_uint32(f"{a}.expert_gating_func", GATING[tc.get("moe_router_activation_func", "sigmoid")])
    w.add_uint32(f"{a}.expert_latent_length", tc["routed_expert_hidden_size"])
    w.add_float32(f"{a}.activation.situ_beta", tc["activation_situ_beta"])
    w.add_float32(f"{a}.activation.situ_linear_beta", tc["activation_situ_linear_beta"])
    w.add_uint32(f"{a}.attn_res.block_size", tc["attn_res_block_size"])
    if not with_tokenizer:
        w.add_tokenizer_model("none")  # llama.cpp: no vocabulary, vocab_size dummy tokens; feed ids
        return
    tokens, types, merges = vocab.gguf_vocab(ck.dir, tc["vocab_size"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("kimi-k2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    for key, setter in (("bos_token_id", w.add_bos_token_id), ("eos_token_id", w.add_eos_token_id),
                        ("pad_token_id", w.add_pad_token_id)):
        v = cfg.get(key, tc.get(key))
        if v is not None:
            if not (0 <= v < tc["vocab_size"]):
                raise CheckpointError(f"{os.path.join(ck.dir, 'config.json')}: {key} {v} outside the "
                                      f"vocabulary [0, {tc['vocab_size']})")
            setter(v)
    w.add_add_bos_token(False)  # k3 does not prepend [BOS] to a prompt


def export(model_dir: str, out_path: str, with_tokenizer: bool = True, log=print) -> list[Planned]:
    """Export model_dir to out_path (written to a unique temporary file beside it, then renamed).
    Returns the plan.
    Raises CheckpointError / vocab.VocabError naming the file, key or tensor."""
    ck = Checkpoint(model_dir)
    check_config(ck.tc, model_dir)
    ck.validate()
    tensors = plan(ck)
    # A fresh temporary file beside out_path (created with O_EXCL, so a file or symlink planted
    # under any name is never written through), renamed onto it when complete.
    out_dir = os.path.dirname(os.path.abspath(out_path))
    if not os.path.isdir(out_dir):
        raise CheckpointError(f"--out {out_path}: directory {out_dir} does not exist")
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(out_path) + ".", suffix=".tmp", dir=out_dir)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # the mode a plain open() would have given
    try:
        w = gguf.GGUFWriter(tmp, ARCH)
    except BaseException:
        os.remove(tmp)
        raise
    try:
        write_metadata(w, ck, os.path.basename(os.path.normpath(model_dir)), with_tokenizer)
        for t in tensors:
            w.add_tensor_info(t.name, t.shape, np.dtype(np.uint16 if t.qtype == BF16 else np.float32),
                              t.nbytes, raw_dtype=t.qtype)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for t in tensors:
            data = t.produce()
            if data.nbytes != t.nbytes:
                raise CheckpointError(f"{model_dir}: internal size mismatch writing {t.name}")
            w.write_tensor_data(np.ascontiguousarray(data))
        w.close()
    except BaseException:
        w.close()
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    os.replace(tmp, out_path)
    log(f"gguf_export: wrote {out_path} ({len(tensors)} tensors, {os.path.getsize(out_path) / 2**20:.1f} MiB)")
    return tensors
