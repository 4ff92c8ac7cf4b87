// k3._k3 — the C++ half of the `k3` Python package (python/k3/llm.py is the public API).
//
// One Engine holds what `k3 serve` holds: the loaded checkpoint + model + tokenizer
// (runtime/loaded_model.h), an optional prefix cache and a Scheduler (runtime/scheduler.h) whose
// engine thread batches every running sequence into one forward per step. Python submits
// requests and pops their events; the GIL is released while the engine loads, runs a forward
// or is waited on, so Python threads that generate at the same time are batched together.
// Every k3::Error becomes k3.Error (a RuntimeError) with the same message.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <omp.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "kernels/numerics.h"
#include "tools/exec_env.h"
#include "kernels/threads.h"
#include "runtime/loaded_model.h"
#include "runtime/model_fingerprint.h"
#include "runtime/prefix_cache.h"
#include "runtime/sampler.h"
#include "runtime/scheduler.h"
#include "tokenizer/chat_k3.h"
#include "tokenizer/chat_output.h"
#include "tokenizer/py_json.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace py = pybind11;

namespace {

/// What Engine's constructor takes (python/k3/llm.py LLM.__init__ documents each field).
struct EngineOptions {
  int64_t n_ctx = 4096;
  int64_t n_parallel = 4;
  int64_t max_queue = 64;
  std::string numerics;         ///< "" = K3_NUMERICS, else the CLI's generation default
  int threads = 0;              ///< <= 0: all hardware threads
  int64_t cache_ram_mib = 512;  ///< prefix cache RAM budget; 0 = no prefix cache
  int64_t prefill_chunk = 256;
};

/// The loaded model and its serving loop. Members are destroyed in reverse order: the
/// scheduler (it joins its thread) before the cache and the model it uses.
class Engine {
 public:
  Engine(const std::filesystem::path& dir, const EngineOptions& o) : opt_(o) {
    if (o.n_parallel < 1) throw k3::Error("n_parallel: expected >= 1, found " + std::to_string(o.n_parallel));
    if (o.cache_ram_mib < 0) throw k3::Error("cache_ram_mib: expected >= 0, found " + std::to_string(o.cache_ram_mib));
    k3::set_num_threads(o.threads);
    if (o.threads > 0) omp_set_num_threads(o.threads);
    // This model's execution config (numerics, threads; K3_ISA / K3_KERNELS / K3_NUMERICS /
    // K3_MXFP4 read here, as the CLI reads them): another Engine in the process may differ.
    k3::ModelOptions mo;
    mo.exec = k3tools::exec_config(o.numerics, k3::default_numerics(), o.threads);
    mo.prefill_chunk = o.prefill_chunk;
    lm_ = k3::LoadedModel::open(dir, mo);
    stop_ids_ = lm_.stop_ids();
    numerics_ = lm_.model->options().exec.numerics.value_or(k3::Numerics::Exact);
    if (o.cache_ram_mib > 0) {
      k3::PrefixCacheOptions co;
      co.ram_bytes = static_cast<uint64_t>(o.cache_ram_mib) << 20;
      cache_ = std::make_unique<k3::PrefixCache>(*lm_.model, k3::model_fingerprint(*lm_.checkpoint, *lm_.model), co);
    }
    k3::Scheduler::Options so;
    so.n_parallel = o.n_parallel;
    so.n_ctx = o.n_ctx;
    so.max_queue = o.max_queue;
    so.cache = cache_.get();
    scheduler_ = std::make_shared<k3::Scheduler>(*lm_.model, so);
  }

  const k3::Tokenizer& tok() const { return *lm_.tokenizer; }

  std::vector<int32_t> tokenize(const std::string& text, bool special) const {
    return tok().encode(text, special ? k3::AllowedSpecials::all() : k3::AllowedSpecials::none());
  }

  /// Raw bytes of the ids (may cut a UTF-8 character; Python decodes with errors="replace").
  py::bytes detokenize(const std::vector<int32_t>& ids, bool skip_special) const {
    std::string s;
    {
      py::gil_scoped_release nogil;
      s = tok().decode(ids, skip_special);
    }
    return py::bytes(s);
  }

  /// Teacher-forced logits of `ids` on a fresh sequence: float32 [len(ids), vocab_size]. Runs
  /// on the calling thread, beside the engine thread (Model's const methods share no state).
  /// Errors: k3::Error for no ids or an id outside [0, vocab_size).
  py::array_t<float> logits(const std::vector<int32_t>& ids) const {
    if (ids.empty()) throw k3::Error("logits: ids is empty (expected at least 1 token id)");
    const int64_t V = lm_.model->config().vocab_size;
    for (std::size_t t = 0; t < ids.size(); ++t)
      if (ids[t] < 0 || ids[t] >= V)
        throw k3::Error("logits: ids[" + std::to_string(t) + "] = " + std::to_string(ids[t]) +
                        " is outside the vocabulary [0, " + std::to_string(V) + ")");
    std::vector<float> rows;
    {
      py::gil_scoped_release nogil;
      k3::SequenceState seq = lm_.model->new_sequence();
      rows = lm_.model->forward(seq, ids, /*all_logits=*/true);
    }
    const auto T = static_cast<py::ssize_t>(ids.size());
    py::array_t<float> out({T, static_cast<py::ssize_t>(V)});
    std::memcpy(out.mutable_data(), rows.data(), rows.size() * sizeof(float));
    return out;
  }

  /// The K3 chat prompt of `messages_json` (an OpenAI messages list) with apply_chat_template
  /// keyword arguments `kwargs_json` (ChatOptions::from_kwargs).
  std::vector<int32_t> render_chat(const std::string& messages_json, const std::string& kwargs_json) const {
    const auto messages = nlohmann::ordered_json::parse(messages_json);
    const auto kwargs = nlohmann::ordered_json::parse(kwargs_json);
    return k3::render_chat(tok(), messages, k3::ChatOptions::from_kwargs(kwargs));
  }

  /// parse_k3_output as a dict: reasoning, content, tool_calls [{name, arguments (JSON text)}],
  /// stopped.
  py::dict parse_output(const std::vector<int32_t>& ids, bool prompt_opened_think) const {
    const k3::ParsedOutput p = k3::parse_k3_output(tok(), ids, prompt_opened_think);
    py::list calls;
    for (const auto& c : p.tool_calls) {
      py::dict d;
      d["name"] = c.name;
      d["arguments"] = c.raw_arguments.empty() ? k3::tok::py_json_dumps(c.arguments, false, false) : c.raw_arguments;
      calls.append(d);
    }
    py::dict d;
    d["reasoning"] = p.reasoning;
    d["content"] = p.content;
    d["tool_calls"] = calls;
    d["stopped"] = p.stopped;
    return d;
  }

  /// Queues one request (Scheduler::submit's checks and errors). max_tokens < 0: until a stop
  /// id or the context is full; larger than the room left in the context: clamped to it.
  std::shared_ptr<k3::SeqHandle> submit(std::vector<int32_t> prompt, int64_t max_tokens, const k3::SamplerParams& sp,
                                        bool ignore_eos) {
    if (max_tokens == 0) throw k3::Error("max_tokens: expected >= 1 (or None), found 0");
    const int64_t room = opt_.n_ctx - static_cast<int64_t>(prompt.size());
    k3::SeqRequest q;
    q.max_tokens = (max_tokens < 0 || max_tokens > room) ? std::max<int64_t>(room, 1) : max_tokens;
    q.prompt = std::move(prompt);
    q.sampling = sp;
    if (!ignore_eos) q.stop_ids = stop_ids_;
    q.n_vocab = tok().vocab_size();
    const std::shared_ptr<k3::Scheduler> sch = scheduler();  // alive while submitting, even across close()
    return sch->submit(std::move(q));
  }

  py::dict stats() const {
    const k3::SchedulerStats s = scheduler()->stats();
    py::dict d;
    d["running"] = s.running;
    d["waiting"] = s.waiting;
    d["prompt_tokens_total"] = s.prompt_tokens_total;
    d["prompt_tokens_reused"] = s.prompt_tokens_reused;
    d["generated_tokens_total"] = s.generated_tokens_total;
    d["steps_total"] = s.steps_total;
    d["finished_total"] = s.finished_total;
    return d;
  }

  int32_t vocab_size() const { return lm_.model->config().vocab_size; }
  std::vector<int32_t> stop_ids() const { return stop_ids_; }
  std::string numerics() const { return k3::numerics_name(numerics_); }
  const EngineOptions& options() const { return opt_; }

  /// Cancels running and queued sequences and joins the engine thread; later calls fail.
  /// A submit() or stats() running on another thread keeps the scheduler alive until it returns.
  void close() {
    py::gil_scoped_release nogil;
    std::shared_ptr<k3::Scheduler> last;
    {
      std::lock_guard<std::mutex> lk(sched_mu_);
      last = std::move(scheduler_);
    }
    last.reset();  // joins the engine thread unless a concurrent call still holds it (then that call does)
  }

 private:
  std::shared_ptr<k3::Scheduler> scheduler() const {
    std::lock_guard<std::mutex> lk(sched_mu_);
    if (!scheduler_) throw k3::Error("LLM: closed (no request can be submitted after close())");
    return scheduler_;
  }

  EngineOptions opt_;
  k3::Numerics numerics_ = k3::Numerics::Exact;
  k3::LoadedModel lm_;
  std::vector<int32_t> stop_ids_;
  std::unique_ptr<k3::PrefixCache> cache_;
  mutable std::mutex sched_mu_;  ///< guards scheduler_ (close() may run beside submit())
  std::shared_ptr<k3::Scheduler> scheduler_;
};

/// SeqHandle::next with the GIL released: None on timeout, else
/// (done, id, finish_reason, error, n_prompt, n_generated).
py::object next_event(k3::SeqHandle& h, double timeout_s) {
  if (!(timeout_s >= 0.0 && timeout_s <= 86400.0))
    throw k3::Error("next: timeout_s must be in [0, 86400] seconds, found " + std::to_string(timeout_s));
  std::optional<k3::SeqEvent> e;
  {
    py::gil_scoped_release nogil;
    e = h.next(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000.0)));
  }
  if (!e) return py::none();
  return py::make_tuple(e->done, e->id, std::string(k3::finish_reason_name(e->finish)), e->error, e->n_prompt,
                        e->n_generated);
}

}  // namespace

PYBIND11_MODULE(_k3, m) {
  m.doc() = "k3.cpp engine bindings (use the k3 package: k3.LLM)";
  // Types, exceptions and translators are local to this module (py::module_local): a second copy of
  // _k3 in the same process (an installed package beside the build tree's) registers its own.
  // Translators run most recent first: QueueFullError before its base k3::Error.
  static py::exception<k3::Error>& error = py::register_local_exception<k3::Error>(m, "Error", PyExc_RuntimeError);
  py::register_local_exception<k3::QueueFullError>(m, "QueueFullError", error.ptr());
  // nlohmann's parse errors of chat JSON are input errors too.
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const nlohmann::json::exception& e) {
      PyErr_SetString(error.ptr(), (std::string("invalid JSON: ") + e.what()).c_str());
    }
  });

  py::class_<EngineOptions>(m, "EngineOptions", py::module_local())
      .def(py::init<>())
      .def_readwrite("n_ctx", &EngineOptions::n_ctx)
      .def_readwrite("n_parallel", &EngineOptions::n_parallel)
      .def_readwrite("max_queue", &EngineOptions::max_queue)
      .def_readwrite("numerics", &EngineOptions::numerics)
      .def_readwrite("threads", &EngineOptions::threads)
      .def_readwrite("cache_ram_mib", &EngineOptions::cache_ram_mib)
      .def_readwrite("prefill_chunk", &EngineOptions::prefill_chunk);

  py::class_<k3::SamplerParams>(m, "SamplerParams", py::module_local())
      .def(py::init<>())
      .def_readwrite("temp", &k3::SamplerParams::temp)
      .def_readwrite("top_k", &k3::SamplerParams::top_k)
      .def_readwrite("top_p", &k3::SamplerParams::top_p)
      .def_readwrite("min_p", &k3::SamplerParams::min_p)
      .def_readwrite("repeat_penalty", &k3::SamplerParams::repeat_penalty)
      .def_readwrite("frequency_penalty", &k3::SamplerParams::frequency_penalty)
      .def_readwrite("presence_penalty", &k3::SamplerParams::presence_penalty)
      .def_readwrite("repeat_last_n", &k3::SamplerParams::repeat_last_n)
      .def_readwrite("seed", &k3::SamplerParams::seed)
      .def("validate", &k3::SamplerParams::validate);

  py::class_<k3::SeqHandle, std::shared_ptr<k3::SeqHandle>>(m, "SeqHandle", py::module_local())
      .def("next", &next_event, py::arg("timeout_s"))
      .def("cancel", &k3::SeqHandle::cancel)
      .def("cancelled", &k3::SeqHandle::cancelled);

  py::class_<k3::StreamDecoder>(m, "StreamDecoder", py::module_local())
      .def(py::init([](const Engine& e) { return k3::StreamDecoder(e.tok(), /*skip_special=*/true); }),
           py::arg("engine"), py::keep_alive<1, 2>())
      .def("push", &k3::StreamDecoder::push)
      .def("flush", &k3::StreamDecoder::flush);

  py::class_<Engine>(m, "Engine", py::module_local())
      .def(py::init<const std::filesystem::path&, const EngineOptions&>(), py::arg("model_dir"), py::arg("options"),
           py::call_guard<py::gil_scoped_release>())
      .def("tokenize", &Engine::tokenize, py::arg("text"), py::arg("special"), py::call_guard<py::gil_scoped_release>())
      .def("detokenize", &Engine::detokenize, py::arg("ids"), py::arg("skip_special"))
      .def("logits", &Engine::logits, py::arg("ids"))
      .def("render_chat", &Engine::render_chat, py::arg("messages_json"), py::arg("kwargs_json"))
      .def("parse_output", &Engine::parse_output, py::arg("ids"), py::arg("prompt_opened_think"))
      .def("submit", &Engine::submit, py::arg("prompt"), py::arg("max_tokens"), py::arg("sampling"),
           py::arg("ignore_eos"), py::call_guard<py::gil_scoped_release>())
      .def("stats", &Engine::stats)
      .def("close", &Engine::close)
      .def_property_readonly("vocab_size", &Engine::vocab_size)
      .def_property_readonly("stop_ids", &Engine::stop_ids)
      .def_property_readonly("numerics", &Engine::numerics);
}
