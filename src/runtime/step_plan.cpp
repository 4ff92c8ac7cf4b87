// StepPlan encoding and broadcast: see step_plan.h.
#include "runtime/step_plan.h"

#include <cstring>
#include <type_traits>

#include "core/error.h"

namespace k3 {

namespace {

class Writer {
 public:
  template <class T>
  void pod(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof v);
  }
  void ids(const std::vector<int32_t>& v) {
    pod<uint64_t>(v.size());
    for (int32_t x : v) pod(x);
  }
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    out.insert(out.end(), s.begin(), s.end());
  }
  std::vector<uint8_t> out;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> b) : b_(b) {}
  template <class T>
  T pod() {
    T v;
    need(sizeof v);
    std::memcpy(&v, b_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  uint64_t count(size_t item_bytes) {
    const uint64_t n = pod<uint64_t>();
    if (n > (b_.size() - at_) / item_bytes) throw Error("step plan: truncated (a count of " + std::to_string(n) + ")");
    return n;
  }
  std::vector<int32_t> ids() {
    std::vector<int32_t> v(count(4));
    for (int32_t& x : v) x = pod<int32_t>();
    return v;
  }
  std::string str() {
    const uint64_t n = count(1);
    std::string s(reinterpret_cast<const char*>(b_.data() + at_), n);
    at_ += n;
    return s;
  }
  bool done() const { return at_ == b_.size(); }

 private:
  void need(size_t n) const {
    if (b_.size() - at_ < n) throw Error("step plan: truncated");
  }
  std::span<const uint8_t> b_;
  size_t at_ = 0;
};

}  // namespace

std::vector<uint8_t> encode_plan(const StepPlan& p) {
  Writer w;
  w.pod<uint8_t>(p.stop ? 1 : 0);
  w.pod<uint64_t>(p.admit.size());
  for (const SeqRequest& r : p.admit) {
    w.ids(r.prompt);
    const SamplerParams& s = r.sampling;
    w.pod(s.temp), w.pod(s.top_k), w.pod(s.top_p), w.pod(s.min_p), w.pod(s.repeat_penalty);
    w.pod(s.frequency_penalty), w.pod(s.presence_penalty), w.pod(s.repeat_last_n), w.pod(s.seed);
    w.pod(r.max_tokens);
    w.ids(r.stop_ids);
    w.pod(r.n_vocab);
    w.pod<int32_t>(r.top_logprobs);
    w.ids(r.forced_ids);
    w.pod<uint8_t>(r.speculative ? 1 : 0);
    w.pod(r.cache_partition);
    w.pod<uint64_t>(s.logit_bias.size());
    for (const auto& [id, bias] : s.logit_bias) w.pod(id), w.pod(bias);
    const ConstraintSpec& c = r.constraint_spec;
    w.pod<uint8_t>(static_cast<uint8_t>(c.kind));
    w.str(c.text);
    w.pod<uint64_t>(c.tools.size());
    for (const ConstraintSpec::Tool& t : c.tools) w.str(t.name), w.str(t.parameters);
    w.pod<uint8_t>(c.strict ? 1 : 0);
    w.pod<uint8_t>(c.after_think ? 1 : 0);
  }
  w.pod<uint64_t>(p.cancel.size());
  for (int64_t id : p.cancel) w.pod(id);
  w.pod<uint64_t>(p.slot_ops.size());
  for (const StepPlan::SlotOp& op : p.slot_ops) {
    w.pod<uint8_t>(op.kind);
    w.pod(op.id);
    w.str(op.file);
    w.str(op.fingerprint);
  }
  return std::move(w.out);
}

StepPlan decode_plan(std::span<const uint8_t> bytes) {
  Reader r(bytes);
  StepPlan p;
  const uint8_t stop = r.pod<uint8_t>();
  if (stop > 1) throw Error("step plan: bad stop flag " + std::to_string(stop));
  p.stop = stop == 1;
  for (uint64_t n = r.count(8 + 4), i = 0; i < n; ++i) {
    SeqRequest q;
    q.prompt = r.ids();
    SamplerParams& s = q.sampling;
    s.temp = r.pod<float>(), s.top_k = r.pod<int32_t>(), s.top_p = r.pod<float>(), s.min_p = r.pod<float>();
    s.repeat_penalty = r.pod<float>(), s.frequency_penalty = r.pod<float>(), s.presence_penalty = r.pod<float>();
    s.repeat_last_n = r.pod<int32_t>(), s.seed = r.pod<uint64_t>();
    q.max_tokens = r.pod<int64_t>();
    q.stop_ids = r.ids();
    q.n_vocab = r.pod<int64_t>();
    q.top_logprobs = r.pod<int32_t>();
    q.forced_ids = r.ids();
    const uint8_t spec = r.pod<uint8_t>();
    if (spec > 1) throw Error("step plan: bad speculative flag " + std::to_string(spec));
    q.speculative = spec == 1;
    q.cache_partition = r.pod<uint64_t>();
    for (uint64_t nb = r.count(4 + 4), k = 0; k < nb; ++k) {
      const int32_t id = r.pod<int32_t>();
      s.logit_bias.emplace_back(id, r.pod<float>());
    }
    ConstraintSpec& c = q.constraint_spec;
    const uint8_t kind = r.pod<uint8_t>();
    if (kind > static_cast<uint8_t>(ConstraintSpec::Kind::ToolCall))
      throw Error("step plan: bad constraint kind " + std::to_string(kind));
    c.kind = static_cast<ConstraintSpec::Kind>(kind);
    c.text = r.str();
    for (uint64_t nt = r.count(16), k = 0; k < nt; ++k) {
      ConstraintSpec::Tool t;
      t.name = r.str();
      t.parameters = r.str();
      c.tools.push_back(std::move(t));
    }
    const uint8_t strict = r.pod<uint8_t>(), after_think = r.pod<uint8_t>();
    if (strict > 1 || after_think > 1) throw Error("step plan: bad constraint flags");
    c.strict = strict == 1;
    c.after_think = after_think == 1;
    p.admit.push_back(std::move(q));
  }
  for (uint64_t n = r.count(8), i = 0; i < n; ++i) p.cancel.push_back(r.pod<int64_t>());
  for (uint64_t n = r.count(1 + 8 + 16), i = 0; i < n; ++i) {
    StepPlan::SlotOp op;
    const uint8_t kind = r.pod<uint8_t>();
    if (kind > StepPlan::SlotOp::Erase) throw Error("step plan: bad slot command " + std::to_string(kind));
    op.kind = static_cast<StepPlan::SlotOp::Kind>(kind);
    op.id = r.pod<int64_t>();
    op.file = r.str();
    op.fingerprint = r.str();
    p.slot_ops.push_back(std::move(op));
  }
  if (!r.done()) throw Error("step plan: bad trailing bytes");
  return p;
}

void broadcast_plan(Comm& comm, StepPlan& p) {
  std::vector<uint8_t> bytes;
  if (comm.rank() == 0) bytes = encode_plan(p);
  uint64_t n = bytes.size();
  comm.broadcast(&n, sizeof n, 0);
  if (comm.rank() == 0) {
    comm.broadcast(bytes.data(), static_cast<int64_t>(n), 0);
    return;
  }
  bytes.resize(n);
  comm.broadcast(bytes.data(), static_cast<int64_t>(n), 0);
  p = decode_plan(bytes);
}

}  // namespace k3
