// `claw serve`: the OpenAI-compatible HTTP server (serve/http_server.h).
//
//   claw serve --model CKPT_OR_HF_DIR [--host 0.0.0.0] [--port 8000] [--api-key KEY]
//
// The port is bound first, so /health answers 503 while the model loads;
// SIGTERM or SIGINT stops accepting requests, lets those in flight finish,
// and exits 0.
#pragma once

#include <CLI/CLI.hpp>

namespace claw::cli {

void add_serve_command(CLI::App& app);

}  // namespace claw::cli
