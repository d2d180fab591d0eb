#include "claw/serve/http_connections.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <thread>

#include <fmt/format.h>

namespace claw::serve {
namespace {

using Clock = std::chrono::steady_clock;

thread_local int t_connection = -1;  // the socket this thread answers

constexpr size_t kMaxHead = 64 << 10;

// A thread per task, joined at shutdown: connections wait on their clients,
// not on each other (GuardedServer bounds how many there are).
class ThreadPerConnection final : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard lock(mu_);
      ++running_;
    }
    std::thread([this, fn = std::move(fn)] {
      fn();
      std::lock_guard lock(mu_);
      if (--running_ == 0) cv_.notify_all();
    }).detach();
  }
  void shutdown() override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return running_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t running_ = 0;
};

// Milliseconds until `t` (at least 0), for poll().
int ms_until(Clock::time_point t) {
  const auto d = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(d, 0, 1 << 30));
}

bool wait_for(int fd, short events, Clock::time_point until) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, ms_until(until));
    if (r < 0 && errno == EINTR) continue;
    return r > 0 && (p.revents & (events | POLLHUP | POLLERR));
  }
}

std::string address_of(int fd, bool peer, int* port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  const int r = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                     : ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  char host[NI_MAXHOST] = "", serv[NI_MAXSERV] = "";
  if (r != 0 || ::getnameinfo(reinterpret_cast<sockaddr*>(&a), len, host, sizeof host, serv, sizeof serv,
                              NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "";
  if (port) *port = std::atoi(serv);
  return host;
}

// One request's reads and writes on a connection, with the head's deadline
// and the body's framing checked as the bytes pass (see the header).
class GuardedStream final : public httplib::Stream {
 public:
  GuardedStream(int fd, const ConnectionLimits& l)
      : fd_(fd), limits_(l), head_deadline_(Clock::now() + seconds(l.header_timeout_s)) {}

  bool is_readable() const override { return wait_for(fd_, POLLIN, read_deadline()); }
  bool is_writable() const override {
    return !GuardedServer::client_gone() && wait_for(fd_, POLLOUT, Clock::now() + seconds(limits_.read_timeout_s));
  }
  ssize_t read(char* ptr, size_t size) override {
    if (refused_ || !wait_for(fd_, POLLIN, read_deadline())) return -1;
    ssize_t n;
    do n = ::recv(fd_, ptr, size, 0);
    while (n < 0 && errno == EINTR);
    if (n > 0 && !inspect(ptr, static_cast<size_t>(n))) {
      refused_ = true;
      return -1;
    }
    return n;
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!wait_for(fd_, POLLOUT, Clock::now() + seconds(limits_.read_timeout_s))) return -1;
    ssize_t n;
    do n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { ip = address_of(fd_, true, &port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { ip = address_of(fd_, false, &port); }
  socket_t socket() const override { return fd_; }
  // The request's head never completed, or its framing was refused: the
  // connection ends with its answer.
  bool ends_connection() const { return refused_ || !head_done_; }

 private:
  static Clock::duration seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }
  Clock::time_point read_deadline() const {
    const Clock::time_point idle = Clock::now() + seconds(limits_.read_timeout_s);
    return head_done_ ? idle : std::min(idle, head_deadline_);
  }

  // The bytes just read: the head until its blank line (then its framing
  // fields checked), then, for a chunked body, each chunk-size line. False
  // refuses the rest of the request.
  bool inspect(const char* p, size_t n) {
    size_t i = 0;
    if (!head_done_) {
      for (; i < n && !head_done_; ++i) {
        head_ += p[i];
        head_done_ = head_.ends_with("\r\n\r\n");
      }
      if (!head_done_) return head_.size() <= kMaxHead;
      // A bad framing field fails the reads after the head, so that the
      // library answers (413 for a length over the limit, else 400).
      if (!check_head()) {
        refused_ = true;
        return true;
      }
    }
    if (!chunked_) return true;
    for (; i < n; ++i) {
      if (chunk_left_ > 0) {  // inside a chunk's data: skip it
        const size_t skip = std::min<size_t>(chunk_left_, n - i);
        chunk_left_ -= skip;
        i += skip - 1;
        continue;
      }
      const char c = p[i];
      if (c != '\n') {
        if (size_line_.size() < 64) size_line_ += c;
        continue;
      }
      // A chunk-size line (hex, extensions after ';'), or the CRLF that
      // ends a chunk's data.
      std::string line = size_line_.substr(0, size_line_.find(';'));
      size_line_.clear();
      while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
      if (line.empty() || in_trailer_) continue;
      uint64_t size = 0;
      for (char h : line) {
        if (!std::isxdigit(static_cast<unsigned char>(h))) return false;
        size = size * 16 + static_cast<uint64_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                                                                                         : (h | 0x20) - 'a' + 10);
        if (size > static_cast<uint64_t>(limits_.max_body_bytes)) return false;
      }
      body_ += size;
      if (body_ > static_cast<uint64_t>(limits_.max_body_bytes)) return false;
      if (size == 0) in_trailer_ = true;
      chunk_left_ = size;
      // The CRLF after the data is read as an empty line above.
    }
    return true;
  }

  // Content-Length: digits only, at most the body limit. Transfer-Encoding:
  // chunked switches to chunk checking.
  bool check_head() {
    size_t at = head_.find("\r\n");  // past the request line
    while (at != std::string::npos && at + 2 < head_.size()) {
      const size_t end = head_.find("\r\n", at + 2);
      const std::string line = head_.substr(at + 2, end - at - 2);
      at = end;
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string name = line.substr(0, colon), value = line.substr(colon + 1);
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
      value.erase(0, value.find_first_not_of(" \t"));
      while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.pop_back();
      if (name == "content-length") {
        if (value.empty() || value.size() > 18 ||
            !std::all_of(value.begin(), value.end(), [](unsigned char c) { return std::isdigit(c); }) ||
            std::stoll(value) > limits_.max_body_bytes)
          return false;
      } else if (name == "transfer-encoding") {
        std::transform(value.begin(), value.end(), value.begin(), [](unsigned char c) { return std::tolower(c); });
        chunked_ = value.find("chunked") != std::string::npos;
      }
    }
    return true;
  }

  int fd_;
  const ConnectionLimits& limits_;
  Clock::time_point head_deadline_;
  std::string head_, size_line_;
  bool head_done_ = false, chunked_ = false, in_trailer_ = false, refused_ = false;
  uint64_t chunk_left_ = 0, body_ = 0;
};

// A whole response written straight to the socket (a refused connection:
// no request is read).
void refuse(int fd, int status, const std::string& message) {
  const std::string body = fmt::format(R"({{"error":{{"message":"{}","type":"{}","param":null,"code":null}}}})",
                                       message, status == 429 ? "rate_limit_exceeded" : "server_error");
  const std::string out = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
      status, status == 429 ? "Too Many Requests" : "Service Unavailable", body.size(), body);
  (void)::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace

GuardedServer::GuardedServer(const ConnectionLimits& limits) : limits_(limits) {
  new_task_queue = [] { return new ThreadPerConnection; };
  set_payload_max_length(static_cast<size_t>(limits.max_body_bytes));
}

bool GuardedServer::client_gone() {
  if (t_connection < 0) return false;
  pollfd p{t_connection, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

bool GuardedServer::admit(const std::string& peer, std::string* why, int* status) {
  std::lock_guard lock(mu_);
  if (open_.load() >= limits_.max_connections) {
    *status = 503;
    *why = fmt::format("the server has {} connections open (--max-connections)", limits_.max_connections);
    return false;
  }
  int64_t& mine = per_client_[peer];
  if (mine >= limits_.max_connections_per_client) {
    if (mine == 0) per_client_.erase(peer);
    *status = 429;
    *why = fmt::format("{} has {} connections open (--max-connections-per-client)", peer,
                       limits_.max_connections_per_client);
    return false;
  }
  ++mine;
  ++open_;
  return true;
}

void GuardedServer::release(const std::string& peer) {
  std::lock_guard lock(mu_);
  if (--per_client_[peer] <= 0) per_client_.erase(peer);
  --open_;
}

bool GuardedServer::process_and_close_socket(socket_t sock) {
  const std::string peer = address_of(sock, true, nullptr);
  std::string why;
  int status = 0;
  bool ok = false;
  if (!admit(peer, &why, &status)) {
    ++refused_;
    refuse(sock, status, why);
  } else {
    t_connection = sock;
    // Keep-alive: up to keep_alive_max_count_ requests, each within
    // keep_alive_timeout_sec_ of the last, while the server runs.
    for (size_t left = keep_alive_max_count_; left > 0 && svr_sock_ != INVALID_SOCKET; --left) {
      const Clock::time_point idle_until = Clock::now() + std::chrono::seconds(keep_alive_timeout_sec_);
      bool readable = false;
      while (svr_sock_ != INVALID_SOCKET && Clock::now() < idle_until)
        if ((readable = wait_for(sock, POLLIN, std::min(idle_until, Clock::now() + std::chrono::milliseconds(100)))))
          break;
      if (!readable) break;
      GuardedStream strm(sock, limits_);
      bool closed = false;
      ok = process_request(strm, left == 1, closed, nullptr);
      if (!ok || closed || strm.ends_connection()) break;
    }
    t_connection = -1;
    release(peer);
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace claw::serve
