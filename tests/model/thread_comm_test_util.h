// A k3::Comm whose ranks are threads of one test process: the expert-parallel split runs in
// one process (no MPI needed, and under ASan), each thread holding one rank's k3::Model.
#pragma once
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/comm.h"

namespace k3test {

/// The state the ranks of one group share: a generation barrier and each rank's posted buffer.
class ThreadGroup {
 public:
  explicit ThreadGroup(int n) : n_(n), posted_(static_cast<size_t>(n), nullptr) {}
  int size() const { return n_; }
  void post(int rank, const void* p) { posted_[static_cast<size_t>(rank)] = p; }
  const void* posted(int rank) const { return posted_[static_cast<size_t>(rank)]; }
  void barrier() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t gen = gen_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++gen_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return gen_ != gen; });
    }
  }

 private:
  int n_;
  std::vector<const void*> posted_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t gen_ = 0;
};

/// Rank `rank` of a ThreadGroup: allgatherv posts this rank's piece, waits for every rank, copies
/// the others' pieces, and waits again before the buffers may change.
class ThreadComm final : public k3::Comm {
 public:
  ThreadComm(std::shared_ptr<ThreadGroup> g, int rank) : g_(std::move(g)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_->size(); }
  std::string transport() const override { return "test threads"; }
  void allgatherv(const void* mine, std::span<const int64_t> counts, void* out) override {
    account_allgatherv(counts);
    g_->post(rank_, mine);
    g_->barrier();
    int64_t off = 0;
    for (int r = 0; r < size(); ++r) {
      auto* dst = static_cast<uint8_t*>(out) + off;
      if (counts[r] > 0 && (r != rank_ || dst != mine)) std::memcpy(dst, g_->posted(r), static_cast<size_t>(counts[r]));
      off += counts[r];
    }
    g_->barrier();
  }
  void broadcast(void* data, int64_t bytes, int root) override {
    account_broadcast(bytes, root);
    g_->post(rank_, data);
    g_->barrier();
    if (rank_ != root && bytes > 0) std::memcpy(data, g_->posted(root), static_cast<size_t>(bytes));
    g_->barrier();
  }
  [[noreturn]] void abort(int) override { std::abort(); }

 private:
  std::shared_ptr<ThreadGroup> g_;
  int rank_;
};

/// Runs fn(rank, comm) on n threads, one per rank of a fresh group; rethrows the first failure.
inline void run_ranks(int n, const std::function<void(int, std::shared_ptr<k3::Comm>)>& fn) {
  auto g = std::make_shared<ThreadGroup>(n);
  std::vector<std::thread> ts;
  std::vector<std::exception_ptr> errs(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      try {
        fn(r, std::make_shared<ThreadComm>(g, r));
      } catch (...) {
        errs[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : ts) t.join();
  for (auto& e : errs)
    if (e) std::rethrow_exception(e);
}

}  // namespace k3test
