// k3::Model — the K3 forward pass, spec k3-architecture.md §3.1. One loop over the layer plan:
// a [T, D] block of activations passes layer by layer (layer-major), each layer wiring the
// explicit K3 blocks (AttnRes mixes, KDA or MLA, dense SiTU MLP or LatentMoE).
#include "model/k3_model.h"

#include <cmath>
#include <algorithm>
#include <deque>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/tensor_table.h"
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
#include "model/sequence_state_impl.h"
#include "model/split.h"
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
  ExecContext ctx;  ///< opt.exec resolved; installed (ExecScope) around every call's kernels
  ExecOptions ex;
  /// Per layer (empty for non-MLA layers and the Reference kernels): kv_b split into its k_nope
  /// and v halves once, here (views into the mapping: no bytes copied).
  std::vector<MlaKvbHalves> kv_b;
  std::shared_ptr<Comm> comm;  ///< opt.comm, or a size-1 communicator
  ModelShard shard;
  TrunkCopyStats trunk_copy;  ///< ModelOptions::trunk_memory == Copy: what copy_trunk did
  TensorView lm_head_rows;  ///< this rank's rows of lm_head (split models)
  /// Split models: this rank's row blocks of the head-split projections and of the output
  /// projections (the views the layers' weights point at; deque: addresses stay valid).
  std::deque<TensorView> slices;
  KdaDims kda_local;  ///< kda narrowed to this rank's heads (split models; else == kda)
  MlaDims mla_local;  ///< mla narrowed to this rank's heads (split models; else == mla)

  Impl(const Checkpoint& c, ModelOptions o)
      : ck(c),
        cfg(c.config()),
        w(bind_weights(c)),
        opt(o),
        ctx(resolve_exec_config(o.exec)),
        comm(o.comm ? o.comm : std::make_shared<SingleProcessComm>()) {
    if (opt.prefill_chunk < 1)
      throw Error("model options: prefill_chunk must be >= 1, found " + std::to_string(opt.prefill_chunk));
    opt.exec = ctx.config();
    const ExecScope scope(ctx);  // load-time kernels (trunk quantization) run under the model's config
    ex.fast = ctx.kernels == ModelKernels::Fast;
    ex.mla_cache = opt.mla_cache;
    ex.mxfp4 = ctx.mxfp4;
    for (const LayerSpec& s : cfg.plan) {
      has_kda |= s.attn == AttnKind::KDA;
      has_mla |= s.attn == AttnKind::MLA;
      has_moe |= s.ffn == FfnKind::LatentMoE;
    }
    if (has_kda) kda = kda_local = KdaDims::from(cfg);
    if (has_mla) mla = mla_local = MlaDims::from(cfg);
    if (has_moe) moe = MoeDims::from(cfg);
    act = GluActivation::from(cfg);
    split_weights();
    if (opt.trunk_quant && ex.fast) quantize_trunk(w, *opt.trunk_quant, opt.progress);
    // after the quantization (its matrices are not copied), before kv_b's halves point at the data
    if (opt.trunk_memory == TrunkMemory::Copy) trunk_copy = copy_trunk(w, true, opt.progress);
    if (has_mla && ex.fast && mla_local.H > 0) {
      kv_b.resize(w.layers.size());
      for (size_t il = 0; il < w.layers.size(); ++il)
        if (w.layers[il].spec.attn == AttnKind::MLA) kv_b[il] = mla_split_kv_b(w.layers[il].mla, mla_local);
    }
    if (opt.expert_store)
      for (size_t il = 0; il < w.layers.size(); ++il)
        if (w.layers[il].spec.ffn == FfnKind::LatentMoE) {
          w.layers[il].moe.store = opt.expert_store.get();
          w.layers[il].moe.layer = static_cast<int>(il);
        }
    if (cfg.attn_res_block_size <= 0) throw Error("config: attn_res_block_size must be > 0 (K3 uses Block AttnRes)");
  }

  /// A view of rows [r0, r0 + rows) of the BF16 matrix `t` (held in `slices`); counts the bytes
  /// of `t` this rank no longer reads into `*not_held`. Errors: k3::Error naming the tensor when
  /// it is not a 2-D BF16 matrix with that many rows.
  const TensorView* row_block(const TensorView* t, int64_t r0, int64_t rows, uint64_t* not_held) {
    if (t->dtype != DType::BF16 || t->shape.size() != 2 || r0 < 0 || r0 + rows > t->shape[0])
      throw Error("tensor '" + t->name + "': the tensor-parallel split needs a 2-D BF16 matrix with at least " +
                  std::to_string(r0 + rows) + " rows");
    TensorView v = *t;
    const int64_t cols = t->shape[1];
    v.shape = {rows, cols};
    v.data = t->data ? t->data + r0 * cols * 2 : nullptr;
    v.nbytes = static_cast<uint64_t>(rows * cols * 2);
    *not_held += t->nbytes - v.nbytes;
    slices.push_back(v);
    return &slices.back();
  }
  static std::vector<float> sub_vec(const std::vector<float>& v, int64_t b, int64_t n) {
    return std::vector<float>(v.begin() + b, v.begin() + b + n);
  }

  /// This rank's share (ModelOptions::comm): the expert block and vocabulary rows of
  /// split_range, lm_head narrowed to its rows, the KDA and MLA layers narrowed to its head block
  /// (the heads' projection rows, conv taps, gate vectors), the dense MLP and shared experts to
  /// its intermediate columns (16-column units), every o_proj / down to its block of output rows
  /// (all before trunk quantization, so only these rows are read), the MoE layers given the
  /// communicator, and the bytes this rank reads.
  void split_weights() {
    const int r = comm->rank(), n = comm->size();
    shard.rank = r;
    shard.ranks = n;
    const int64_t E = has_moe ? cfg.num_experts : 0, V = cfg.vocab_size, D = cfg.hidden_size;
    shard.experts = split_range(E, n, r);
    shard.vocab = split_range(V, n, r);
    shard.hidden = split_range_units(D, n, r, kSplitRowUnit);
    if (has_kda) shard.kda_heads = split_range(kda.H, n, r);
    if (has_mla) shard.mla_heads = split_range(mla.H, n, r);
    uint64_t not_held = 0;
    if (n > 1) {
      const IndexRange hd = shard.hidden;
      for (LayerWeights& L : w.layers) {
        if (L.spec.attn == AttnKind::KDA) {
          KdaWeights& k = L.kda;
          const IndexRange h = shard.kda_heads;
          const int64_t d = kda.d, c0 = h.begin * d, c = h.size() * d, K = kda.K;
          k.q_proj = row_block(k.q_proj, c0, c, &not_held);
          k.k_proj = row_block(k.k_proj, c0, c, &not_held);
          k.v_proj = row_block(k.v_proj, c0, c, &not_held);
          k.f_b = row_block(k.f_b, c0, c, &not_held);
          k.b_proj = row_block(k.b_proj, h.begin, h.size(), &not_held);
          k.g_proj = row_block(k.g_proj, c0, c, &not_held);
          k.q_conv = sub_vec(k.q_conv, c0 * K, c * K);
          k.k_conv = sub_vec(k.k_conv, c0 * K, c * K);
          k.v_conv = sub_vec(k.v_conv, c0 * K, c * K);
          k.dt_bias = sub_vec(k.dt_bias, c0, c);
          k.a_log = sub_vec(k.a_log, h.begin, h.size());
          k.o_proj_rows = row_block(k.o_proj, hd.begin, hd.size(), &not_held);
          k.o_proj = nullptr;
        } else {
          MlaWeights& a = L.mla;
          const IndexRange h = shard.mla_heads;
          a.q_b = row_block(a.q_b, h.begin * (mla.dn + mla.dr), h.size() * (mla.dn + mla.dr), &not_held);
          a.kv_b = row_block(a.kv_b, h.begin * (mla.dn + mla.dv), h.size() * (mla.dn + mla.dv), &not_held);
          if (a.g_proj) a.g_proj = row_block(a.g_proj, h.begin * mla.dv, h.size() * mla.dv, &not_held);
          a.o_proj_rows = row_block(a.o_proj, hd.begin, hd.size(), &not_held);
          a.o_proj = nullptr;
        }
        if (L.spec.ffn == FfnKind::LatentMoE && L.moe.shared) {  // the same for the shared experts
          GluMlpWeights& g = *L.moe.shared;
          const IndexRange i = split_range_units(g.gate->shape[0], n, r, kSplitRowUnit);
          shard.shared_cols = i;
          g.gate = row_block(g.gate, i.begin, i.size(), &not_held);
          g.up = row_block(g.up, i.begin, i.size(), &not_held);
          g.down_rows = row_block(g.down, hd.begin, hd.size(), &not_held);
          g.down = nullptr;
        }
        if (L.spec.ffn == FfnKind::Dense) {  // gate/up by intermediate columns, down by output rows
          GluMlpWeights& g = L.dense;
          const IndexRange i = split_range_units(g.gate->shape[0], n, r, kSplitRowUnit);
          shard.dense_cols = i;
          g.gate = row_block(g.gate, i.begin, i.size(), &not_held);
          g.up = row_block(g.up, i.begin, i.size(), &not_held);
          g.down_rows = row_block(g.down, hd.begin, hd.size(), &not_held);
          g.down = nullptr;
        }
      }
      if (has_kda) kda_local.H = shard.kda_heads.size();
      if (has_mla) {
        mla_local.H = shard.mla_heads.size();
      }

      lm_head_rows = *w.lm_head;
      lm_head_rows.shape = {shard.vocab.size(), D};
      lm_head_rows.data = w.lm_head->data ? w.lm_head->data + shard.vocab.begin * D * 2 : nullptr;
      lm_head_rows.nbytes = static_cast<uint64_t>(shard.vocab.size() * D * 2);
      w.lm_head = &lm_head_rows;
      for (LayerWeights& L : w.layers)
        if (L.spec.ffn == FfnKind::LatentMoE) L.moe.comm = comm.get();
    }
    for (const TensorView& t : ck.tensors()) {
      const auto hit = match_tensor_name(cfg, text_tensor_name(t.name));
      if (!hit) continue;  // vision tensors: never read by the text model
      if (hit->expert >= 0) {
        if (shard.experts.contains(hit->expert)) shard.expert_bytes += t.nbytes;
      } else if (hit->role == TensorRole::LmHead) {
        shard.lm_head_bytes += static_cast<uint64_t>(shard.vocab.size() * D * 2);
      } else {
        shard.trunk_bytes += t.nbytes;
      }
    }
    shard.trunk_bytes -= not_held;
  }

  /// One piece of a sequence in a batched layer loop: its state, its tokens, and the logits
  /// rows wanted (n_logits of its last rows; 0 = none).
  struct Part {
    SequenceState::Impl* st;
    std::span<const int32_t> tokens;
    int64_t n_logits;
    bool per_token = false;         ///< BatchEntry::per_token
    StateLog* kda_steps = nullptr;  ///< BatchEntry::kda_steps
    std::span<const EmbedRows> embeds;  ///< BatchEntry::embeds of the whole entry
    int64_t offset = 0;                 ///< position of tokens[0] in the entry (embeds are relative to it)
  };
  /// The layer loop of spec §3.1 over validated inputs, all parts stacked into one block;
  /// advances every state in place. Returns the logits rows of each part ([n_logits, V]).
  std::vector<std::vector<float>> run(std::span<const Part> parts, DumpSink* dump) const;
};

Model::Model(const Checkpoint& ck, ModelOptions options) : impl_(std::make_unique<Impl>(ck, options)) {}
const ModelOptions& Model::options() const { return impl_->opt; }
Model::~Model() = default;
const ModelConfig& Model::config() const { return impl_->cfg; }
std::vector<std::span<const uint8_t>> Model::mapped_weight_ranges() const {
  return k3::mapped_weight_ranges(impl_->w, impl_->shard.experts);
}
const ModelShard& Model::shard() const { return impl_->shard; }
const TrunkCopyStats& Model::trunk_copy() const { return impl_->trunk_copy; }
Comm& Model::comm() const { return *impl_->comm; }

SequenceState Model::new_sequence() const {
  SequenceState s;
  state_impl(s) = SequenceState::Impl::fresh(impl_->cfg, impl_->shard.rank, impl_->shard.ranks, impl_->ex.mla_cache);
  return s;
}

SequenceState Model::load_sequence(const std::filesystem::path& file, SequenceFileMeta* meta,
                                   const std::string& expect_fingerprint) const {
  return load_sequence_state(file, impl_->cfg, impl_->shard.rank, impl_->shard.ranks, meta, expect_fingerprint);
}

std::filesystem::path Model::state_file(const std::filesystem::path& file) const {
  const ModelShard& s = impl_->shard;
  if (s.ranks == 1 || s.rank == 0) return file;
  std::filesystem::path p = file;
  p += ".rank" + std::to_string(s.rank) + "of" + std::to_string(s.ranks);
  return p;
}

namespace {

/// RMSNorm of each of the T rows of x [T, D] with weight w [D]: the fp64 oracle, or (fast) the
/// dispatched fp32 kernel with tokens split across threads.
FBuf rmsnorm_rows(const float* x, int64_t T, int64_t D, const std::vector<float>& w, float eps, bool fast) {
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
  const BatchEntry e{&seq, tokens, all_logits ? BatchLogits::All : BatchLogits::Last};
  return std::move(forward_batch(std::span<const BatchEntry>(&e, 1), dump)[0]);
}

std::vector<float> Model::forward(SequenceState& seq, std::span<const int32_t> tokens,
                                  std::span<const EmbedRows> embeds, bool all_logits, DumpSink* dump) const {
  BatchEntry e{&seq, tokens, all_logits ? BatchLogits::All : BatchLogits::Last};
  e.embeds = embeds;
  return std::move(forward_batch(std::span<const BatchEntry>(&e, 1), dump)[0]);
}

std::vector<std::vector<float>> Model::forward_batch(std::span<const BatchEntry> batch, DumpSink* dump) const {
  const Impl& m = *impl_;
  const ExecScope scope(m.ctx);  // every kernel of this call runs the model's execution config
  const ModelConfig& cfg = m.cfg;
  const int64_t V = cfg.vocab_size, B = static_cast<int64_t>(batch.size());
  if (B == 0) throw Error("forward: empty batch");
  if (dump && B > 1) throw Error("forward: a dump needs a batch of one sequence, found " + std::to_string(B));
  auto where = [&](int64_t i) { return B > 1 ? "batch entry " + std::to_string(i) + ": " : std::string(); };
  for (int64_t i = 0; i < B; ++i) {
    const BatchEntry& e = batch[i];
    if (!e.seq) throw Error("forward: " + where(i) + "missing sequence state");
    if (e.tokens.empty()) throw Error("forward: " + where(i) + "empty token list");
    state_impl(*e.seq).check_matches(cfg, "forward", m.shard.rank, m.shard.ranks);
    for (int64_t j = 0; j < i; ++j)
      if (&state_impl(*batch[j].seq) == &state_impl(*e.seq))
        throw Error("forward: batch entries " + std::to_string(j) + " and " + std::to_string(i) +
                    " are the same sequence state");
    for (size_t t = 0; t < e.tokens.size(); ++t)
      if (e.tokens[t] < 0 || e.tokens[t] >= V)
        throw Error("forward: " + where(i) + "token id " + std::to_string(e.tokens[t]) + " at position " +
                    std::to_string(t) + " outside [0, vocab_size = " + std::to_string(V) + ")");
    if (e.per_token && static_cast<int64_t>(e.tokens.size()) > m.opt.prefill_chunk)
      throw Error("forward: " + where(i) + "a per-token (decode-form) entry of " + std::to_string(e.tokens.size()) +
                  " tokens exceeds prefill_chunk = " + std::to_string(m.opt.prefill_chunk));
    if (e.kda_steps && !e.per_token)
      throw Error("forward: " + where(i) + "kda_steps needs a per-token (decode-form) entry");
    int64_t end_prev = 0;
    for (size_t r = 0; r < e.embeds.size(); ++r) {
      const EmbedRows& er = e.embeds[r];
      const int64_t T = static_cast<int64_t>(e.tokens.size());
      const std::string range = "embedding rows " + std::to_string(r) + " (pos " + std::to_string(er.pos) +
                                ", n " + std::to_string(er.n) + ")";
      if (er.n < 1 || er.pos < end_prev || er.pos > T || er.n > T - er.pos)  // no overflow in pos + n
        throw Error("forward: " + where(i) + range + " must be non-empty, ordered, non-overlapping and inside the " +
                    std::to_string(e.tokens.size()) + " tokens");
      if (static_cast<int64_t>(er.rows.size()) != er.n * cfg.hidden_size)
        throw Error("forward: " + where(i) + range + " hold " + std::to_string(er.rows.size()) +
                    " values, expected n * hidden_size = " + std::to_string(er.n * cfg.hidden_size));
      for (size_t k = 0; k < er.rows.size(); ++k)
        if (!std::isfinite(er.rows[k]))
          throw Error("forward: " + where(i) + range + ": value " + std::to_string(k) + " is not finite");
      end_prev = er.pos + er.n;
    }
  }
  for (const BatchEntry& e : batch)
    if (e.kda_steps) e.kda_steps->begin(e.seq->n_past() + 1, static_cast<int64_t>(e.tokens.size()));
  // Inputs are validated above; the states are then advanced in place. An exception after this
  // point (corrupt weights) marks every state of the batch failed, so later calls refuse them.
  std::vector<std::vector<float>> logits(static_cast<size_t>(B));
  try {
    // Chunked prefill: round r runs piece r (tokens [r·piece, (r+1)·piece)) of every entry that
    // still has tokens, layer-major through all layers (a dumped call runs as one piece).
    size_t longest = 0;
    for (const BatchEntry& e : batch) longest = std::max(longest, e.tokens.size());
    const size_t piece = dump ? longest : static_cast<size_t>(m.opt.prefill_chunk);
    std::vector<Impl::Part> parts;
    std::vector<int64_t> owner;
    for (size_t b = 0; b < longest; b += piece) {
      parts.clear();
      owner.clear();
      for (int64_t i = 0; i < B; ++i) {
        const BatchEntry& e = batch[i];
        if (e.tokens.size() <= b) continue;
        const size_t n = std::min(piece, e.tokens.size() - b);
        const bool last = b + n == e.tokens.size();
        const int64_t n_logits = e.logits == BatchLogits::All              ? static_cast<int64_t>(n)
                                 : (e.logits == BatchLogits::Last && last) ? 1
                                                                           : 0;
        parts.push_back({&state_impl(*e.seq), e.tokens.subspan(b, n), n_logits, e.per_token, e.kda_steps, e.embeds,
                         static_cast<int64_t>(b)});
        owner.push_back(i);
      }
      std::vector<std::vector<float>> l = m.run(parts, dump);
      for (size_t p = 0; p < parts.size(); ++p) {
        std::vector<float>& dst = logits[static_cast<size_t>(owner[p])];
        if (dst.empty()) dst = std::move(l[p]);
        else dst.insert(dst.end(), l[p].begin(), l[p].end());
      }
    }
    return logits;
  } catch (...) {
    for (const BatchEntry& e : batch) e.seq->mark_failed();
    throw;
  }
}

std::vector<std::vector<float>> Model::Impl::run(std::span<const Part> parts, DumpSink* dump) const {
  const Impl& m = *this;
  const ModelConfig& cfg = m.cfg;
  const int64_t D = cfg.hidden_size, V = cfg.vocab_size, S = static_cast<int64_t>(parts.size());
  const float eps = cfg.rms_norm_eps;
  auto name = [](int64_t il, const char* what) { return "blk." + std::to_string(il) + "." + what; };

  // The rows of the block: part s owns rows segs[s].
  std::vector<SeqRows> segs(static_cast<size_t>(S));
  int64_t T = 0;
  for (int64_t s = 0; s < S; ++s) {
    segs[s] = {T, static_cast<int64_t>(parts[s].tokens.size()), parts[s].per_token, parts[s].kda_steps};
    T += segs[s].T;
  }
  std::vector<KdaState*> kda_states(static_cast<size_t>(S));
  std::vector<MlaCache*> mla_caches(static_cast<size_t>(S));

  // x0 = embed[token] (no scaling, no positions).
  std::vector<float> x(static_cast<size_t>(T * D));
  for (int64_t s = 0; s < S; ++s)
    for (int64_t t = 0; t < segs[s].T; ++t)
      ref::decode_row(*m.w.embed, parts[s].tokens[t], x.data() + (segs[s].row0 + t) * D);
  // Rows given as vectors (BatchEntry::embeds) replace the table rows of their positions.
  for (int64_t s = 0; s < S; ++s) {
    const int64_t p0 = parts[s].offset, p1 = p0 + segs[s].T;
    for (const EmbedRows& er : parts[s].embeds) {
      const int64_t a = std::max(p0, er.pos), b = std::min(p1, er.pos + er.n);
      if (a >= b) continue;
      std::copy_n(er.rows.data() + (a - er.pos) * D, (b - a) * D, x.data() + (segs[s].row0 + a - p0) * D);
    }
  }
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
    // Split models: this rank's heads write their pre-o_proj outputs into `heads`, then
    // split_attn_out (gather heads, this rank's o_proj rows, gather hidden blocks).
    const bool split = m.shard.ranks > 1;
    if (L.spec.attn == AttnKind::KDA) {
      for (int64_t s = 0; s < S; ++s) kda_states[s] = &parts[s].st->layers[il].kda;
      if (!split) {
        kda_forward_batch(L.kda, m.kda, xn.data(), segs, kda_states, sub.data(), m.ex);
      } else {
        FBuf heads(static_cast<size_t>(T * m.kda_local.C()));
        // A rank without heads holds an empty state (its decode-form logs get empty records).
        if (m.kda_local.H > 0) kda_forward_batch(L.kda, m.kda_local, xn.data(), segs, kda_states, heads.data(), m.ex);
        split_output_rows(*m.comm, heads.data(), T, m.kda.H, m.kda.d, 1, *L.kda.o_proj_rows, D, m.ex.fast, sub.data());
      }
    } else {
      for (int64_t s = 0; s < S; ++s) mla_caches[s] = &parts[s].st->layers[il].mla;
      const MlaKvbHalves* kvb = m.kv_b.empty() ? nullptr : &m.kv_b[il];
      if (!split) {
        mla_forward_batch(L.mla, m.mla, xn.data(), segs, mla_caches, sub.data(), MlaMode::Auto, m.ex, kvb);
      } else {
        FBuf heads(static_cast<size_t>(T * m.mla_local.H * m.mla_local.dv));
        mla_forward_batch(L.mla, m.mla_local, xn.data(), segs, mla_caches, heads.data(), MlaMode::Auto, m.ex, kvb);
        split_output_rows(*m.comm, heads.data(), T, m.mla.H, m.mla.dv, 1, *L.mla.o_proj_rows, D, m.ex.fast, sub.data());
      }
    }
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
    // Streamed experts: the next layer's experts, predicted from this FFN's input h by the next
    // layer's router (ExpertStore::prefetch), are read while this FFN and the next attention
    // compute. Only when reads happen; the prediction enters no result.
    MoePrefetch ahead;
    if (il + 1 < m.w.layers.size()) {
      const LayerWeights& N = m.w.layers[il + 1];
      if (N.spec.ffn == FfnKind::LatentMoE && N.moe.store && N.moe.store->options().prefetch) {
        ahead.layer = static_cast<int>(il + 1);
        ahead.ids = predict_moe_experts(N.moe, m.moe, N.post_norm, h.data(), T, m.shard.experts,
                                        moe_stream_group(m.moe.k));
      }
    }
    if (ahead.layer >= 0 && L.spec.ffn == FfnKind::Dense) m.w.layers[il + 1].moe.store->prefetch(ahead.layer, ahead.ids);
    if (L.spec.ffn == FfnKind::Dense && !split) {
      glu_mlp_forward(L.dense, m.act, xn.data(), T, sub.data(), m.ex);
    } else if (L.spec.ffn == FfnKind::Dense) {
      const int64_t Ir = L.dense.gate->shape[0], I = L.dense.down_rows->shape[1];
      FBuf a(static_cast<size_t>(T * Ir));
      if (Ir > 0) glu_mlp_forward(L.dense, m.act, xn.data(), T, a.data(), m.ex);
      split_output_rows(*m.comm, a.data(), T, I, 1, kSplitRowUnit, *L.dense.down_rows, D, m.ex.fast, sub.data());
    } else {
      const int64_t k = m.moe.k;
      std::vector<int32_t> ids(static_cast<size_t>(T * k));
      std::vector<float> wts(static_cast<size_t>(T * k));
      latent_moe_forward(L.moe, m.moe, m.act, xn.data(), T, sub.data(), ids.data(), wts.data(), m.ex,
                         ahead.layer >= 0 ? &ahead : nullptr);
      if (dump) {
        dump->add_i32(name(il, "router_topk_ids"), {T, k}, ids.data());
        dump->add(name(il, "router_topk_w"), {T, k}, wts.data());
      }
    }
    if (dump) dump->add(name(il, "ffn_out"), {T, D}, sub.data());
    stream.add(sub.data());
  }

  for (int64_t s = 0; s < S; ++s) parts[s].st->n_past += segs[s].T;
  std::vector<std::vector<float>> logits(static_cast<size_t>(S));
  // The rows that want logits: the last n_logits rows of each part.
  std::vector<int64_t> out_rows;
  for (int64_t s = 0; s < S; ++s)
    for (int64_t r = segs[s].T - parts[s].n_logits; r < segs[s].T; ++r) out_rows.push_back(segs[s].row0 + r);
  const int64_t n_out = static_cast<int64_t>(out_rows.size());
  if (n_out == 0) return logits;  // inner prefill pieces only: no logits needed
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
  FBuf fin(static_cast<size_t>(n_out * D));
  for (int64_t r = 0; r < n_out; ++r) std::copy_n(&h[out_rows[r] * D], D, &fin[r * D]);
  FBuf xn = rmsnorm_rows(fin.data(), n_out, D, m.w.final_norm, eps, m.ex.fast);
  std::vector<float> all(static_cast<size_t>(n_out * V));
  if (m.shard.ranks == 1) {
    if (m.ex.fast) k3::matmul(*m.w.lm_head, xn.data(), n_out, all.data());
    else ref::matmul(*m.w.lm_head, xn.data(), n_out, all.data());
  } else {
    // Each rank computes the logits of its vocabulary rows, [n_out, V_r]; the all-gather
    // concatenates the slices (rank order = vocabulary order) and each row is reassembled.
    const int n = m.shard.ranks;
    const int64_t Vr = m.shard.vocab.size();
    std::vector<float> part(static_cast<size_t>(n_out * Vr)), got(static_cast<size_t>(n_out * V));
    if (Vr > 0) {
      if (m.ex.fast) k3::matmul(*m.w.lm_head, xn.data(), n_out, part.data());
      else ref::matmul(*m.w.lm_head, xn.data(), n_out, part.data());
    }
    std::vector<int64_t> counts(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) counts[r] = n_out * split_range(V, n, r).size() * static_cast<int64_t>(sizeof(float));
    m.comm->allgatherv(part.data(), counts, got.data());
    const float* src = got.data();
    for (int r = 0; r < n; ++r) {
      const IndexRange v = split_range(V, n, r);
      for (int64_t row = 0; row < n_out; ++row, src += v.size()) std::copy_n(src, v.size(), &all[row * V + v.begin]);
    }
  }
  if (dump) dump->add("logits", {n_out, V}, all.data());
  int64_t r = 0;
  for (int64_t s = 0; s < S; ++s) {
    const int64_t n = parts[s].n_logits;
    logits[s].assign(all.begin() + r * V, all.begin() + (r + n) * V);
    r += n;
  }
  return logits;
}

}  // namespace k3
