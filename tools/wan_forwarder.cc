// wan_forwarder: a long-haul link between two network namespaces, in user
// space (this kernel has no netem). It owns one TAP device in each of two
// namespaces (each TAP is then put on that side's bridge) and forwards every
// Ethernet frame from one to the other after the link's serialisation time
// and propagation delay:
//
//   sent  = max(now, the previous frame's sent) + bytes * 8 / rate
//   leave = sent + delay
//
// per direction, so back-to-back frames queue behind each other at the
// link's rate while the delay adds once. A queue over --queue-bytes drops
// the frame, as a router's buffer would (TCP backs off). SIGUSR1 toggles a
// black hole (every frame dropped: a link that stops passing packets);
// SIGUSR2 writes the counts so far to --stats; SIGTERM/SIGINT end it,
// writing them too. Counts per direction: frames and bytes forwarded (whole
// Ethernet frames), their TCP payload (what the endpoints sent, without
// Ethernet, IPv4 and TCP headers, the MPI traffic a test compares with a
// closed form), and frames dropped.
//
//   wan_forwarder --netns-a dc1sw --netns-b dc2sw [--tap wan0] --delay-ms 10.5 --rate-mbit 1000 [--stats F]
//
// One thread, epoll over the two TAPs, a signalfd and a timerfd armed for
// the earliest departure.
//
// The TAPs carry a virtio-net header and offer TSO/checksum offload, so the
// kernel hands over the hosts' TCP segments as they were built (GSO frames
// of up to 64 KiB) and takes them back the same way: one read and one write
// per 64 KiB instead of per 1,514-byte frame, which keeps the forwarder's
// CPU out of the link's rate on a machine whose cores also train. The link
// still paces and counts the wire as a 1,500-byte MTU would see it: a GSO
// frame is charged, and counted, as its segments, each with its own headers.
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

namespace {

using ns_t = int64_t;  // CLOCK_MONOTONIC nanoseconds

ns_t now_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<ns_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "wan_forwarder: error: %s\n", what.c_str());
  std::exit(1);
}

// The virtio-net header a TAP with IFF_VNET_HDR puts before each frame
// (<linux/virtio_net.h>'s struct virtio_net_hdr; that header does not parse
// as C++, it has a member named `class`).
struct VnetHdr {
  uint8_t flags, gso_type;  // gso_type 0: not a GSO frame
  uint16_t hdr_len, gso_size, csum_start, csum_offset;
};
static_assert(sizeof(VnetHdr) == 10);

// A TAP device named `name` inside network namespace `netns` (the fd stays
// valid whichever namespace this thread is in afterwards).
int open_tap(const std::string& netns, const std::string& name) {
  const std::string path = "/var/run/netns/" + netns;
  const int ns = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (ns < 0) die(fmt::format("--netns {}: cannot open {}: {}", netns, path, std::strerror(errno)));
  if (setns(ns, CLONE_NEWNET) != 0) die(fmt::format("--netns {}: setns: {} (run as root)", netns, std::strerror(errno)));
  close(ns);
  const int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) die(fmt::format("/dev/net/tun: {}", std::strerror(errno)));
  ifreq ifr{};
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
  std::snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name.c_str());
  if (ioctl(fd, TUNSETIFF, &ifr) != 0)
    die(fmt::format("TAP {} in namespace {}: {}", name, netns, std::strerror(errno)));
  const int hdr = sizeof(VnetHdr);
  if (ioctl(fd, TUNSETVNETHDRSZ, &hdr) != 0 ||
      ioctl(fd, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN) != 0)
    die(fmt::format("TAP {} in namespace {}: offloads: {}", name, netns, std::strerror(errno)));
  return fd;
}

// A frame as a 1,500-byte MTU wire carries it: segments, bytes, TCP payload.
struct Wire {
  uint64_t frames, bytes, tcp_payload;
};

struct Frame {
  ns_t leave;
  Wire wire;
  std::vector<uint8_t> bytes;  // virtio-net header + Ethernet frame, as read
};

// One direction of the link.
struct Direction {
  int in = -1, out = -1;
  std::deque<Frame> queue;
  size_t queued_bytes = 0;
  ns_t last_sent = 0;
  uint64_t frames = 0, bytes = 0, tcp_payload = 0, dropped = 0;
};

// Bytes of TCP payload in an Ethernet frame (0 for anything else); of a GSO
// frame, the whole payload (its IPv4 total length covers every segment).
uint64_t tcp_payload(const uint8_t* f, size_t n) {
  if (n < 14 + 20 || f[12] != 0x08 || f[13] != 0x00) return 0;  // IPv4
  const uint8_t* ip = f + 14;
  const size_t ihl = static_cast<size_t>(ip[0] & 0x0f) * 4, total = static_cast<size_t>(ip[2]) << 8 | ip[3];
  if (ip[9] != 6 || n < 14 + ihl + 20 || total < ihl + 20) return 0;  // TCP
  const size_t doff = static_cast<size_t>(ip[ihl + 12] >> 4) * 4;
  return total >= ihl + doff ? total - ihl - doff : 0;
}

// What a frame read from a TAP (virtio-net header, then the Ethernet frame)
// is on a 1,500-byte MTU wire: its segments and their bytes. A GSO frame of
// P bytes of TCP payload cut at gso_size is ceil(P / gso_size) segments, each
// with the frame's headers (Ethernet + IP + TCP: the frame's length less P).
Wire on_the_wire(const uint8_t* buf, size_t n) {
  VnetHdr h;
  std::memcpy(&h, buf, sizeof h);
  const uint8_t* f = buf + sizeof h;
  const size_t len = n - sizeof h;
  const uint64_t payload = tcp_payload(f, len);
  if (h.gso_type == 0 || h.gso_size == 0 || payload == 0) return {1, len, payload};
  const uint64_t segments = (payload + h.gso_size - 1) / h.gso_size;
  return {segments, payload + segments * (len - payload), payload};
}

}  // namespace

int main(int argc, char** argv) {
  std::string netns_a, netns_b, tap = "wan0", stats;
  double delay_ms = 0, rate_mbit = 1000;
  size_t queue_bytes = 4 << 20;
  CLI::App app("wan_forwarder: a delayed, rate-limited link between two network namespaces (TAP to TAP)");
  app.add_option("--netns-a", netns_a, "the first side's namespace (its TAP goes on that side's bridge)")->required();
  app.add_option("--netns-b", netns_b, "the second side's namespace")->required();
  app.add_option("--tap", tap, "the TAP devices' name, in both namespaces")->capture_default_str();
  app.add_option("--delay-ms", delay_ms, "one-way propagation delay in milliseconds")->capture_default_str();
  app.add_option("--rate-mbit", rate_mbit, "link rate in Mbit/s each way")->capture_default_str();
  app.add_option("--queue-bytes", queue_bytes, "bytes queued per direction before frames drop")->capture_default_str();
  app.add_option("--stats", stats, "write the counts each way here (JSON) on SIGUSR2 and at exit");
  CLI11_PARSE(app, argc, argv);
  if (delay_ms < 0) die("--delay-ms must be >= 0");
  if (!(rate_mbit > 0)) die("--rate-mbit must be > 0");

  const int tap_a = open_tap(netns_a, tap), tap_b = open_tap(netns_b, tap);
  sigset_t mask;
  sigemptyset(&mask);
  for (int s : {SIGTERM, SIGINT, SIGUSR1, SIGUSR2}) sigaddset(&mask, s);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  const int sig = signalfd(-1, &mask, SFD_CLOEXEC);
  const int timer = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  for (int fd : {tap_a, tap_b, sig, timer}) {
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.fd = fd;
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
  }
  Direction dirs[2];
  dirs[0].in = tap_a, dirs[0].out = tap_b;
  dirs[1].in = tap_b, dirs[1].out = tap_a;
  const ns_t delay = static_cast<ns_t>(delay_ms * 1e6);
  const double ns_per_byte = 8e3 / rate_mbit;  // 8 bits / (rate_mbit * 1e6 bit/s) in ns
  bool blackhole = false, running = true;
  const auto write_stats = [&] {
    if (stats.empty()) return;
    const std::string tmp = stats + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "w");
    if (!f) die(fmt::format("--stats {}: {}", stats, std::strerror(errno)));
    std::string out = "{";
    for (int k = 0; k < 2; ++k)
      out += fmt::format("{}\"{}\": {{\"frames\": {}, \"bytes\": {}, \"tcp_payload\": {}, \"dropped\": {}}}",
                         k ? ", " : "", k ? "b_to_a" : "a_to_b", dirs[k].frames, dirs[k].bytes, dirs[k].tcp_payload,
                         dirs[k].dropped);
    out += "}\n";
    std::fputs(out.c_str(), f);
    std::fclose(f);
    std::rename(tmp.c_str(), stats.c_str());  // a reader never sees half a file
  };
  std::vector<uint8_t> buf(sizeof(VnetHdr) + 65536 + 14);

  const auto arm = [&] {
    ns_t next = 0;
    for (const Direction& d : dirs)
      if (!d.queue.empty() && (next == 0 || d.queue.front().leave < next)) next = d.queue.front().leave;
    itimerspec t{};
    if (next) {
      t.it_value.tv_sec = next / 1'000'000'000;
      t.it_value.tv_nsec = next % 1'000'000'000;
    }
    timerfd_settime(timer, TFD_TIMER_ABSTIME, &t, nullptr);
  };
  const auto send_due = [&] {
    const ns_t now = now_ns();
    for (Direction& d : dirs)
      while (!d.queue.empty() && d.queue.front().leave <= now) {
        Frame& f = d.queue.front();
        if (write(d.out, f.bytes.data(), f.bytes.size()) == static_cast<ssize_t>(f.bytes.size())) {
          d.frames += f.wire.frames;
          d.bytes += f.wire.bytes;
          d.tcp_payload += f.wire.tcp_payload;
        } else {
          d.dropped += f.wire.frames;
        }
        d.queued_bytes -= f.wire.bytes;
        d.queue.pop_front();
      }
  };

  while (running) {
    epoll_event events[8];
    const int n = epoll_wait(ep, events, 8, -1);
    if (n < 0 && errno == EINTR) continue;
    for (int k = 0; k < n; ++k) {
      const int fd = events[k].data.fd;
      if (fd == sig) {
        signalfd_siginfo si;
        if (read(sig, &si, sizeof si) != sizeof si) continue;
        if (si.ssi_signo == SIGUSR1) {
          blackhole = !blackhole;
          std::fprintf(stderr, "wan_forwarder: %s\n", blackhole ? "black hole: every frame dropped" : "link restored");
        } else if (si.ssi_signo == SIGUSR2) {
          write_stats();
        } else {
          running = false;
        }
      } else if (fd == timer) {
        uint64_t expirations;
        (void)!read(timer, &expirations, sizeof expirations);
      } else {
        Direction& d = dirs[fd == tap_a ? 0 : 1];
        for (ssize_t got; (got = read(fd, buf.data(), buf.size())) > 0;) {
          if (static_cast<size_t>(got) < sizeof(VnetHdr)) continue;
          const Wire w = on_the_wire(buf.data(), static_cast<size_t>(got));
          if (blackhole || d.queued_bytes + w.bytes > queue_bytes) {
            d.dropped += w.frames;
            continue;
          }
          const ns_t now = now_ns();
          d.last_sent = std::max(now, d.last_sent) + static_cast<ns_t>(static_cast<double>(w.bytes) * ns_per_byte);
          d.queue.push_back({d.last_sent + delay, w, std::vector<uint8_t>(buf.begin(), buf.begin() + got)});
          d.queued_bytes += w.bytes;
        }
      }
    }
    send_due();
    arm();
  }
  write_stats();
  return 0;
}
