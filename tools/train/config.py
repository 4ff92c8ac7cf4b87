"""K3-mini `text_config` (k3-architecture.md §1.2/§1.3 keys, K3 values scaled down).

Layer pattern as K3 at 9 layers: 1-indexed MLA at 4, 8, 9 (ends with two MLA layers), KDA at
1,2,3,5,6,7; layer 0 dense, layers 1..8 LatentMoE; AttnRes block 4 (snapshots at 0, 4, 8).
"""


def mini_text_config(vocab_size=8192, hidden=256, kda_heads=4, head_dim=64, mla_heads=4,
                     n_experts=16, top_k=4, moe_inter=128, latent=128, dense_inter=768):
    n_layers = 9
    full = [4, 8, 9]
    kda = [i for i in range(1, n_layers + 1) if i not in full]
    return {
        "architectures": ["KimiLinearForCausalLM"],
        "model_type": "kimi_linear",
        "hidden_size": hidden,
        "num_hidden_layers": n_layers,
        "vocab_size": vocab_size,
        "num_attention_heads": mla_heads,
        "num_key_value_heads": mla_heads,
        "q_lora_rank": 128,
        "kv_lora_rank": 64,
        "qk_nope_head_dim": 32,
        "qk_rope_head_dim": 16,
        "v_head_dim": 32,
        "mla_use_nope": True,
        "mla_use_output_gate": True,
        "intermediate_size": dense_inter,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "num_experts": n_experts,
        "num_experts_per_token": top_k,
        "num_shared_experts": 2,
        "moe_intermediate_size": moe_inter,
        "routed_expert_hidden_size": latent,
        "latent_moe_use_norm": True,
        "moe_router_activation_func": "sigmoid",
        "moe_renormalize": True,
        "routed_scaling_factor": 1.0,
        "use_grouped_topk": True,
        "num_expert_group": 1,
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "hidden_act": "situ",
        "activation_situ_beta": 4.0,
        "activation_situ_linear_beta": 25.0,
        "attn_res_block_size": 4,
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 1048576,
        "num_nextn_predict_layers": 0,
        "tie_word_embeddings": False,
        "linear_attn_config": {
            "kda_layers": kda,
            "full_attn_layers": full,
            "num_heads": kda_heads,
            "head_dim": head_dim,
            "short_conv_kernel_size": 4,
            "gate_lower_bound": -5.0,
            "use_full_rank_gate": True,
        },
    }
