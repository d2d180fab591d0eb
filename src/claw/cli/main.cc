// claw: the command-line entry point. Subcommands live in one file each.
// Only main decides how the process ends: the exit code says what kind of
// failure it was (claw::ExitCode, README "Exit codes"), and in a multi-rank
// job abort_job passes it to MPI_Abort so that mpirun exits with it too.
// Running out of memory is a one-line error too (exit 1), never an abort.
#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include <CLI/CLI.hpp>

#include "claw/cli/chat_command.h"
#include "claw/cli/ckpt_command.h"
#include "claw/cli/generate_command.h"
#include "claw/cli/perplexity_command.h"
#include "claw/cli/serve_command.h"
#include "claw/cli/info_command.h"
#include "claw/cli/launch_command.h"
#include "claw/cli/plan_command.h"
#include "claw/cli/inspect_dataset_command.h"
#include "claw/cli/curate_command.h"
#include "claw/cli/preprocess_command.h"
#include "claw/cli/rl_command.h"
#include "claw/cli/tokenize_command.h"
#include "claw/cli/train_command.h"
#include "claw/cli/train_tokenizer_command.h"
#include "claw/comm/world.h"
#include "claw/core/arena.h"
#include "claw/core/error.h"
#include "claw/core/memory.h"
#include "claw/core/log.h"
#include "claw/kernels/cpu/blas.h"

int main(int argc, char** argv) {
  claw::kernels::ensure_fast_blas(argc, argv);
  CLI::App app("claw: train, fine-tune and serve GPT/Llama-style transformers", "claw");
  app.require_subcommand(1);
  claw::cli::add_train_command(app);
  claw::cli::add_eval_command(app);
  claw::cli::add_ckpt_command(app);
  claw::cli::add_rl_command(app);
  claw::cli::add_generate_command(app);
  claw::cli::add_chat_command(app);
  claw::cli::add_perplexity_command(app);
  claw::cli::add_serve_command(app);
  claw::cli::add_info_command(app);
  claw::cli::add_launch_command(app);
  claw::cli::add_plan_command(app);
  claw::cli::add_tokenize_command(app);
  claw::cli::add_train_tokenizer_command(app);
  claw::cli::add_preprocess_command(app);
  claw::cli::add_curate_command(app);
  claw::cli::add_inspect_dataset_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
      // CLI11 lists every unmatched token ("3 --num-layer"); name the flags first.
      std::string list = what.substr(what.find(':') == std::string::npos ? 0 : what.find(':') + 2), flags, rest;
      for (size_t b = 0, e2; b < list.size(); b = e2 + 1) {
        e2 = list.find(' ', b);
        if (e2 == std::string::npos) e2 = list.size();
        std::string tok = list.substr(b, e2 - b);
        (tok.rfind("-", 0) == 0 ? flags : rest) += (tok.rfind("-", 0) == 0 ? flags : rest).empty() ? tok : " " + tok;
      }
      std::fprintf(stderr, "claw: error: %s %s (see `claw <command> --help` for valid flags)\n",
                   flags.empty() ? "unexpected argument" : "unknown flag", (flags.empty() ? rest : flags).c_str());
    } else {
      std::fprintf(stderr, "claw: error: %s (see --help)\n", what.c_str());
    }
    return static_cast<int>(claw::ExitCode::usage);
  } catch (const claw::CleanExit& e) {
    std::fprintf(stderr, "claw%s: %s\n", claw::log::rank_tag().c_str(), e.what());
    return static_cast<int>(e.exit_code());
  } catch (const claw::Error& e) {
    const claw::ExitCode code = e.exit_code();
    const char* kind = code == claw::ExitCode::internal ? "internal error"
                       : code == claw::ExitCode::comm   ? "communication error"
                                                        : "error";
    std::fprintf(stderr, "claw: %s%s: %s\n", kind, claw::log::rank_tag().c_str(), e.what());
    claw::comm::abort_job(static_cast<int>(code));  // a multi-rank job ends on every rank (returns when alone)
    return static_cast<int>(code);
  } catch (const std::bad_alloc&) {
    // The failed allocation's memory was never taken and what the command
    // held is released by now, so the message itself can be built.
    std::string command = "claw";
    for (const CLI::App* sub : app.get_subcommands()) command += " " + sub->get_name();
    std::string limit;
    try {
      const claw::MemoryLimit m = claw::available_memory();
      if (m.bytes != UINT64_MAX) limit = fmt::format("; {} available now ({})", claw::format_bytes(static_cast<double>(m.bytes)), m.source);
    } catch (const std::exception&) {
    }
    std::fprintf(stderr, "claw: error%s: out of memory in `%s`: an allocation failed%s\n", claw::log::rank_tag().c_str(),
                 command.c_str(), limit.c_str());
    claw::comm::abort_job(static_cast<int>(claw::ExitCode::bad_input));
    return static_cast<int>(claw::ExitCode::bad_input);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "claw: internal error%s: %s\n", claw::log::rank_tag().c_str(), e.what());
    claw::comm::abort_job(static_cast<int>(claw::ExitCode::internal));
    return static_cast<int>(claw::ExitCode::internal);
  }
  return 0;
}
