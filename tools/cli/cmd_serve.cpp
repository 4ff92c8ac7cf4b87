// `k3 serve -m DIR`: an OpenAI-compatible HTTP server (llama-server flag names) over the
// continuous-batching Scheduler. Listens first (GET /health answers 503 while the model loads),
// then loads the model, checks that -np slots of per-sequence state fit in physical RAM, and
// serves until SIGINT/SIGTERM: then it stops accepting, lets running sequences finish (up to
// --shutdown-timeout seconds, then cancels them) and exits 0; a second signal exits at once
// with status 130. See tools/server/ for the layer.
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "command.h"
#include "progress_bar.h"
#include "ranks.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "cache_flags.h"
#include "agent_api.h"
#include "gen_flags.h"
#include "http_server.h"
#include "metrics.h"
#include "runtime/loaded_model.h"
#include "runtime/scheduler.h"
#include "vision/vision_tower.h"
#include "serve_context.h"
#include "spec_flags.h"

namespace {

struct ServeOptions {
  k3cli::GenFlags gen;
  std::string host = "127.0.0.1";
  int port = 8080;
  int64_t parallel = 4;
  int64_t queue = 64;
  std::vector<std::string> api_keys, api_key_files, metrics_keys, metrics_key_files;  // request_policy.h
  std::vector<std::string> allowed_hosts, cors_origins;
  std::string cache_partition = "key";
  std::string alias;
  int http_threads = 0;
  int timeout_s = 30;
  k3::server::ConnectionLimits conn;  // --max-connections, --max-connections-per-client, --header/body-timeout
  int header_timeout_s = 10;
  int body_timeout_s = 60;
  int shutdown_timeout_s = 30;
  bool test_forced_output = false;
  k3cli::CacheFlags cache;
  std::string slot_save_path;
  int64_t max_tokenize_tokens = int64_t{1} << 20;
  uint64_t max_image_bytes = 20ull << 20;            ///< --max-image-bytes
  uint64_t max_image_pixels = 7168ull * 7168;        ///< --max-image-pixels (W0 x H0 of one image)
  int64_t max_images = 16;                           ///< --max-images (per request)
  int64_t responses_store = 1024;        // --responses-store: /v1/responses kept for previous_response_id
  std::string reasoning_format = "auto";  // --reasoning-format
  int64_t reasoning_budget = -1;          // --reasoning-budget
  std::string log_format = "text";        // --log-format
  k3cli::SpecFlags spec;  // speculative decoding in the scheduler
};

// Answers every running request with 503 `why` (HandleRegistry::fail_all) and gives the HTTP
// threads up to a second to write the answers, before the group ends.
void fail_running(k3::server::HandleRegistry& handles, const std::string& why) {
  handles.fail_all(why);
  for (int i = 0; i < 100 && handles.size() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

uint64_t physical_ram_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

std::string mib(uint64_t b) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f MiB", static_cast<double>(b) / (1024.0 * 1024.0));
  return s;
}

// Waits for SIGINT/SIGTERM on its own thread. The first one starts the orderly stop (wait()); a
// second one ends the process at once with status 130, as llama-server does, for a user who does
// not want to wait for the grace period. A handler (not sigwait with the signals blocked) catches
// them: under an MPI launcher the MPI library's own threads, started before this, do not block
// them, and the signal may be delivered to any of them (or to the waiter thread, the only later
// thread that does not block them).
std::atomic<int> g_signals{0};
std::atomic<int> g_signal_no{0};
std::atomic<pid_t> g_signal_sender{0};
int g_signal_pipe = -1;

extern "C" void on_stop_signal(int sig, siginfo_t* info, void*) {
  if (g_signals.fetch_add(1) >= 1) {
    static const char msg[] = "k3 serve: second signal: exiting now\n";
    if (::write(STDERR_FILENO, msg, sizeof msg - 1) < 0) {
    }
    _exit(130);
  }
  g_signal_no.store(sig);
  g_signal_sender.store(info != nullptr && (info->si_code == SI_USER || info->si_code == SI_QUEUE) ? info->si_pid : 0);
  const char c = 's';
  if (::write(g_signal_pipe, &c, 1) < 0) {
  }
}

class SignalWaiter {
 public:
  SignalWaiter() {
    if (::pipe(fds_) != 0) throw k3::Error("k3 serve: cannot create the pipe of the signal handler");
    g_signal_pipe = fds_[1];
    struct sigaction sa {};
    sa.sa_sigaction = on_stop_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    // Blocked in this thread and every thread started after it (the HTTP threads' system calls
    // are never interrupted); the waiter thread unblocks them for itself.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    thread_ = std::thread([this, set] {
      pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
      // Stays in read() until the destructor: a second signal is delivered here (or to an MPI
      // thread) and its handler exits.
      for (;;) {
        char c = 0;
        const ssize_t n = ::read(fds_[0], &c, 1);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0 || c != 's') return;  // woken by the destructor
        {
          std::lock_guard<std::mutex> lk(mu_);
          signalled_ = g_signal_no.load();
          sender_ = g_signal_sender.load();
        }
        cv_.notify_all();
      }
    });
  }
  ~SignalWaiter() {
    const char c = 'x';
    if (::write(fds_[1], &c, 1) < 0) {
    }
    thread_.join();
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    g_signal_pipe = -1;
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  bool has_signal() {
    std::lock_guard<std::mutex> lk(mu_);
    return signalled_ != 0;
  }
  int wait() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return signalled_ != 0; });
    return signalled_;
  }
  /// The process that sent the signal (kill(2)), 0 when unknown (e.g. a terminal's Ctrl-C).
  pid_t sender() {
    std::lock_guard<std::mutex> lk(mu_);
    return sender_;
  }

 private:
  int fds_[2] = {-1, -1};
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  int signalled_ = 0;
  pid_t sender_ = 0;
};

// The ranks other than 0 of `mpirun -np N k3 serve`: the same model, prefix cache and
// speculation as rank 0, and a scheduler that executes rank 0's step plans until rank 0 stops
// (runtime/step_plan.h). No HTTP, no signal handling of their own: a signal that ends one rank
// ends the group (the launcher), and rank 0 answers its clients.
void serve_follower(const ServeOptions& o) {
  k3cli::set_threads(o.gen.threads);
  const k3::ExpertStreamOptions stream = o.gen.checked_stream_options(o.parallel);
  k3::LoadedModel lm = k3::LoadedModel::open(o.gen.model_dir, o.gen.model_options(), stream);
  k3cli::check_ranks(*lm.checkpoint, *lm.model);
  o.gen.warm_up(lm, {});
  k3::Scheduler::Options so;
  so.n_parallel = o.parallel;
  so.n_ctx = o.gen.n_ctx;
  so.max_queue = o.queue;
  so.step_tokens = o.gen.n_batch;
  so.group = k3cli::world();
  const std::unique_ptr<k3::PrefixCache> cache = o.cache.make(lm);
  so.cache = cache.get();
  (void)k3::model_fingerprint(*lm.checkpoint, *lm.model);  // collective, as on rank 0
  if (!o.slot_save_path.empty()) so.keep_slot_states = true;
  k3::LoadedModel draft;
  so.speculation = o.spec.make_serve(lm, o.gen.model_options(), o.gen.n_ctx, draft);
  const k3::ConstraintCompiler constraints(*lm.tokenizer, lm.stop_ids(), 1);  // as rank 0's
  so.constraints = &constraints;
  k3::Scheduler sched(*lm.model, so);
  sched.wait_stopped();
}

void serve(const ServeOptions& o) {
  if (o.gen.n_predict < -1)
    throw k3::Error("-n/--n-predict: expected -1 (until stop) or >= 1, found " + std::to_string(o.gen.n_predict));
  if (o.gen.n_ctx < 2) throw k3::Error("-c/--ctx-size: expected >= 2, found " + std::to_string(o.gen.n_ctx));
  if (o.parallel < 1) throw k3::Error("-np/--parallel: expected >= 1, found " + std::to_string(o.parallel));
  if (o.queue < 0) throw k3::Error("--queue: expected >= 0, found " + std::to_string(o.queue));
  if (o.port < 0 || o.port > 65535) throw k3::Error("--port: expected 0..65535, found " + std::to_string(o.port));
  k3::server::RequestDefaults defaults;
  defaults.sampling = o.gen.sampler_params();  // validates the sampling flags
  defaults.seed_given = o.gen.seed_given();
  defaults.max_tokens = o.gen.n_predict;
  defaults.allow_forced_output = o.test_forced_output;
  // llama-server's reasoning flags: --reasoning-format none|deepseek|auto (where the reasoning
  // text goes), --reasoning-budget -1|0 (0: thinking off unless a request turns it on).
  if (o.reasoning_format != "none" && o.reasoning_format != "deepseek" && o.reasoning_format != "auto")
    throw k3::Error("--reasoning-format: expected none, deepseek or auto, found '" + o.reasoning_format + "'");
  defaults.reasoning_in_content = o.reasoning_format == "none";
  if (o.reasoning_budget != -1 && o.reasoning_budget != 0)
    throw k3::Error("--reasoning-budget: expected -1 (unrestricted) or 0 (thinking off), found " +
                    std::to_string(o.reasoning_budget) + " (K3 has no token budget for its reasoning)");
  defaults.thinking = o.reasoning_budget != 0;
  if (o.log_format != "text" && o.log_format != "json")
    throw k3::Error("--log-format: expected text or json, found '" + o.log_format + "'");
  std::error_code ec;
  if (!std::filesystem::is_directory(o.gen.model_dir, ec))
    throw k3::Error("-m/--model: '" + o.gen.model_dir + "' is not a directory (expected a K3 checkpoint directory)");
  // The directories whose files k3 reads back are checked before the model is loaded.
  if (!o.slot_save_path.empty()) k3::check_private_dir(o.slot_save_path, "--slot-save-path");
  if (!o.cache.dir.empty() && !o.cache.no_cache) k3::check_private_dir(o.cache.dir, "--cache-dir");
  if (!k3cli::is_rank0()) return serve_follower(o);
  k3cli::set_threads(o.gen.threads);
  std::signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not kill the server
  const int n_ranks = k3cli::world()->size();

  // Keys from files keep them off the command line (ps); the policy holds their SHA-256 only.
  std::vector<std::string> api_keys = o.api_keys, metrics_keys = o.metrics_keys;
  for (const std::string& f : o.api_key_files)
    for (std::string& k : k3::server::read_key_file("--api-key-file", f)) api_keys.push_back(std::move(k));
  for (const std::string& f : o.metrics_key_files)
    for (std::string& k : k3::server::read_key_file("--metrics-key-file", f)) metrics_keys.push_back(std::move(k));
  const k3::server::PolicyConfig policy =
      k3::server::make_policy(api_keys, metrics_keys, o.host, o.allowed_hosts, o.cors_origins,
                              k3::server::parse_cache_partition(o.cache_partition));
  api_keys.clear();
  metrics_keys.clear();

  SignalWaiter signals;
  k3::server::ServerConfig cfg;
  cfg.host = o.host;
  cfg.port = o.port;
  cfg.policy = policy;
  cfg.http_threads =
      o.http_threads > 0 ? o.http_threads : static_cast<int>(std::min<int64_t>(o.parallel + o.queue + 8, 256));
  cfg.read_timeout_s = o.timeout_s;
  cfg.write_timeout_s = o.timeout_s;
  cfg.limits = o.conn;
  cfg.log_json = o.log_format == "json";
  cfg.limits.header_timeout = std::chrono::seconds(o.header_timeout_s);
  cfg.limits.body_timeout = std::chrono::seconds(o.body_timeout_s);
  k3::server::HttpServer http(cfg);
  http.bind();
  http.start();
  std::fprintf(stderr, "k3 serve: listening on http://%s:%d (loading the model)\n", o.host.c_str(), http.port());
  std::fprintf(
      stderr, "k3 serve: %zu API key(s), /metrics %s, cache partition %s, CORS origins: %zu, extra hosts: %zu\n",
      policy.api_keys.size(),
      !policy.metrics_keys.empty() ? "needs a metrics key"
      : !policy.api_keys.empty()   ? "needs an API key"
                                   : "open",
      k3::server::cache_partition_name(policy.partition), policy.cors_origins.size(), policy.allowed_hosts.size());

  const k3::ExpertStreamOptions stream = o.gen.checked_stream_options(o.parallel);  // memory plan
  k3::LoadedModel lm = k3::LoadedModel::open(o.gen.model_dir, o.gen.model_options(), stream);
  k3cli::check_ranks(*lm.checkpoint, *lm.model);
  {
    k3cli::ProgressBar progress;  // a page-in that takes over a second (stderr)
    if (const std::optional<k3::PageInStats> w = o.gen.warm_up(lm, progress.fn())) {
      progress.finish();
      std::fprintf(stderr, "k3 serve: page-in: %s of mapped weights, %s of it already in RAM, in %.2f s\n",
                   mib(w->bytes).c_str(), mib(w->resident_bytes).c_str(), w->seconds);
    }
  }
  k3::Scheduler::Options so;
  so.n_parallel = o.parallel;
  so.n_ctx = o.gen.n_ctx;
  so.max_queue = o.queue;
  so.step_tokens = o.gen.n_batch;
  so.log = [](const std::string& line) { std::fprintf(stderr, "k3 serve: %s\n", line.c_str()); };
  k3::server::HandleRegistry handles;
  so.group = k3cli::world();
  // A failed group (a rank gone, a step that differs): the running requests get 503 before
  // the ranks end (Comm::abort).
  so.group_failed = [&handles](const std::string& why) { fail_running(handles, why); };
  // The prefix cache is shared by every slot and outlives the scheduler (its destructor writes
  // the RAM blocks to --cache-dir, so a restart is served from there).
  const std::unique_ptr<k3::PrefixCache> cache = o.cache.make(lm);
  so.cache = cache.get();
  std::string fingerprint = k3::model_fingerprint(*lm.checkpoint, *lm.model);
  if (!o.slot_save_path.empty()) so.keep_slot_states = true;
  // Speculative decoding: one drafter per sequence; the draft model (if any) outlives the scheduler.
  k3::LoadedModel draft;
  so.speculation = o.spec.make_serve(lm, o.gen.model_options(), o.gen.n_ctx, draft);
  auto sched = std::make_unique<k3::Scheduler>(*lm.model, so);
  std::fprintf(stderr, "k3 serve: speculative decoding: %s\n", o.spec.describe().c_str());
  if (cache)
    std::fprintf(stderr,
                 "k3 serve: prefix cache: RAM %s, blocks of %lld tokens, a KDA snapshot (%s) every %lld blocks "
                 "and at each prompt's last block%s\n",
                 mib(cache->options().ram_bytes).c_str(), static_cast<long long>(cache->options().block_tokens),
                 mib(cache->snapshot_bytes()).c_str(), static_cast<long long>(cache->snapshot_every()),
                 o.cache.dir.empty()
                     ? ""
                     : (", disk tier " + o.cache.dir + " (" + mib(cache->options().disk_bytes) + ")").c_str());
  else std::fprintf(stderr, "k3 serve: prefix cache: off\n");
  const uint64_t slot = sched->slot_bytes(), total = slot * static_cast<uint64_t>(o.parallel);
  const uint64_t ram = physical_ram_bytes();
  std::fprintf(stderr, "k3 serve: sequence state %s per slot x %lld slots = %s (context %lld tokens%s; RAM %s)\n",
               mib(slot).c_str(), static_cast<long long>(o.parallel), mib(total).c_str(),
               static_cast<long long>(o.gen.n_ctx),
               !so.speculation                 ? ""
               : so.speculation->drafter_bytes ? ", with the verify window's KDA records and the draft model's state"
                                               : ", with the verify window's KDA records",
               mib(ram).c_str());
  if (ram > 0 && static_cast<double>(slot) * static_cast<double>(o.parallel) > static_cast<double>(ram)) {
    sched.reset();
    http.stop();
    throw k3::Error("-np/--parallel x -c/--ctx-size: " + std::to_string(o.parallel) + " slots need " + mib(total) +
                    " of sequence state, more than the " + mib(ram) + " of physical RAM (lower -np or -c)");
  }

  k3::server::Metrics metrics;
  std::unique_ptr<k3::vision::VisionTower> tower;  // outlives ctx, which points at it
  k3::server::ServeContext ctx;
  ctx.tok = lm.tokenizer.get();
  ctx.scheduler = sched.get();
  ctx.stop_ids = lm.stop_ids();
  ctx.n_ctx = o.gen.n_ctx;
  ctx.n_ranks = n_ranks;
  ctx.model_id =
      !o.alias.empty() ? o.alias : std::filesystem::path(o.gen.model_dir).lexically_normal().filename().string();
  if (ctx.model_id.empty()) ctx.model_id = std::filesystem::absolute(o.gen.model_dir).parent_path().filename().string();
  ctx.defaults = defaults;
  ctx.metrics = &metrics;
  ctx.cache = cache.get();
  ctx.slot_save_path = o.slot_save_path;
  ctx.fingerprint = fingerprint;
  ctx.max_tokenize_tokens = o.max_tokenize_tokens;
  ctx.handles = &handles;
  ctx.policy = &policy;
  // Images: the tower of a checkpoint that has one (bound to its mapping; runs per request in
  // the runtime, image_prompt.h); a text-only checkpoint refuses image parts.
  if (lm.checkpoint->config().vision) {
    tower = std::make_unique<k3::vision::VisionTower>(*lm.checkpoint);
    ctx.image_config = k3::vision::ImagePreprocessConfig::for_model_dir(o.gen.model_dir);
  }
  ctx.vision = tower.get();
  ctx.image_limits.max_bytes = o.max_image_bytes;
  ctx.image_limits.max_source_pixels = o.max_image_pixels;
  ctx.image_parts.max_bytes = o.max_image_bytes;
  ctx.image_parts.max_images = o.max_images;
  ctx.hidden_size = lm.model->config().hidden_size;
  // Structured outputs (response_format, grammar): one compiler for the tokenizer, its cache
  // shared by the requests; a constrained answer ends on the model's stop ids.
  const k3::ConstraintCompiler constraints(*lm.tokenizer, lm.stop_ids(), 1);
  ctx.constraints = &constraints;
  k3::server::ResponseStore responses(static_cast<std::size_t>(o.responses_store));
  ctx.responses = &responses;
  http.set_ready(&ctx);
  std::string sampling = defaults.sampling.describe();
  if (!defaults.seed_given && sampling.rfind(" | seed") != std::string::npos)
    sampling = sampling.substr(0, sampling.rfind(" | seed")) + " | seed: per request (random unless given)";
  std::fprintf(stderr, "k3 serve: ready: model '%s' (load %.0f ms) | %s | -np %lld -c %lld --queue %lld%s\n",
               ctx.model_id.c_str(), lm.load_ms, sampling.c_str(), static_cast<long long>(o.parallel),
               static_cast<long long>(o.gen.n_ctx), static_cast<long long>(o.queue),
               n_ranks > 1 ? (" | " + std::to_string(n_ranks) + " ranks").c_str() : "");
  std::fprintf(stderr,
               "k3 serve: -c %lld is the context of each of the %lld slots (llama-server's -c is the total, "
               "divided among its slots: the same memory there is -c %lld)\n",
               static_cast<long long>(o.gen.n_ctx), static_cast<long long>(o.parallel),
               static_cast<long long>(o.gen.n_ctx * o.parallel));

  const int sig = signals.wait();
  if (n_ranks > 1 && signals.sender() != 0 && signals.sender() == getppid()) {
    // The launcher (mpirun, orted, srun's step daemon) signals rank 0 when it ends the job: a
    // rank died or the whole job is being stopped. The other ranks are gone or going, so the
    // running requests cannot finish: answer them and end with an error status.
    std::fprintf(stderr, "k3 serve: %s from the launcher (pid %d): the group of ranks is ending\n",
                 sig == SIGINT ? "SIGINT" : "SIGTERM", static_cast<int>(signals.sender()));
    http.stop_accepting();
    fail_running(handles, "the group of ranks is ending (a rank failed or the launcher stopped the job)");
    std::fflush(stderr);
    std::_Exit(1);
  }
  std::fprintf(stderr, "k3 serve: %s: stopping (finishing running requests, at most %d s)\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM", o.shutdown_timeout_s);
  http.stop_accepting();
  // Bounded grace: after the timeout every live sequence is cancelled. The registry misses a
  // sequence submitted but not yet registered (submit_request adds it after submit() returns),
  // so the scheduler is told to cancel its queue and slots too.
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lk(mu);
    if (!cv.wait_for(lk, std::chrono::seconds(o.shutdown_timeout_s), [&] { return done; })) {
      std::fprintf(stderr, "k3 serve: grace period over: cancelling the running requests\n");
      handles.cancel_all();
      sched->shutdown(/*finish=*/false);
    }
  });
  sched->shutdown(/*finish=*/true);
  {
    std::lock_guard<std::mutex> lk(mu);
    done = true;
  }
  cv.notify_all();
  watchdog.join();
  http.stop();
  sched.reset();
  std::fprintf(stderr, "k3 serve: stopped\n");
}

k3cli::Registrar reg(
    "serve", "OpenAI-compatible HTTP server (llama-server flags): /v1/chat/completions, /v1/completions, ...",
    [](CLI::App* sub) {
      auto o = std::make_shared<ServeOptions>();
      o->gen.n_predict = -1;
      o->gen.add_to(sub);
      sub->get_option("-n")->description(
          "default max_tokens of a request (-1 = until a stop token or the context is full)");
      sub->get_option("-c")->description("context per sequence in tokens (prompt + generated)");
      sub->get_option("-b")->description("tokens per engine step (decode ids + prefill pieces)");
      sub->get_option("--seed")->description(
          "RNG seed of requests that give none (default: a random seed per request)");
      sub->add_option("--host", o->host, "address to listen on")->capture_default_str();
      sub->add_option("--port", o->port, "TCP port (0 = any free port)")->capture_default_str();
      sub->add_option("--parallel", o->parallel, "sequences decoded together (slots); -np N is the same")
          ->capture_default_str();
      sub->add_option("--queue", o->queue, "requests that may wait for a slot (more get 429)")->capture_default_str();
      sub->add_option("--api-key", o->api_keys,
                      "require Authorization: Bearer KEY (repeatable: any of the keys; not for "
                      "/health and the chat page)")
          ->allow_extra_args(false);
      sub->add_option("--api-key-file", o->api_key_files,
                      "file of API keys, one per line (# comments), kept off the command line; "
                      "refused when empty, unreadable or writable by others (repeatable)")
          ->allow_extra_args(false);
      sub->add_option("--metrics-key", o->metrics_keys,
                      "/metrics needs this key (and no API key opens it); without it /metrics needs "
                      "an API key when keys are set (repeatable)")
          ->allow_extra_args(false);
      sub->add_option("--metrics-key-file", o->metrics_key_files,
                      "file of metrics keys, one per line (as --api-key-file)")
          ->allow_extra_args(false);
      sub->add_option("--allowed-host", o->allowed_hosts,
                      "host name accepted in the Host header besides IP addresses, localhost and "
                      "--host (DNS-rebinding protection; * = any; repeatable)")
          ->allow_extra_args(false);
      sub->add_option("--cors-origin", o->cors_origins,
                      "web origin (scheme://host[:port]) whose pages may call the API (CORS; * = any; "
                      "repeatable); other cross-origin requests get 403")
          ->allow_extra_args(false);
      sub->add_option("--cache-partition", o->cache_partition,
                      "prefix-cache partitions: none, key (one per API key, when 2+ keys are set) or "
                      "user (per key and OpenAI `user` field): no cache hit crosses a partition")
          ->capture_default_str();
      sub->add_option("--alias", o->alias, "model id served (default: the model directory's name)");
      sub->add_option("--http-threads", o->http_threads,
                      "HTTP request threads kept ready (0 = parallel + queue + 8, at most 256); more start on "
                      "demand, up to --max-connections")
          ->capture_default_str();
      sub->add_option("--timeout", o->timeout_s, "socket read/write timeout in seconds")
          ->capture_default_str()
          ->check(CLI::PositiveNumber);
      sub->add_option("--max-connections", o->conn.max_connections,
                      "open HTTP connections allowed overall (more are answered 503 and closed)")
          ->capture_default_str()
          ->check(CLI::PositiveNumber);
      sub->add_option("--max-connections-per-client", o->conn.max_connections_per_client,
                      "open HTTP connections allowed per client IP (more are answered 429 and closed)")
          ->capture_default_str()
          ->check(CLI::PositiveNumber);
      sub->add_option("--header-timeout", o->header_timeout_s,
                      "seconds a request's line and headers may take to arrive, in all")
          ->capture_default_str()
          ->check(CLI::PositiveNumber);
      sub->add_option("--body-timeout", o->body_timeout_s, "seconds a request's body may take to arrive, in all")
          ->capture_default_str()
          ->check(CLI::PositiveNumber);
      sub->add_option("--shutdown-timeout", o->shutdown_timeout_s,
                      "seconds running requests may take to finish after SIGINT/SIGTERM")
          ->capture_default_str()
          ->check(CLI::NonNegativeNumber);
      sub->add_flag("--test-forced-output", o->test_forced_output,
                    "testing only: accept \"k3_forced_output\" (text with K3 markers, or ids) in "
                    "requests, emitted instead of sampled tokens");
      o->cache.add_to(sub);
      o->spec.add_to(sub);
      sub->add_option("--slot-save-path", o->slot_save_path,
                      "directory for POST /slots/{id}?action=save|restore files (slots then keep "
                      "their last sequence's state; it must be this user's and not writable by every user)");
      sub->add_option("--max-tokenize-tokens", o->max_tokenize_tokens,
                      "ids one POST /tokenize may produce (more: 413); the server's /tokenize "
                      "requests together reserve at most twice this (more: 429)")
          ->capture_default_str()
          ->check(CLI::PositiveNumber);
      sub->add_option("--max-image-bytes", o->max_image_bytes,
                      "bytes of one image of a chat request (its data: URL decoded; more: 413)")
          ->capture_default_str()
          ->check(CLI::PositiveNumber);
      sub->add_option("--max-image-pixels", o->max_image_pixels,
                      "source pixels (width x height) of one image (more: 400, refused from its header)")
          ->capture_default_str()
          ->check(CLI::PositiveNumber);
      sub->add_option("--max-images", o->max_images, "images in one chat request (more: 413)")
          ->capture_default_str()
          ->check(CLI::PositiveNumber);
      sub->add_option("--responses-store", o->responses_store,
                      "POST /v1/responses answers kept in memory for previous_response_id (least recently "
                      "used dropped first; 0 = none)")
          ->capture_default_str()
          ->check(CLI::NonNegativeNumber);
      sub->add_option("--reasoning-format", o->reasoning_format,
                      "where K3's reasoning goes (llama-server's flag): auto or deepseek = "
                      "reasoning_content / reasoning items / thinking blocks, none = in the content text")
          ->capture_default_str();
      sub->add_option("--reasoning-budget", o->reasoning_budget,
                      "-1 = thinking as the request says (on by default), 0 = thinking off unless a request "
                      "turns it on (llama-server's flag; K3 has no other budget)")
          ->capture_default_str();
      sub->add_option("--log-format", o->log_format, "request log lines on stderr: text or json (one object a line)")
          ->capture_default_str();
      sub->callback([o] { serve(*o); });
    });

}  // namespace
