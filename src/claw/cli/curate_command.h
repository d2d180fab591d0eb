// `claw curate --config pipeline.toml`: a corpus through cleaning, PII
// redaction, heuristic filters and deduplication (curate/pipeline.h has
// the file format). Flags: --threads, --skip-bad-lines, --log-interval, and
// --num-tasks/--task-id (default: Slurm's SLURM_ARRAY_TASK_COUNT and
// SLURM_ARRAY_TASK_ID) to split the shards between the tasks of a job array.
//
// Progress goes to stderr; the per-stage summary (documents and bytes in
// and out, time, counts) to stdout. SIGINT or SIGTERM stops the run after
// the chunk being written: finished shards stay, the current one is
// discarded, and the next run resumes there.
#pragma once

#include <CLI/CLI.hpp>

namespace claw::cli {

void add_curate_command(CLI::App& app);

}  // namespace claw::cli
