// k3::Model — the K3 forward pass, spec k3-architecture.md §3.1. One loop over the layer plan:
// a [T, D] block of activations passes layer by layer (layer-major), each layer wiring the
// explicit K3 blocks (AttnRes mixes, KDA or MLA, dense SiTU MLP or LatentMoE).
#include "model/k3_model.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/ops.h"
#include "kernels/ref/linear.h"
#include "kernels/ref/norms.h"
#include "kernels/threads.h"
#include "kernels/vec.h"
#include "model/attn_res.h"
#include "model/buffer.h"
#include "model/dense_mlp.h"
#include "model/dump.h"
#include "model/kda.h"
#include "model/latent_moe.h"
#include "model/mla.h"
#include "model/sequence_state.h"
#include "model/weights.h"

namespace k3 {

struct Model::Impl {
  const Checkpoint& ck;
  const ModelConfig& cfg;
  ModelWeights w;
  KdaDims kda;
  MlaDims mla;
  MoeDims moe;
  GluActivation act;
  bool has_kda = false, has_mla = false, has_moe = false;
  ModelOptions opt;
  ExecOptions ex;

  Impl(const Checkpoint& c, ModelOptions o) : ck(c), cfg(c.config()), w(bind_weights(c)), opt(o) {
    if (opt.prefill_chunk < 1)
      throw Error("model options: prefill_chunk must be >= 1, found " + std::to_string(opt.prefill_chunk));
    if (!opt.mxfp4) opt.mxfp4 = default_mxfp4_path();
    ex.fast = opt.kernels == ModelKernels::Fast;
    ex.mxfp4 = *opt.mxfp4;
    for (const LayerSpec& s : cfg.plan) {
      has_kda |= s.attn == AttnKind::KDA;
      has_mla |= s.attn == AttnKind::MLA;
      has_moe |= s.ffn == FfnKind::LatentMoE;
    }
    if (has_kda) kda = KdaDims::from(cfg);
    if (has_mla) mla = MlaDims::from(cfg);
    if (has_moe) moe = MoeDims::from(cfg);
    act = GluActivation::from(cfg);
    if (cfg.attn_res_block_size <= 0)
      throw Error("config: attn_res_block_size must be > 0 (K3 uses Block AttnRes)");
  }

  /// The layer loop of spec §3.1 over validated inputs; advances `st` in place. Logit rows:
  /// all T when all_logits, the last one when want_last, none otherwise.
  std::vector<float> run(SequenceState::Impl& st, std::span<const int32_t> tokens, bool all_logits,
                         bool want_last, DumpSink* dump) const;
};

ModelKernels default_model_kernels() {
  const char* v = std::getenv("K3_KERNELS");
  if (!v || !*v || std::string(v) == "fast") return ModelKernels::Fast;
  if (std::string(v) == "ref") return ModelKernels::Reference;
  throw Error("K3_KERNELS=" + std::string(v) + ": expected 'fast' or 'ref'");
}

Model::Model(const Checkpoint& ck, ModelOptions options)
    : impl_(std::make_unique<Impl>(ck, options)) {}
const ModelOptions& Model::options() const { return impl_->opt; }
Model::~Model() = default;
const ModelConfig& Model::config() const { return impl_->cfg; }

SequenceState Model::new_sequence() const {
  SequenceState s;
  *s.impl = SequenceState::Impl::fresh(impl_->cfg);
  return s;
}

namespace {

/// RMSNorm of each of the T rows of x [T, D] with weight w [D]: the fp64 oracle, or (fast) the
/// dispatched fp32 kernel with tokens split across threads.
FBuf rmsnorm_rows(const float* x, int64_t T, int64_t D, const std::vector<float>& w,
                                float eps, bool fast) {
  FBuf y(static_cast<size_t>(T * D));
  if (!fast) {
    for (int64_t t = 0; t < T; ++t) ref::rmsnorm(x + t * D, D, w.data(), eps, y.data() + t * D);
    return y;
  }
  // (~16 operations per element: the sum and the scaling run in fp64 lanes)
  parallel_for(T, grain_for_work(1, 16 * D), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) vec::rmsnorm(x + t * D, w.data(), eps, y.data() + t * D, D);
  });
  return y;
}

}  // namespace

std::vector<float> Model::forward(SequenceState& seq, std::span<const int32_t> tokens, bool all_logits,
                                  DumpSink* dump) const {
  const Impl& m = *impl_;
  const ModelConfig& cfg = m.cfg;
  const int64_t T = static_cast<int64_t>(tokens.size()), V = cfg.vocab_size;
  if (T == 0) throw Error("forward: empty token list");
  if (!seq.impl) throw Error("forward: moved-from sequence state");
  seq.impl->check_matches(cfg, "forward");
  for (int64_t t = 0; t < T; ++t)
    if (tokens[t] < 0 || tokens[t] >= V)
      throw Error("forward: token id " + std::to_string(tokens[t]) + " at position " +
                  std::to_string(t) + " outside [0, vocab_size = " + std::to_string(V) + ")");
  // Inputs are validated above; the state is then advanced in place. An exception after this
  // point (corrupt weights) marks the state failed, so later calls refuse it.
  SequenceState::Impl& st = *seq.impl;
  try {
    // Chunked prefill: consecutive pieces of at most prefill_chunk tokens, each layer-major
    // through all layers with the state carried (a dumped call runs as one piece).
    const int64_t piece = dump ? T : m.opt.prefill_chunk;
    if (T <= piece) return m.run(st, tokens, all_logits, true, dump);
    std::vector<float> logits;
    if (all_logits) logits.reserve(static_cast<size_t>(T * V));
    for (int64_t b = 0; b < T; b += piece) {
      const int64_t n = std::min(piece, T - b);
      const bool last = b + n == T;
      std::vector<float> l = m.run(st, tokens.subspan(b, n), all_logits, last, nullptr);
      if (all_logits || last) logits.insert(logits.end(), l.begin(), l.end());
    }
    return logits;
  } catch (...) {
    st.failed = true;
    throw;
  }
}

std::vector<float> Model::Impl::run(SequenceState::Impl& st, std::span<const int32_t> tokens,
                                    bool all_logits, bool want_last, DumpSink* dump) const {
  const Impl& m = *this;
  const ModelConfig& cfg = m.cfg;
  const int64_t T = static_cast<int64_t>(tokens.size()), D = cfg.hidden_size, V = cfg.vocab_size;
  const float eps = cfg.rms_norm_eps;
  auto name = [](int64_t il, const char* what) { return "blk." + std::to_string(il) + "." + what; };

  // x0 = embed[token] (no scaling, no positions).
  std::vector<float> x(static_cast<size_t>(T * D));
  for (int64_t t = 0; t < T; ++t) ref::decode_row(*m.w.embed, tokens[t], x.data() + t * D);
  if (dump) dump->add("tok.embed", {T, D}, x.data());

  AttnResStream stream(x.data(), T, D, eps);
  std::vector<float> h(static_cast<size_t>(T * D)), sub(static_cast<size_t>(T * D)), mix_w;
  for (size_t il = 0; il < m.w.layers.size(); ++il) {
    const LayerWeights& L = m.w.layers[il];
    // --- attention side: input = Mix(bank ++ [prefix]) (or the prefix itself while the bank is empty)
    if (stream.bank_empty()) {
      h = stream.prefix();
    } else {
      mix_w.resize(static_cast<size_t>(T * stream.n_sources()));
      const int64_t n = stream.n_sources();
      stream.mix(L.attn_res, h.data(), mix_w.data(), m.ex.fast);
      if (dump) dump->add(name(il, "attn_mix_w"), {T, n}, mix_w.data());
    }
    if (L.spec.snapshot) stream.snapshot();  // bank.push(raw layer input); prefix = NONE
    if (dump) dump->add(name(il, "attn_in"), {T, D}, h.data());
    FBuf xn = rmsnorm_rows(h.data(), T, D, L.input_norm, eps, m.ex.fast);
    LayerState& ls = st.layers[il];
    if (L.spec.attn == AttnKind::KDA)
      kda_forward(L.kda, m.kda, xn.data(), T, ls.kda, sub.data(), m.ex);
    else
      mla_forward(L.mla, m.mla, xn.data(), T, ls.mla, sub.data(), MlaMode::Auto, m.ex);
    if (dump) dump->add(name(il, "attn_out"), {T, D}, sub.data());
    stream.add(sub.data());

    // --- FFN side: input = Mix(bank ++ [prefix]) (bank is non-empty from layer 0 on)
    {
      const int64_t n = stream.n_sources();
      mix_w.resize(static_cast<size_t>(T * n));
      stream.mix(L.ffn_res, h.data(), mix_w.data(), m.ex.fast);
      if (dump) dump->add(name(il, "ffn_mix_w"), {T, n}, mix_w.data());
    }
    if (dump) dump->add(name(il, "ffn_in"), {T, D}, h.data());
    xn = rmsnorm_rows(h.data(), T, D, L.post_norm, eps, m.ex.fast);
    if (L.spec.ffn == FfnKind::Dense) {
      glu_mlp_forward(L.dense, m.act, xn.data(), T, sub.data(), m.ex);
    } else {
      const int64_t k = m.moe.k;
      std::vector<int32_t> ids(static_cast<size_t>(T * k));
      std::vector<float> wts(static_cast<size_t>(T * k));
      latent_moe_forward(L.moe, m.moe, m.act, xn.data(), T, sub.data(), ids.data(), wts.data(),
                         m.ex);
      if (dump) {
        dump->add_i32(name(il, "router_topk_ids"), {T, k}, ids.data());
        dump->add(name(il, "router_topk_w"), {T, k}, wts.data());
      }
    }
    if (dump) dump->add(name(il, "ffn_out"), {T, D}, sub.data());
    stream.add(sub.data());
  }

  if (!all_logits && !want_last) {  // an inner prefill piece: no logits needed
    st.n_past += T;
    return {};
  }
  // final = Mix(bank ++ [prefix]; s_out); logits = lm_head · RMSNorm(final; model.norm).
  {
    const int64_t n = stream.n_sources();
    mix_w.resize(static_cast<size_t>(T * n));
    stream.mix(m.w.out_res, h.data(), mix_w.data(), m.ex.fast);
    if (dump) {
      dump->add("out.mix_w", {T, n}, mix_w.data());
      dump->add("out.final", {T, D}, h.data());
    }
  }
  const int64_t t0 = all_logits ? 0 : T - 1;
  const int64_t n_out = T - t0;
  FBuf xn = rmsnorm_rows(h.data() + t0 * D, n_out, D, m.w.final_norm, eps, m.ex.fast);
  std::vector<float> logits(static_cast<size_t>(n_out * V));
  if (m.ex.fast)
    k3::matmul(*m.w.lm_head, xn.data(), n_out, logits.data());
  else
    ref::matmul(*m.w.lm_head, xn.data(), n_out, logits.data());
  if (dump) dump->add("logits", {n_out, V}, logits.data());

  st.n_past += T;
  return logits;
}

}  // namespace k3
