// k3::Comm over MPI: see comm_mpi.h. The only file of k3.cpp that calls MPI.
#include "core/comm_mpi.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"

namespace k3 {

namespace {

std::string mpi_error_text(int code) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS) return "MPI error code " + std::to_string(code);
  return std::string(msg, static_cast<size_t>(len));
}

/// k3::Error "rank R: CALL failed: <MPI's text>" when rc is not MPI_SUCCESS.
void check(int rc, int rank, const char* call) {
  if (rc != MPI_SUCCESS) throw Error("rank " + std::to_string(rank) + ": " + call + " failed: " + mpi_error_text(rc));
}

/// Adds the wall seconds of its scope to `s` (CommCounters::seconds).
class Timed {
 public:
  explicit Timed(double& s) : s_(s), t0_(std::chrono::steady_clock::now()) {}
  ~Timed() { s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }
  Timed(const Timed&) = delete;
  Timed& operator=(const Timed&) = delete;

 private:
  double& s_;
  std::chrono::steady_clock::time_point t0_;
};

class MpiComm final : public Comm {
 public:
  MpiComm() {
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), 0, "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &size_), rank_, "MPI_Comm_size");
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (MPI_Get_library_version(v, &len) == MPI_SUCCESS) {
      std::string s(v, static_cast<size_t>(len));
      s = s.substr(0, std::min(s.find_first_of(",\n"), s.size()));
      transport_ = "MPI (" + s + ")";
    } else {
      transport_ = "MPI";
    }
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string transport() const override { return transport_; }

  void allgatherv(const void* mine, std::span<const int64_t> counts, void* out) override {
    account_allgatherv(counts);
    const Timed timed(counters_.seconds);
    const int n = size_;
    std::vector<int64_t> displ(static_cast<size_t>(n));
    for (int r = 1; r < n; ++r) displ[r] = displ[r - 1] + counts[r - 1];
    auto* dst = static_cast<uint8_t*>(out);
    const bool in_place = mine == dst + displ[rank_];
    // MPI counts are int: when the pieces add up to more than INT_MAX bytes, several rounds, each
    // rank sending the next INT_MAX / size bytes of its piece through a staging block (the same
    // rounds on every rank: the counts are shared).
    const int64_t kRound = std::max<int64_t>(1, INT_MAX / n);
    int64_t largest = 0, all = 0;
    for (int r = 0; r < n; ++r) {
      largest = std::max(largest, counts[r]);
      all += counts[r];
    }
    std::vector<int> rc(static_cast<size_t>(n)), rd(static_cast<size_t>(n));
    if (all <= INT_MAX) {
      for (int r = 0; r < n; ++r) {
        rc[r] = static_cast<int>(counts[r]);
        rd[r] = static_cast<int>(displ[r]);
      }
      check(MPI_Allgatherv(in_place ? MPI_IN_PLACE : mine, rc[rank_], MPI_BYTE, dst, rc.data(), rd.data(), MPI_BYTE,
                           MPI_COMM_WORLD),
            rank_, "MPI_Allgatherv");
      return;
    }
    std::vector<uint8_t> staging;
    for (int64_t off = 0; off < largest; off += kRound) {
      int64_t total = 0;
      for (int r = 0; r < n; ++r) {
        rc[r] = static_cast<int>(std::clamp<int64_t>(counts[r] - off, 0, kRound));
        rd[r] = static_cast<int>(total);
        total += rc[r];
      }
      staging.resize(static_cast<size_t>(total));
      const auto* src = static_cast<const uint8_t*>(mine) + (rc[rank_] ? off : 0);
      check(MPI_Allgatherv(src, rc[rank_], MPI_BYTE, staging.data(), rc.data(), rd.data(), MPI_BYTE, MPI_COMM_WORLD),
            rank_, "MPI_Allgatherv");
      for (int r = 0; r < n; ++r)
        if (rc[r] > 0 && !(in_place && r == rank_))
          std::memcpy(dst + displ[r] + off, staging.data() + rd[r], static_cast<size_t>(rc[r]));
    }
  }

  void broadcast(void* data, int64_t bytes, int root) override {
    account_broadcast(bytes, root);
    const Timed timed(counters_.seconds);
    auto* p = static_cast<uint8_t*>(data);
    for (int64_t off = 0; off < bytes; off += INT_MAX) {
      const int n = static_cast<int>(std::min<int64_t>(INT_MAX, bytes - off));
      check(MPI_Bcast(p + off, n, MPI_BYTE, root, MPI_COMM_WORLD), rank_, "MPI_Bcast");
    }
  }

  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // MPI_Abort does not return; this line keeps [[noreturn]] true
  }

 private:
  int rank_ = 0, size_ = 1;
  std::string transport_;
};

}  // namespace

MpiSession::MpiSession(int* argc, char*** argv) {
  int inited = 0;
  check(MPI_Initialized(&inited), 0, "MPI_Initialized");
  if (inited) throw Error("MPI: MPI_Init_thread: MPI is already initialized in this process");
  int provided = 0;
  check(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided), 0, "MPI_Init_thread");
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), rank, "MPI_Comm_set_errhandler");
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    throw Error("rank " + std::to_string(rank) + ": MPI_Init_thread: the MPI library provides thread level " +
                std::to_string(provided) + ", below MPI_THREAD_SERIALIZED");
  }
  world_ = std::make_shared<MpiComm>();
}

MpiSession::~MpiSession() {
  world_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace k3
