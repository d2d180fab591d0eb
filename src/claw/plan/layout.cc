#include "claw/plan/layout.h"

#include <fmt/format.h>

#include "claw/core/error.h"
#include "claw/model/tensor_parallel.h"

namespace claw::plan {

Precision precision(const std::string& name) {
  if (name == "fp32") return {};
  if (name == "bf16" || name == "fp16" || name == "fp8")
    return {.compute = name, .param_bytes = 2, .grad_bytes = 4, .master_bytes = 4, .moment_bytes = 4,
            .activation_bytes = 2};
  fail("--precision {}: not one of fp32 (claw's CPU trainer), bf16, fp16, fp8", name);
}

std::string Layout::describe() const {
  std::string s = fmt::format("TP{}{} ", tp, sequence_parallel && tp > 1 ? "+SP" : "");
  if (cp > 1) s += fmt::format("CP{} ", cp);
  s += fmt::format("PP{}", pp);
  if (virtual_stages > 1) s += fmt::format("x{}", virtual_stages);
  if (pp > 1 && schedule != parallel::ScheduleKind::one_f_one_b && schedule != parallel::ScheduleKind::interleaved)
    s += fmt::format(" {}", parallel::to_string(schedule));
  s += fmt::format(" DP{}", dp);
  if (ep > 1) s += fmt::format(" EP{}", ep);
  if (expert_tp() != tp) s += fmt::format(" ETP{}", expert_tp());
  s += fmt::format(" mb{} Z{}", micro_batch_size, zero_stage);
  if (recompute()) s += " RC";
  return s;
}

std::string Layout::flags(const Job& job) const {
  std::string s = fmt::format("--tensor-model-parallel-size {}", tp);
  if (sequence_parallel && tp > 1) s += " --sequence-parallel";
  if (cp > 1) s += fmt::format(" --context-parallel-size {}", cp);
  if (ep > 1) s += fmt::format(" --expert-model-parallel-size {}", ep);
  if (expert_tp() != tp) s += fmt::format(" --expert-tensor-parallel-size {}", expert_tp());
  if (pp > 1) {
    s += fmt::format(" --pipeline-model-parallel-size {}", pp);
    if (virtual_stages > 1)
      s += fmt::format(" --num-layers-per-virtual-pipeline-stage {}", layers_per_virtual_stage(job));
    else if (schedule != parallel::ScheduleKind::one_f_one_b)
      s += fmt::format(" --pipeline-schedule {}", parallel::to_string(schedule));
  }
  s += fmt::format(" --micro-batch-size {}", micro_batch_size);
  if (zero_stage == 1) s += " --use-distributed-optimizer";
  if (zero_stage >= 2) s += fmt::format(" --zero-stage {}", zero_stage);
  if (overlap_grad_reduce) s += " --overlap-grad-reduce";
  if (overlap_param_gather) s += " --overlap-param-gather";
  if (recompute()) s += " --recompute-granularity full";
  if (first_stage_layers >= 0) s += fmt::format(" --decoder-first-pipeline-num-layers {}", first_stage_layers);
  if (last_stage_layers >= 0) s += fmt::format(" --decoder-last-pipeline-num-layers {}", last_stage_layers);
  return s;
}

parallel::PipelineLayout pipeline_layout(const Job& job, const Layout& l) {
  return parallel::make_pipeline_layout(
      {.num_layers = job.model.num_layers, .stages = l.pp,
       .layers_per_virtual_stage = l.virtual_stages > 1 ? l.layers_per_virtual_stage(job) : 0,
       .first_stage_layers = l.first_stage_layers, .last_stage_layers = l.last_stage_layers});
}

parallel::ScheduleConfig schedule_config(const Job& job, const Layout& l, int chunks) {
  parallel::ScheduleConfig sc{.kind = l.schedule, .stages = l.pp,
                              .microbatches = static_cast<int>(l.microbatches(job)), .chunks = chunks};
  if (chunks > 1 && sc.kind == parallel::ScheduleKind::one_f_one_b) sc.kind = parallel::ScheduleKind::interleaved;
  return sc;
}

void validate_layout(const Job& job, const Layout& l, int world) {
  const model::ModelConfig& m = job.model;
  if (l.tp < 1 || l.cp < 1 || l.pp < 1 || l.dp < 1)
    fail("parallel sizes must be at least 1 (TP {}, CP {}, PP {}, DP {})", l.tp, l.cp, l.pp, l.dp);
  if (world > 0 && l.world() != world)
    fail("--tensor-model-parallel-size {} x --context-parallel-size {} x --pipeline-model-parallel-size {} = {} "
         "does not divide the {} devices (data-parallel size = devices / that product)",
         l.tp, l.cp, l.pp, l.tp * l.cp * l.pp, world);
  if (job.seq_length < 1 || job.global_batch_size < 1) fail("--seq-length and --global-batch-size must be positive");
  if (l.micro_batch_size < 1) fail("--micro-batch-size must be positive, got {}", l.micro_batch_size);
  if (job.global_batch_size % (l.micro_batch_size * l.dp) != 0)
    fail("--global-batch-size {} is not a multiple of --micro-batch-size {} x data-parallel size {}",
         job.global_batch_size, l.micro_batch_size, l.dp);
  model::validate_tensor_parallel(m, l.tp, l.sequence_parallel, job.seq_length);
  if (l.ep < 1 || l.etp < 0) fail("--expert-model-parallel-size {} / --expert-tensor-parallel-size {} must be at least 1",
                                  l.ep, l.etp);
  if (l.ep > 1 || l.etp > 0) validate_moe_layout(m, l.tp, l.ep, l.expert_tp(), l.sequence_parallel);
  if (world > 0 && l.world() % (l.expert_tp() * l.ep * l.pp) != 0)
    fail("--expert-tensor-parallel-size {} x --expert-model-parallel-size {} x --pipeline-model-parallel-size {} = {} "
         "does not divide the {} devices",
         l.expert_tp(), l.ep, l.pp, l.expert_tp() * l.ep * l.pp, world);
  if (l.cp > 1 && job.seq_length % (2 * l.cp) != 0)
    fail("--seq-length {} is not a multiple of 2 x --context-parallel-size {} (each rank holds two balanced chunks)",
         job.seq_length, l.cp);
  if (l.zero_stage < 0 || l.zero_stage > 3) fail("--zero-stage {}: valid stages are 0-3", l.zero_stage);
  if (l.virtual_stages < 1) fail("virtual pipeline stages must be at least 1");
  if (l.first_stage_layers < 0 && l.last_stage_layers < 0 &&
      m.num_layers % (static_cast<int64_t>(l.pp) * l.virtual_stages) != 0)
    fail("--num-layers {} is not divisible by --pipeline-model-parallel-size {}{}", m.num_layers, l.pp,
         l.virtual_stages > 1 ? fmt::format(" x {} model chunks per stage", l.virtual_stages) : "");
  if (l.pp == 1 && (l.virtual_stages > 1 || l.schedule != parallel::ScheduleKind::one_f_one_b))
    fail("a pipeline schedule or virtual stages need --pipeline-model-parallel-size > 1");
  if (l.pp > 1) {
    parallel::ScheduleConfig s{.kind = l.schedule, .stages = l.pp,
                               .microbatches = static_cast<int>(l.microbatches(job)), .chunks = l.virtual_stages};
    s.validate();
  }
}

}  // namespace claw::plan
