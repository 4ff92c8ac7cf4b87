#include "kernels/numerics.h"

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "core/error.h"

namespace k3 {

namespace {
std::mutex g_mu;
std::optional<Numerics> g_set;   // set_numerics_mode
std::optional<Numerics> g_mode;  // fixed at the first read
std::atomic<int> g_fast{-1};     // g_mode as an int once fixed (the GEMMs read it per call)
}  // namespace

const char* numerics_name(Numerics n) {
  switch (n) {
    case Numerics::Exact: return "exact";
    case Numerics::Mxfp8: return "mxfp8";
    case Numerics::Bf16: return "bf16";
    case Numerics::Int8: return "int8";
  }
  return "?";
}

Numerics parse_numerics(std::string_view s, std::string_view what) {
  if (s == "exact") return Numerics::Exact;
  if (s == "mxfp8") return Numerics::Mxfp8;
  if (s == "bf16") return Numerics::Bf16;
  if (s == "int8") return Numerics::Int8;
  throw Error(std::string(what) + ": unknown numerics mode '" + std::string(s) +
              "' (expected exact, mxfp8, bf16 or int8)");
}

void check_legacy_numerics_env() {
  if (const char* v = std::getenv("K3_BF16_DOT"); v != nullptr && *v != '\0')
    throw Error("K3_BF16_DOT=" + std::string(v) +
                " is no longer read: use K3_NUMERICS=bf16 (or --numerics bf16) for bf16 trunk "
                "activations on vdpbf16ps");
}

void set_numerics_mode(Numerics n) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_mode && *g_mode != n)
    throw Error(std::string("numerics mode '") + numerics_name(n) + "' requested after '" +
                numerics_name(*g_mode) + "' was already in use in this process");
  g_set = n;
}

void force_numerics_mode(Numerics n) {
  std::lock_guard<std::mutex> lk(g_mu);
  check_legacy_numerics_env();
  g_set = n;
  g_mode = n;
  g_fast.store(static_cast<int>(n), std::memory_order_release);
}

Numerics numerics_mode(Numerics fallback) {
  if (const int f = g_fast.load(std::memory_order_acquire); f >= 0) return static_cast<Numerics>(f);
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_mode) {
    check_legacy_numerics_env();
    if (g_set) {
      g_mode = g_set;
    } else if (const char* v = std::getenv("K3_NUMERICS"); v != nullptr && *v != '\0') {
      g_mode = parse_numerics(v, "K3_NUMERICS");
    } else {
      g_mode = fallback;
    }
    g_fast.store(static_cast<int>(*g_mode), std::memory_order_release);
  }
  return *g_mode;
}

Numerics numerics_mode() { return numerics_mode(Numerics::Exact); }

Numerics select_numerics(std::string_view flag, Numerics fallback) {
  if (!flag.empty()) set_numerics_mode(parse_numerics(flag, "--numerics"));
  return numerics_mode(fallback);
}

// Chosen from the measurements in docs/performance.md ("Prefill and numeric modes at K3 widths").
Numerics default_numerics() { return Numerics::Int8; }

}  // namespace k3
