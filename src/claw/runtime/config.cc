#include "claw/runtime/config.h"

#include "claw/kernels/cuda/context.h"
#include <algorithm>

#include <fmt/ranges.h>

#include "claw/ckpt/shards.h"
#include "claw/core/error.h"
#include "claw/model/context_parallel.h"
#include "claw/model/tensor_parallel.h"

namespace claw::runtime {

void ParallelConfig::validate(const model::ModelConfig& model, const comm::RankGrid& grid, int64_t seq_length,
                              int64_t micro_batches, int64_t recompute_layers) const {
  model::validate_moe_layout(model, grid.tp, grid.ep, grid.etp, sequence_parallel);
  if (model.moe.enabled()) {
    if (model.add_bias_linear)
      fail("--num-experts: experts have no biases; add --disable-bias-linear (as Mixtral and DeepSeek do)");
    if (model.moe.router_enable_expert_bias && zero_stage() >= 3)
      fail("--moe-router-enable-expert-bias with --zero-stage 3: the bias is updated outside the optimizer on whole "
           "parameters; use --zero-stage 0-2");
  }
  const model::CpCommType cp_type = model::parse_cp_comm_type(cp_comm_type);
  if (grid.cp > 1) {
    (void)model::CpChunks::of(seq_length, 0, grid.cp);  // two balanced chunks a rank
    const model::TpDims tp{grid.tp, sequence_parallel};
    if (model.num_attention_heads % grid.tp == 0) model::validate_cp_heads(cp_type, grid.cp, tp.heads(model), tp.kv_groups(model));
  }
  // Under CP, sequence parallelism splits each rank's T / CP tokens.
  model::validate_tensor_parallel(model, grid.tp, sequence_parallel, seq_length / grid.cp);
  parallel::DataParallelConfig resolved = dp;
  resolved.zero_stage = zero_stage();
  resolved.validate(grid.dp * grid.cp);
  if (inter_dc_chunk_bytes < 0 || inter_dc_chunk_bytes % 4 != 0)
    fail("--inter-dc-chunk-bytes {} must be a non-negative multiple of 4 (fp32 gradients)", inter_dc_chunk_bytes);
  if (grid.pp > 1) {
    const parallel::PipelineLayout layout = pipeline_layout(model.num_layers, grid.pp);
    schedule_config(grid.pp, micro_batches, layout.chunks).validate();
    if (zero_stage() >= 2 || dp.overlap_grad_reduce || dp.overlap_param_gather)
      fail("with --pipeline-model-parallel-size {} use --zero-stage 0 or 1 (or --use-distributed-optimizer) "
           "without --overlap-grad-reduce / --overlap-param-gather: gradients are reduced after the pipeline's "
           "last backward",
           grid.pp);
    if (recompute_layers > 0) fail("--recompute-granularity with --pipeline-model-parallel-size > 1 is not available yet");
  } else if (num_layers_per_virtual_pipeline_stage > 0 || decoder_first_pipeline_num_layers >= 0 ||
             decoder_last_pipeline_num_layers >= 0) {
    fail("--num-layers-per-virtual-pipeline-stage and --decoder-first/last-pipeline-num-layers need "
         "--pipeline-model-parallel-size > 1");
  }
}

parallel::PipelineLayout ParallelConfig::pipeline_layout(int64_t num_layers, int stages) const {
  if (stages == 1) return parallel::make_pipeline_layout({.num_layers = num_layers, .stages = 1});
  return parallel::make_pipeline_layout({.num_layers = num_layers, .stages = stages,
                                         .layers_per_virtual_stage = num_layers_per_virtual_pipeline_stage,
                                         .first_stage_layers = decoder_first_pipeline_num_layers,
                                         .last_stage_layers = decoder_last_pipeline_num_layers});
}

parallel::ScheduleConfig ParallelConfig::schedule_config(int stages, int64_t micro_batches, int chunks) const {
  parallel::ScheduleConfig s{.kind = parallel::ScheduleKind::one_f_one_b, .stages = stages,
                             .microbatches = static_cast<int>(micro_batches), .chunks = chunks};
  if (stages == 1) return s;
  s.kind = parallel::parse_schedule_kind(pipeline_schedule);
  if (chunks > 1 && s.kind == parallel::ScheduleKind::one_f_one_b)
    s.kind = parallel::ScheduleKind::interleaved;  // implied by --num-layers-per-virtual-pipeline-stage
  return s;
}

namespace {
// --freeze: every pattern names a parameter of the whole model (a pipeline
// stage may hold none of them), and something is left to train.
void check_freeze(const model::ModelConfig& cfg, const std::vector<std::string>& freeze) {
  std::vector<std::string> names;
  for (const model::ParamSpec& s : ckpt::model_param_specs(cfg)) names.push_back(s.name);
  model::check_patterns_match(freeze, names, "--freeze");
  if (std::all_of(names.begin(), names.end(), [&](const std::string& n) { return model::matches_any(freeze, n); }))
    fail("--freeze '{}' freezes every parameter: nothing would train", fmt::join(freeze, ","));
}
}  // namespace

void RuntimeConfig::resolve_and_validate(int world_size) {
  model.validate();
  const comm::RankGrid grid = comm::RankGrid::make(world_size, parallel.sizes);
  parallel.dp.zero_stage = parallel.zero_stage();
  parallel.dp.instances = parallel.sizes.instances;
  // The batch's own flags are checked where they are parsed (TrainConfig); a
  // command that got here with a batch that does not split is a bug.
  CLAW_CHECK(micro_batch_size > 0 && global_batch_size > 0 && global_batch_size % (micro_batch_size * grid.dp) == 0,
             "global batch {} does not split into micro-batches of {} on {} data-parallel ranks", global_batch_size,
             micro_batch_size, grid.dp);
  parallel.validate(model, grid, seq_length, micro_batches(grid.dp), recompute_layers);
  if (recompute_layers > model.num_layers)
    fail("--recompute-num-layers {} exceeds --num-layers {}", recompute_layers, model.num_layers);
  if (seq_length > model.max_position_embeddings)
    fail("--seq-length {} exceeds --max-position-embeddings {} (the longest sequence the model's positions cover); "
         "use --seq-length <= {} or raise --max-position-embeddings",
         seq_length, model.max_position_embeddings, model.max_position_embeddings);
  if (!freeze.empty()) check_freeze(model, freeze);
  if (!model.lora.modules_to_save.empty()) {
    if (!model.lora.enabled()) fail("--lora-modules-to-save needs --lora-rank (it names what trains beside adapters)");
    std::vector<std::string> names;
    for (const model::ParamSpec& s : ckpt::model_param_specs(model)) names.push_back(s.name);
    model::check_patterns_match(model.lora.modules_to_save, names, "--lora-modules-to-save");
  }
  const int gpu = cuda_device();
  if (allow_tf32 && gpu < 0) fail("--allow-tf32 applies to --device cuda only (the CPU's GEMMs are IEEE fp32)");
  if (gpu >= 0) {
    if (!kernels::cuda::cuda_built())
      fail("--device {}: this claw was built without the CUDA backend (configure with a CUDA toolkit: "
           "cmake -DCLAW_CUDA=ON; scripts/cuda-toolkit fetches one from PyPI)", device);
    if (world_size > 1)
      fail("--device {} runs one rank for now ({} launched): NCCL groups for several GPUs are not built yet", device,
           world_size);
    if (parallel.dp.zero_stage >= 2)
      fail("--device {} supports --zero-stage 0 and 1 (sharded gradients and values run on the CPU backend)", device);
    if (model.lora.enabled())
      fail("--lora-rank with --device {}: LoRA adapters run on the CPU backend for now (drop --device)", device);
  }
}

int RuntimeConfig::cuda_device() const {
  if (device == "cpu") return -1;
  if (device == "cuda") return 0;
  if (device.rfind("cuda:", 0) == 0) {
    const std::string n = device.substr(5);
    if (!n.empty() && n.size() < 4 && n.find_first_not_of("0123456789") == std::string::npos) return std::stoi(n);
  }
  fail("--device {}: expected cpu, cuda or cuda:N (a GPU index)", device);
}

}  // namespace claw::runtime
