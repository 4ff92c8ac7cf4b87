#include "vision/vision_tower.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/error.h"
#include "kernels/ops.h"
#include "kernels/threads.h"
#include "kernels/vec.h"
#include "model/buffer.h"
#include "vision/vision_position.h"

namespace k3::vision {

namespace {

/// One image of the batch: its grid and its first row in the packed [L, ·] buffers.
struct Item {
  int64_t h = 0, w = 0, row0 = 0, tok0 = 0;
  int64_t rows() const { return h * w; }
  int64_t tokens() const { return (h / 2) * (w / 2); }
};

void check_image(const ImagePatches& im, int64_t index) {
  const std::string who = "image " + std::to_string(index) + (im.name.empty() ? "" : " ('" + im.name + "')");
  auto side = [&](int64_t v, const char* what) {
    if (v < 2 || v > kVisionRopeMaxGrid || v % 2 != 0)
      throw Error("vision tower: " + who + ": grid " + what + " " + std::to_string(v) +
                  " must be even and within [2, " + std::to_string(kVisionRopeMaxGrid) + "] (vision.md §3.2)");
  };
  side(im.grid_h, "height");
  side(im.grid_w, "width");
  const int64_t want = im.grid_h * im.grid_w * kPatchValues;
  if (static_cast<int64_t>(im.patches.size()) != want)
    throw Error("vision tower: " + who + ": " + std::to_string(im.patches.size()) + " patch values, expected " +
                std::to_string(want) + " (grid " + std::to_string(im.grid_h) + "x" + std::to_string(im.grid_w) +
                " x 3 x 14 x 14)");
  for (size_t i = 0; i < im.patches.size(); ++i)
    if (!std::isfinite(im.patches[i]))
      throw Error("vision tower: " + who + ": patch value " + std::to_string(i) + " is not finite");
}

/// y[r] = rms(x[r], g, eps) for rows [0, n) of width d.
void rms_rows(const float* x, const float* g, float eps, float* y, int64_t n, int64_t d) {
  parallel_for(n, grain_for_work(1, d * 2), [&](int64_t a, int64_t b) {
    for (int64_t r = a; r < b; ++r) vec::rmsnorm(x + r * d, g, eps, y + r * d, d);
  });
}

/// x[i] += y[i] over n values.
void add_into(float* x, const float* y, int64_t n) {
  parallel_for(n, grain_for_work(256, 1), [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) x[i] += y[i];
  });
}

/// gelu_tanh(z) = 0.5·z·(1 + tanh(√(2/π)·(z + 0.044715·z³))) in place (vision.md §4.4 step 7).
void gelu_tanh(float* x, int64_t n) {
  constexpr float k = 0.7978845608028654f;  // √(2/π)
  parallel_for(n, grain_for_work(256, 16), [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) {
      const float z = x[i];
      x[i] = 0.5f * z * (1.0f + std::tanh(k * (z + 0.044715f * z * z * z)));
    }
  });
}

/// gelu_erf(z) = 0.5·z·(1 + erf(z/√2)) in place (vision.md §5.2 step 2).
void gelu_erf(float* x, int64_t n) {
  constexpr float r = 0.7071067811865476f;  // 1/√2
  parallel_for(n, grain_for_work(256, 16), [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * r));
  });
}

/// Non-causal attention of every head inside each item (vision.md §4.4 step 4), flash-style.
/// qkv [L, 3A] (q and k already rotated), kt [A, L] (k transposed: head a's dims at rows
/// a·dh .. a·dh+dh−1), out o [L, A].
void attention(const std::vector<Item>& items, const float* qkv, const float* kt, float* o, int64_t L, int64_t Hv,
               int64_t dh, int64_t Bq, int64_t Bk) {
  const int64_t A = Hv * dh, ld = 3 * A;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dh)));
  struct Work {
    int64_t item, head, q0;
  };
  std::vector<Work> work;
  for (int64_t i = 0; i < static_cast<int64_t>(items.size()); ++i)
    for (int64_t a = 0; a < Hv; ++a)
      for (int64_t q0 = 0; q0 < items[static_cast<size_t>(i)].rows(); q0 += Bq) work.push_back({i, a, q0});
  parallel_for(static_cast<int64_t>(work.size()), 1, [&](int64_t wa, int64_t wb) {
    FBuf qt(static_cast<size_t>(Bq * dh)), s(static_cast<size_t>(Bq * Bk)), acc(static_cast<size_t>(Bq * dh));
    std::vector<float> m(static_cast<size_t>(Bq)), l(static_cast<size_t>(Bq));
    for (int64_t wi = wa; wi < wb; ++wi) {
      const Work& wk = work[static_cast<size_t>(wi)];
      const Item& it = items[static_cast<size_t>(wk.item)];
      const int64_t Li = it.rows(), bq = std::min(Bq, Li - wk.q0);
      for (int64_t r = 0; r < bq; ++r) {
        const float* q = qkv + (it.row0 + wk.q0 + r) * ld + wk.head * dh;
        for (int64_t d = 0; d < dh; ++d) qt[static_cast<size_t>(r * dh + d)] = q[d] * scale;
      }
      std::fill(m.begin(), m.end(), -std::numeric_limits<float>::infinity());
      std::fill(l.begin(), l.end(), 0.0f);
      std::fill(acc.begin(), acc.begin() + bq * dh, 0.0f);
      for (int64_t k0 = 0; k0 < Li; k0 += Bk) {
        const int64_t bk = std::min(Bk, Li - k0);
        // s [bq, bk] = (q/√dh) · kᵀ
        vec::gemm_nn(qt.data(), dh, kt + wk.head * dh * L + it.row0 + k0, L, s.data(), bk, bq, bk, dh, false);
        for (int64_t r = 0; r < bq; ++r) {
          float* sr = s.data() + r * bk;
          float mx = m[static_cast<size_t>(r)];
          for (int64_t j = 0; j < bk; ++j) mx = std::max(mx, sr[j]);
          const float corr = std::exp(m[static_cast<size_t>(r)] - mx);  // exp(-inf) = 0 on the first tile
          for (int64_t j = 0; j < bk; ++j) sr[j] -= mx;
          vec::exp(sr, sr, bk);
          float sum = 0;
          for (int64_t j = 0; j < bk; ++j) sum += sr[j];
          l[static_cast<size_t>(r)] = l[static_cast<size_t>(r)] * corr + sum;
          m[static_cast<size_t>(r)] = mx;
          if (corr != 1.0f) vec::scale(acc.data() + r * dh, corr, acc.data() + r * dh, dh);
        }
        // acc [bq, dh] += p [bq, bk] · v [bk, dh]
        const float* v = qkv + (it.row0 + k0) * ld + 2 * A + wk.head * dh;
        vec::gemm_nn(s.data(), bk, v, ld, acc.data(), dh, bq, dh, bk, true);
      }
      for (int64_t r = 0; r < bq; ++r)
        vec::scale(acc.data() + r * dh, 1.0f / l[static_cast<size_t>(r)], o + (it.row0 + wk.q0 + r) * A + wk.head * dh,
                   dh);
    }
  });
}

}  // namespace

VisionTower::VisionTower(const Checkpoint& ck) : w_(bind_vision_weights(ck)) {}

uint64_t VisionTower::workspace_bytes(int64_t L, int64_t max_image, const VisionOptions& o) const {
  const VisionConfig& c = w_.config;
  const uint64_t Dv = static_cast<uint64_t>(c.hidden_size), A = static_cast<uint64_t>(c.qkv_hidden_size);
  const uint64_t Iv = static_cast<uint64_t>(c.intermediate_size), Dp = static_cast<uint64_t>(c.merged_width());
  const uint64_t Dt = static_cast<uint64_t>(c.text_hidden_size), dh = static_cast<uint64_t>(c.head_dim());
  const uint64_t n = static_cast<uint64_t>(L), N = n / 4;
  const uint64_t chunk = std::min<uint64_t>(n, static_cast<uint64_t>(std::max<int64_t>(o.mlp_rows, 1)));
  const uint64_t Bq = static_cast<uint64_t>(o.query_tile), Bk = static_cast<uint64_t>(o.key_tile);
  const uint64_t per_thread = 2 * Bq * dh + Bq * Bk + 2 * Bq;
  uint64_t floats = n * static_cast<uint64_t>(kPatchValues) + 2 * n * Dv + 3 * n * A + A * n + n * A +
                    chunk * (Iv + Dv) + static_cast<uint64_t>(max_image) * Dv + N * (2 * Dp + Dt) +
                    static_cast<uint64_t>(num_threads()) * per_thread;
  return floats * 4;
}

VisionOutput VisionTower::encode(std::span<const ImagePatches> images, const VisionOptions& o) const {
  if (images.empty()) throw Error("vision tower: no images to encode");
  if (o.query_tile < 1 || o.key_tile < 1 || o.mlp_rows < 1)
    throw Error("vision tower: tile sizes must be >= 1 (query " + std::to_string(o.query_tile) + ", key " +
                std::to_string(o.key_tile) + ", mlp rows " + std::to_string(o.mlp_rows) + ")");
  const VisionConfig& c = w_.config;
  const int64_t Dv = c.hidden_size, A = c.qkv_hidden_size, Hv = c.num_heads, dh = c.head_dim();
  const int64_t Iv = c.intermediate_size, Dp = c.merged_width(), Dt = c.text_hidden_size;
  const int64_t P = kPatchValues;
  std::vector<Item> items;
  int64_t L = 0, N = 0, max_image = 0;
  for (size_t i = 0; i < images.size(); ++i) {
    check_image(images[i], static_cast<int64_t>(i));
    Item it{images[i].grid_h, images[i].grid_w, L, N};
    L += it.rows();
    N += it.tokens();
    max_image = std::max(max_image, it.rows());
    items.push_back(it);
  }
  VisionOutput out;
  out.workspace_bytes = workspace_bytes(L, max_image, o);
  auto dump = [&](const std::string& name, const float* data, int64_t rows, int64_t cols) {
    if (o.dump) o.dump->add(name, {rows, cols}, data);
  };

  // §4.1 patch embedding: X [L, Dv] = patches [L, P] · W_peᵀ (conv weight read as [Dv, P])
  FBuf x(static_cast<size_t>(L * Dv)), u(static_cast<size_t>(L * Dv));
  {
    FBuf patches(static_cast<size_t>(L * P));
    for (size_t i = 0; i < images.size(); ++i)
      std::copy(images[i].patches.begin(), images[i].patches.end(), patches.begin() + items[i].row0 * P);
    matmul(w_.patch_embed, patches.data(), L, x.data());
  }
  dump("vision.patch_embed", x.data(), L, Dv);
  // §4.2 interpolated absolute position embedding (t = 1: no time table)
  for (const Item& it : items) {
    const std::vector<float> q =
        interpolate_pos_emb(w_.pos_emb.data(), c.pos_emb_height, c.pos_emb_width, Dv, it.h, it.w);
    if (o.dump) std::copy(q.begin(), q.end(), u.begin() + it.row0 * Dv);
    add_into(x.data() + it.row0 * Dv, q.data(), it.rows() * Dv);
  }
  dump("vision.pos_emb", u.data(), L, Dv);
  dump("vision.embed", x.data(), L, Dv);

  std::vector<Rope2D> rope;
  for (const Item& it : items) rope.emplace_back(dh, it.h, it.w);
  FBuf qkv(static_cast<size_t>(L * 3 * A)), kt(static_cast<size_t>(A * L)), attn(static_cast<size_t>(L * A));
  const int64_t chunk = std::min(L, o.mlp_rows);
  FBuf hid(static_cast<size_t>(chunk * Iv)), mlp_out(static_cast<size_t>(chunk * Dv));
  for (int64_t b = 0; b < c.num_layers; ++b) {
    const VisionBlockWeights& bw = w_.blocks[static_cast<size_t>(b)];
    rms_rows(x.data(), bw.norm0.data(), kVisionNormEps, u.data(), L, Dv);
    matmul(*bw.wqkv, u.data(), L, qkv.data());
    // §4.3 RoPE on q and k of every head, then kᵀ per head for the score products
    for (size_t i = 0; i < items.size(); ++i) {
      const Item& it = items[i];
      const Rope2D& rp = rope[i];
      parallel_for(it.rows(), grain_for_work(1, 2 * A), [&](int64_t ra, int64_t rb) {
        for (int64_t n = ra; n < rb; ++n) {
          float* row = qkv.data() + (it.row0 + n) * 3 * A;  // q heads, then k heads: 2·Hv vectors of dh
          const int64_t r = n / it.w, col = n % it.w;
          for (int64_t a = 0; a < 2 * Hv; ++a) rp.rotate(row + a * dh, r, col);
        }
      });
    }
    parallel_for(A, 1, [&](int64_t da, int64_t db) {
      for (int64_t d = da; d < db; ++d)
        for (int64_t n = 0; n < L; ++n)
          kt[static_cast<size_t>(d * L + n)] = qkv[static_cast<size_t>(n * 3 * A + A + d)];
    });
    attention(items, qkv.data(), kt.data(), attn.data(), L, Hv, dh, o.query_tile, o.key_tile);
    matmul(*bw.wo, attn.data(), L, u.data());
    add_into(x.data(), u.data(), L * Dv);
    rms_rows(x.data(), bw.norm1.data(), kVisionNormEps, u.data(), L, Dv);
    for (int64_t r0 = 0; r0 < L; r0 += chunk) {
      const int64_t n = std::min(chunk, L - r0);
      matmul(*bw.fc0, u.data() + r0 * Dv, n, hid.data());
      gelu_tanh(hid.data(), n * Iv);
      matmul(*bw.fc1, hid.data(), n, mlp_out.data());
      add_into(x.data() + r0 * Dv, mlp_out.data(), n * Dv);
    }
    dump("vision.block." + std::to_string(b), x.data(), L, Dv);
  }
  // §4.5 final norm
  rms_rows(x.data(), w_.final_norm.data(), kVisionNormEps, u.data(), L, Dv);
  dump("vision.final_norm", u.data(), L, Dv);
  // §5.1 2x2 space-to-depth per image: token (R, C) = [y(2R,2C), y(2R,2C+1), y(2R+1,2C), y(2R+1,2C+1)]
  FBuf z(static_cast<size_t>(N * Dp));
  for (const Item& it : items) {
    const int64_t w2 = it.w / 2;
    parallel_for(it.tokens(), grain_for_work(1, Dp), [&](int64_t ta, int64_t tb) {
      for (int64_t t = ta; t < tb; ++t) {
        const int64_t R = t / w2, C = t % w2;
        float* dst = z.data() + (it.tok0 + t) * Dp;
        for (int64_t k = 0; k < 4; ++k) {
          const int64_t n = (2 * R + k / 2) * it.w + 2 * C + k % 2;
          std::copy(u.data() + (it.row0 + n) * Dv, u.data() + (it.row0 + n + 1) * Dv, dst + k * Dv);
        }
      }
    });
  }
  dump("vision.merge", z.data(), N, Dp);
  // §5.2 projector: rms(gelu_erf(Z·W_p0ᵀ)·W_p2ᵀ, post_norm, projector_ln_eps)
  FBuf a1(static_cast<size_t>(N * Dp));
  matmul(*w_.proj0, z.data(), N, a1.data());
  gelu_erf(a1.data(), N * Dp);
  dump("vision.proj.fc0", a1.data(), N, Dp);
  FBuf c2(static_cast<size_t>(N * Dt));
  matmul(*w_.proj2, a1.data(), N, c2.data());
  dump("vision.proj.fc2", c2.data(), N, Dt);
  out.embeddings.resize(static_cast<size_t>(N * Dt));
  rms_rows(c2.data(), w_.post_norm.data(), c.projector_eps, out.embeddings.data(), N, Dt);
  dump("vision.output", out.embeddings.data(), N, Dt);
  for (const Item& it : items) out.n_tokens.push_back(it.tokens());
  return out;
}

}  // namespace k3::vision
