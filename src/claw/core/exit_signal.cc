#include "claw/core/exit_signal.h"

namespace claw {

namespace {
volatile std::sig_atomic_t g_received = 0;
void record(int signal) { g_received = signal; }
}  // namespace

ExitSignalGuard::ExitSignalGuard() {
  g_received = 0;
  struct sigaction sa = {};
  sa.sa_handler = record;
  sa.sa_flags = SA_RESETHAND;
  ::sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, &old_term_);
  ::sigaction(SIGUSR1, &sa, &old_usr1_);
}

ExitSignalGuard::~ExitSignalGuard() {
  ::sigaction(SIGTERM, &old_term_, nullptr);
  ::sigaction(SIGUSR1, &old_usr1_, nullptr);
}

int ExitSignalGuard::received() { return g_received; }

const char* ExitSignalGuard::name(int signal) {
  switch (signal) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    default: return "a signal";
  }
}

}  // namespace claw
