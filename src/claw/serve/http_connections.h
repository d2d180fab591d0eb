// The HTTP server's connections, guarded (serve/http_server.cc's transport).
//
// cpp-httplib answers each connection on a worker thread that reads the
// request with a per-read timeout only, so a client that sends half a header,
// or promises a body it never sends, holds a worker for as long as it likes,
// and a fixed pool of workers is exhausted by a few hundred such clients
// (then /health times out). GuardedServer replaces the library's connection
// loop:
//
//   - one thread per connection (no pool to exhaust), up to
//     max_connections in total and max_connections_per_client from one
//     address; beyond them the connection gets 503 or 429 at once and is
//     closed;
//   - the request head must arrive within header_timeout_s of its first
//     byte and be at most 64 KiB; body reads time out after read_timeout_s
//     of silence;
//   - Content-Length and chunk sizes are checked as they are read, before
//     the body: a negative, malformed or overflowing length, or one over
//     max_body_bytes, fails the read at once (413 or 400) instead of waiting
//     for bytes that never come;
//   - client_gone() tells a handler, on the connection's own thread,
//     whether its client has closed the connection (a non-streaming request
//     then cancels its generation).
#pragma once

#include <httplib.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace claw::serve {

struct ConnectionLimits {
  int64_t max_connections = 1024;            // --max-connections
  int64_t max_connections_per_client = 512;  // --max-connections-per-client
  double header_timeout_s = 5;               // --header-timeout
  double read_timeout_s = 30;                // a body read or a write silent this long fails
  int64_t max_body_bytes = 8 << 20;          // --max-body-size
};

class GuardedServer final : public httplib::Server {
 public:
  explicit GuardedServer(const ConnectionLimits& limits);
  // On a request handler's thread: the client closed its end (or reset the
  // connection). False off a connection's thread.
  static bool client_gone();
  int64_t open_connections() const { return open_.load(); }
  int64_t refused_connections() const { return refused_.load(); }

 private:
  bool process_and_close_socket(socket_t sock) override;
  // Counts the connection from `peer`; false (and counts nothing) beyond a limit.
  bool admit(const std::string& peer, std::string* why, int* status);
  void release(const std::string& peer);

  ConnectionLimits limits_;
  std::atomic<int64_t> open_{0}, refused_{0};
  std::mutex mu_;
  std::map<std::string, int64_t> per_client_;
};

}  // namespace claw::serve
