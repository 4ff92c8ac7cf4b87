// GuardedHttpServer: admission, deadlines and the per-connection request loop (see the header).
#include "http_transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "api_error.h"
#include "openai_response.h"

namespace k3::server {
namespace {

using Clock = std::chrono::steady_clock;

// Longest single wait in poll(): a read in the header phase notices a stopped listener this fast.
constexpr int kPollSliceMs = 200;

std::string address_of(const sockaddr_storage& a, int& port) {
  char buf[INET6_ADDRSTRLEN] = {0};
  port = 0;
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &v4->sin_addr, buf, sizeof buf);
    port = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    if (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr)) inet_ntop(AF_INET, &v6->sin6_addr.s6_addr[12], buf, sizeof buf);
    else inet_ntop(AF_INET6, &v6->sin6_addr, buf, sizeof buf);
    port = ntohs(v6->sin6_port);
  }
  return buf;
}

std::string seconds_text(std::chrono::milliseconds d) {
  char b[32];
  std::snprintf(b, sizeof b, "%g s", static_cast<double>(d.count()) / 1000.0);
  return b;
}

// One connection's socket as an httplib::Stream: buffered reads that wait at most the per-read
// timeout and never past the current request's deadline (headers, then body).
class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(socket_t sock, time_t read_s, time_t read_us, time_t write_s, time_t write_us,
                   const ConnectionLimits& limits, const std::atomic<socket_t>& listener, std::string remote_ip,
                   int remote_port, std::string local_ip, int local_port)
      : sock_(sock),
        read_timeout_(std::chrono::seconds(read_s) + std::chrono::microseconds(read_us)),
        write_timeout_(std::chrono::seconds(write_s) + std::chrono::microseconds(write_us)),
        limits_(limits),
        listener_(listener),
        remote_ip_(std::move(remote_ip)),
        remote_port_(remote_port),
        local_ip_(std::move(local_ip)),
        local_port_(local_port),
        buf_(kBufSize) {}

  /// A request begins (its first bytes are readable): the header deadline starts.
  void start_request() {
    start_ = Clock::now();
    deadline_ = start_ + limits_.header_timeout;
    in_headers_ = true;
    timed_out_.clear();
    close_after_response_ = false;
  }
  /// The headers are parsed: the body deadline starts.
  void start_body() {
    deadline_ = Clock::now() + limits_.body_timeout;
    in_headers_ = false;
  }
  const std::string& timed_out() const { return timed_out_; }
  /// The response being written says "Connection: close": no request follows it.
  void close_after_response() { close_after_response_ = true; }
  bool closing() const { return close_after_response_; }

  bool is_readable() const override { return off_ < len_; }
  bool wait_readable() const override { return wait_input(); }
  bool wait_writable() const override {
    pollfd p{sock_, POLLOUT, 0};
    int r;
    do
      r = ::poll(&p, 1,
                 static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(write_timeout_).count()));
    while (r < 0 && errno == EINTR);
    return r > 0 && !(p.revents & (POLLERR | POLLNVAL));
  }
  bool is_peer_alive() const override {
    pollfd p{sock_, POLLIN, 0};
    const int r = ::poll(&p, 1, 0);
    if (r == 0) return true;
    if (r < 0) return errno == EINTR;
    char c;
    return ::recv(sock_, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }

  ssize_t read(char* ptr, size_t size) override {
    if (off_ < len_) {
      const size_t n = std::min(size, len_ - off_);
      std::memcpy(ptr, buf_.data() + off_, n);
      off_ += n;
      return static_cast<ssize_t>(n);
    }
    if (!wait_input()) return -1;
    off_ = len_ = 0;
    if (size >= kBufSize) return recv_some(ptr, size);
    const ssize_t n = recv_some(buf_.data(), kBufSize);
    if (n <= 0) return n;
    const size_t k = std::min(size, static_cast<size_t>(n));
    std::memcpy(ptr, buf_.data(), k);
    off_ = k;
    len_ = static_cast<size_t>(n);
    return static_cast<ssize_t>(k);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!wait_writable()) return -1;
    ssize_t n;
    do n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = remote_ip_;
    port = remote_port_;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = local_ip_;
    port = local_port_;
  }
  socket_t socket() const override { return sock_; }
  time_t duration() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_).count();
  }
  void set_read_timeout(time_t sec, time_t usec) override {
    read_timeout_ = std::chrono::seconds(sec) + std::chrono::microseconds(usec);
  }
  const char* buffered_data(size_t& size) const override {
    size = len_ - off_;
    return size ? buf_.data() + off_ : nullptr;
  }
  void consume_buffered(size_t size) override { off_ += std::min(size, len_ - off_); }

 private:
  static constexpr size_t kBufSize = 4096;

  ssize_t recv_some(char* p, size_t n) {
    ssize_t r;
    do r = ::recv(sock_, p, n, 0);
    while (r < 0 && errno == EINTR);
    return r;
  }

  // Waits until input (or an error / hang-up, which recv then reports) is there, at most the
  // per-read timeout and never past the deadline; while reading headers, also stops when the
  // server stops listening. Records why it gave up in timed_out_.
  bool wait_input() const {
    const auto now0 = Clock::now();
    const auto per_read = now0 + std::chrono::duration_cast<Clock::duration>(read_timeout_);
    const auto until = std::min(per_read, deadline_);
    for (;;) {
      const auto now = Clock::now();
      if (now >= until) {
        if (deadline_ <= per_read) {
          timed_out_ = in_headers_ ? "the request line and headers did not arrive within " +
                                         seconds_text(limits_.header_timeout) + " (--header-timeout)"
                                   : "the request body did not arrive within " + seconds_text(limits_.body_timeout) +
                                         " (--body-timeout)";
        } else {
          timed_out_ = "no data from the client for " +
                       seconds_text(std::chrono::duration_cast<std::chrono::milliseconds>(read_timeout_)) +
                       " (--timeout)";
        }
        return false;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count() + 1;
      pollfd p{sock_, POLLIN, 0};
      const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, kPollSliceMs)));
      if (r > 0) return true;
      if (r < 0 && errno != EINTR) return false;
      if (in_headers_ && listener_.load() == INVALID_SOCKET) return false;
    }
  }

  socket_t sock_;
  std::chrono::microseconds read_timeout_;
  std::chrono::microseconds write_timeout_;
  const ConnectionLimits& limits_;
  const std::atomic<socket_t>& listener_;
  std::string remote_ip_;
  int remote_port_;
  std::string local_ip_;
  int local_port_;
  std::vector<char> buf_;
  size_t off_ = 0, len_ = 0;
  Clock::time_point start_ = Clock::now();
  Clock::time_point deadline_ = Clock::time_point::max();
  bool in_headers_ = true;
  bool close_after_response_ = false;
  mutable std::string timed_out_;
};

thread_local ConnectionStream* t_stream = nullptr;

// Closes a connection after its last response: half-closes, reads what the client still sends
// for at most `drain` (so the close does not turn into a reset that loses the response), closes.
void drain_and_close(socket_t sock, std::chrono::milliseconds drain) {
  ::shutdown(sock, SHUT_WR);
  char buf[16384];
  size_t total = 0;
  const auto until = Clock::now() + drain;
  while (total < (1u << 20)) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    pollfd p{sock, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::max<long long>(left, 0))) <= 0) break;
    const ssize_t n = ::recv(sock, buf, sizeof buf, MSG_DONTWAIT);
    if (n <= 0) break;
    total += static_cast<size_t>(n);
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
}

}  // namespace

std::string escape_for_log(const std::string& s) {
  static const char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  for (const unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

ConnectionThreads::ConnectionThreads(size_t base_threads, size_t max_threads, size_t max_queued,
                                     std::chrono::seconds idle_exit)
    : base_(std::max<size_t>(1, base_threads)),
      max_(std::max(max_threads, base_)),
      max_queued_(max_queued),
      idle_exit_(idle_exit) {
  std::lock_guard<std::mutex> lk(mu_);
  for (size_t i = 0; i < base_; ++i) spawn();
}

ConnectionThreads::~ConnectionThreads() { shutdown(); }

void ConnectionThreads::spawn() {
  std::thread t([this] { worker(); });
  const auto id = t.get_id();
  threads_.emplace(id, std::move(t));
}

bool ConnectionThreads::enqueue(std::function<void()> fn) {
  std::vector<std::thread> done;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (shutdown_ || jobs_.size() >= max_queued_) return false;
    jobs_.push_back(std::move(fn));
    // Every queued job needs an idle thread of its own.
    if (jobs_.size() > idle_ && threads_.size() < max_) spawn();
    done.swap(finished_);
  }
  cv_.notify_one();
  for (auto& t : done) t.join();
  return true;
}

void ConnectionThreads::worker() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    ++idle_;
    const bool woke = cv_.wait_for(lk, idle_exit_, [this] { return !jobs_.empty() || shutdown_; });
    --idle_;
    if (jobs_.empty()) {
      if (shutdown_ || (!woke && threads_.size() > base_)) break;
      continue;
    }
    auto fn = std::move(jobs_.front());
    jobs_.pop_front();
    lk.unlock();
    fn();
    lk.lock();
  }
  // Runs the remaining jobs first at shutdown (the loop above takes them), then leaves; the
  // thread object is joined by enqueue() or shutdown().
  const auto it = threads_.find(std::this_thread::get_id());
  if (it != threads_.end()) {
    finished_.push_back(std::move(it->second));
    threads_.erase(it);
  }
}

void ConnectionThreads::shutdown() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    shutdown_ = true;
  }
  cv_.notify_all();
  for (;;) {
    std::vector<std::thread> done;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (threads_.empty() && finished_.empty()) break;
      done.swap(finished_);
    }
    for (auto& t : done) t.join();
    if (done.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

GuardedHttpServer::GuardedHttpServer(const ConnectionLimits& limits) : limits_(limits) {
  // httplib answers errors with "Connection: close" but would go on reading requests on the
  // connection (the unread rest of a refused body among them); the loop below stops instead.
  set_header_writer([](httplib::Stream& strm, httplib::Headers& headers) {
    if (t_stream) {
      const auto r = headers.equal_range("Connection");
      for (auto it = r.first; it != r.second; ++it) {
        std::string v = it->second;
        std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
        if (v.find("close") != std::string::npos) t_stream->close_after_response();
      }
    }
    return httplib::detail::write_headers(strm, headers);
  });
}

void GuardedHttpServer::headers_read() {
  if (t_stream) t_stream->start_body();
}

std::string GuardedHttpServer::timeout_reason() { return t_stream ? t_stream->timed_out() : std::string(); }

bool GuardedHttpServer::admit(const std::string& ip, std::string& refusal, int& status) {
  std::lock_guard<std::mutex> lk(mu_);
  const auto it = per_client_.find(ip);
  const int mine = it == per_client_.end() ? 0 : it->second;
  if (open_ < limits_.max_connections && mine < limits_.max_connections_per_client) {
    ++per_client_[ip];
    ++open_;
    return true;
  }
  if (open_ >= limits_.max_connections) {
    status = 503;
    refusal = "Too many open connections: the server allows " + std::to_string(limits_.max_connections) +
              " (--max-connections); try again later";
  } else {
    status = 429;
    refusal = "Too many open connections from " + ip + ": the server allows " +
              std::to_string(limits_.max_connections_per_client) + " per client (--max-connections-per-client)";
  }
  ++refused_since_log_;
  const auto now = Clock::now();
  if (now - last_refusal_log_ >= std::chrono::seconds(1)) {
    std::fprintf(stderr, "k3 serve: refused %lld connection(s): %s\n", refused_since_log_, refusal.c_str());
    refused_since_log_ = 0;
    last_refusal_log_ = now;
  }
  return false;
}

void GuardedHttpServer::release(const std::string& ip) {
  std::lock_guard<std::mutex> lk(mu_);
  --open_;
  const auto it = per_client_.find(ip);
  if (it != per_client_.end() && --it->second <= 0) per_client_.erase(it);
}

bool GuardedHttpServer::process_and_close_socket(socket_t sock) {
  sockaddr_storage peer{}, local{};
  socklen_t len = sizeof peer;
  int remote_port = 0, local_port = 0;
  std::string remote_ip, local_ip;
  if (::getpeername(sock, reinterpret_cast<sockaddr*>(&peer), &len) == 0) remote_ip = address_of(peer, remote_port);
  len = sizeof local;
  if (::getsockname(sock, reinterpret_cast<sockaddr*>(&local), &len) == 0) local_ip = address_of(local, local_port);

  std::string refusal;
  int status = 0;
  if (!admit(remote_ip, refusal, status)) {
    const std::string body = error_body(ApiError(status, refusal)).dump();
    const std::string msg = "HTTP/1.1 " + std::to_string(status) + " " + httplib::status_message(status) +
                            "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                            "\r\nRetry-After: 1\r\nConnection: close\r\n\r\n" + body;
    // Non-blocking: a refused client never holds this thread.
    (void)::send(sock, msg.data(), msg.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    drain_and_close(sock, std::chrono::milliseconds(0));
    return false;
  }

  ConnectionStream strm(sock, read_timeout_sec_, read_timeout_usec_, write_timeout_sec_, write_timeout_usec_, limits_,
                        svr_sock_, remote_ip, remote_port, local_ip, local_port);
  t_stream = &strm;
  const bool ret = serve_guarded([&] {
    bool ok = false;
    for (size_t left = keep_alive_max_count_; left > 0; --left) {
      if (!strm.is_readable() && !wait_for_request(sock)) break;
      strm.start_request();
      bool connection_closed = false;
      ok = process_request(strm, remote_ip, remote_port, local_ip, local_port, left == 1, connection_closed, nullptr);
      if (!ok || connection_closed || strm.closing()) break;
    }
    return ok;
  });
  t_stream = nullptr;
  drain_and_close(sock, std::chrono::milliseconds(100));
  release(remote_ip);
  return ret;
}

bool GuardedHttpServer::wait_for_request(socket_t sock) const {
  const auto until = Clock::now() + std::chrono::seconds(keep_alive_timeout_sec_);
  for (;;) {
    if (svr_sock_.load() == INVALID_SOCKET) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{sock, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, kPollSliceMs)));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

}  // namespace k3::server
