#include "kernels/exec_config.h"

#include <atomic>
#include <list>
#include <mutex>
#include <string>

#include "core/error.h"

namespace k3 {

namespace detail {
constinit thread_local const ExecContext* tl_exec_context = nullptr;
}  // namespace detail

namespace {

// The process default. Function-local statics: models may be built during static initialization.
struct Defaults {
  std::mutex mu;
  ExecConfig config;                // as given (guarded by mu)
  std::list<ExecContext> contexts;  // every default context ever set (stable addresses; a few)
  std::atomic<const ExecContext*> current{nullptr};
};
Defaults& defaults() {
  static Defaults d;
  return d;
}

// `c` resolved over `base` (unset fields of c take base's; then the built-in defaults).
ExecContext resolve_over(const ExecConfig& c, const ExecConfig& base) {
  ExecContext x;
  const std::optional<Isa> isa = c.isa ? c.isa : base.isa;
  x.isa = isa ? *isa : best_isa();
  x.kt = &kernels_for(x.isa);  // throws when the CPU lacks it
  x.kernels = c.kernels.value_or(base.kernels.value_or(ModelKernels::Fast));
  x.numerics = c.numerics.value_or(base.numerics.value_or(Numerics::Exact));
  // An explicit numerics mode brings its own expert path unless c names one.
  const std::optional<Mxfp4Path> mx = c.mxfp4 ? c.mxfp4 : c.numerics ? std::nullopt : base.mxfp4;
  x.mxfp4 = mx ? *mx : numerics_mxfp4_path(x.numerics);
  const int threads = c.threads.value_or(base.threads.value_or(0));
  x.threads = threads > 0 ? threads : 0;
  return x;
}
}  // namespace

const char* model_kernels_name(ModelKernels k) { return k == ModelKernels::Fast ? "fast" : "ref"; }

ModelKernels parse_model_kernels(std::string_view s, std::string_view what) {
  if (s == "fast") return ModelKernels::Fast;
  if (s == "ref") return ModelKernels::Reference;
  throw Error(std::string(what) + "=" + std::string(s) + ": expected 'fast' or 'ref'");
}

Mxfp4Path numerics_mxfp4_path(Numerics n) {
  switch (n) {
    case Numerics::Exact: return Mxfp4Path::ExactF32;
    case Numerics::Int8:
    case Numerics::Bf16: return Mxfp4Path::Int8;
    case Numerics::Mxfp8: break;
  }
  return Mxfp4Path::Mxfp8;
}

ExecConfig ExecContext::config() const {
  ExecConfig c;
  c.isa = isa;
  c.kernels = kernels;
  c.numerics = numerics;
  c.mxfp4 = mxfp4;
  c.threads = threads;
  return c;
}

ExecContext resolve_exec_config(const ExecConfig& c) { return resolve_over(c, default_exec_config()); }

void set_default_exec_config(const ExecConfig& c) {
  const ExecContext x = resolve_over(c, ExecConfig{});
  Defaults& d = defaults();
  std::lock_guard<std::mutex> lk(d.mu);
  d.config = c;
  d.contexts.push_back(x);
  d.current.store(&d.contexts.back(), std::memory_order_release);
}

ExecConfig default_exec_config() {
  Defaults& d = defaults();
  std::lock_guard<std::mutex> lk(d.mu);
  return d.config;
}

const ExecContext& default_exec_context() {
  Defaults& d = defaults();
  if (const ExecContext* c = d.current.load(std::memory_order_acquire)) return *c;
  std::lock_guard<std::mutex> lk(d.mu);
  if (d.current.load(std::memory_order_relaxed) == nullptr) {
    d.contexts.push_back(resolve_over(d.config, ExecConfig{}));  // built-in defaults: never throws
    d.current.store(&d.contexts.back(), std::memory_order_release);
  }
  return *d.current.load(std::memory_order_relaxed);
}

ExecScope::ExecScope(const ExecContext& ctx) : prev_(detail::tl_exec_context) { detail::tl_exec_context = &ctx; }
ExecScope::~ExecScope() { detail::tl_exec_context = prev_; }

Numerics numerics_mode() { return exec_context().numerics; }

}  // namespace k3
