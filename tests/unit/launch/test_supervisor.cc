// The supervisor's command-line editing and configuration checks; the
// supervised runs themselves are tests/e2e/parallel/launch.sh.
#include <gtest/gtest.h>

#include "claw/core/error.h"
#include "claw/launch/supervisor.h"

namespace claw::launch {
namespace {

TEST(Supervisor, FlagValueReadsBothForms) {
  EXPECT_EQ(flag_value({"train", "--save", "a", "--lr", "1"}, "--save"), "a");
  EXPECT_EQ(flag_value({"train", "--save=b"}, "--save"), "b");
  EXPECT_EQ(flag_value({"train", "--save-interval", "10"}, "--save"), "");
  EXPECT_EQ(flag_value({"train", "--save"}, "--save"), "");
}

TEST(Supervisor, WithFlagReplacesOrAppends) {
  using V = std::vector<std::string>;
  EXPECT_EQ(with_flag(V{"train", "--load", "x", "--lr", "1"}, "--load", "ckpt"),
            (V{"train", "--load", "ckpt", "--lr", "1"}));
  EXPECT_EQ(with_flag(V{"train", "--load=x"}, "--load", "ckpt"), (V{"train", "--load=ckpt"}));
  EXPECT_EQ(with_flag(V{"train", "--lr", "1"}, "--load", "ckpt"), (V{"train", "--lr", "1", "--load", "ckpt"}));
}

TEST(Supervisor, BadConfigurationsNameTheFlag) {
  const auto message = [](LaunchConfig c) {
    try {
      c.validate();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  LaunchConfig ok;
  ok.command = {"train"};
  EXPECT_EQ(message(ok), "(accepted)");
  LaunchConfig c = ok;
  c.launcher = "torchrun";
  EXPECT_NE(message(c).find("--launcher must be auto, mpirun or srun"), std::string::npos);
  c = ok;
  c.command = {"--nproc", "4"};
  EXPECT_NE(message(c).find("starts with a claw subcommand"), std::string::npos);
  c = ok;
  c.command.clear();
  EXPECT_NE(message(c).find("needs the job after `--`"), std::string::npos);
  c = ok;
  c.heartbeat_timeout_s = 0.5;
  EXPECT_NE(message(c).find("--heartbeat-timeout"), std::string::npos);
  c = ok;
  c.hostfile = "/nonexistent/hosts";
  EXPECT_NE(message(c).find("--hostfile /nonexistent/hosts: no such file"), std::string::npos);
}

}  // namespace
}  // namespace claw::launch
