#include "claw/cli/plan_command.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "claw/cli/flags.h"
#include "claw/model/config_flags.h"
#include "claw/cli/train_command.h"
#include "claw/ckpt/checkpoint.h"
#include "claw/ckpt/format.h"
#include "claw/core/error.h"
#include "claw/model/config.h"
#include "claw/optim/adamw.h"
#include "claw/plan/search.h"

namespace claw::cli {

namespace {

struct PlanArgs {
  model::ModelConfig model = model::model_preset("gpt2-124m");
  int64_t seq_length = 0;  // not given: the model's max-position-embeddings
  int64_t global_batch_size = 0;
  int num_gpus = 0;
  int gpus_per_node = 0;  // 0: the device's
  std::string device = "h100";
  std::string precision;  // "": bf16 on a GPU, fp32 on the CPU
  std::string attention_kernel = "flash";
  std::string fp8_high_precision_layers;  // "0,11"
  std::string load;                       // a checkpoint whose FP8 layer choice to read
  std::string exp_avg_dtype = "fp32", exp_avg_sq_dtype = "fp32", main_params_dtype = "fp32";
  int data_centers = 1;
  double inter_dc_rtt_ms = 0, inter_dc_gbps = 0;
  int64_t diloco_inner_steps = 0;  // 0: cost H = 10, 50, 100
  int diloco_delta_bits = 32;
  // Pins (0 / -1 / "": searched).
  int tp = 0, pp = 0, cp = 0, ep = 0, zero_stage = -1;
  int64_t layers_per_virtual_stage = 0, micro_batch_size = 0, ddp_bucket_size = 0;
  std::string recompute_granularity, pipeline_schedule;
  bool sequence_parallel = false, no_sequence_parallel = false, use_distributed_optimizer = false;
};

using F = Flag<PlanArgs>;

// "0,11" -> {0, 11}; names the flag in errors.
std::vector<int64_t> parse_layer_list(const std::string& flag, const std::string& v) {
  std::vector<int64_t> out;
  size_t b = 0;
  while (b <= v.size()) {
    const size_t e = std::min(v.find(',', b), v.size());
    const std::string piece = v.substr(b, e - b);
    try {
      size_t used = 0;
      out.push_back(std::stoll(piece, &used));
      if (used != piece.size()) throw std::invalid_argument(piece);
    } catch (const std::exception&) {
      fail("{} {}: '{}' is not a block index (a comma-separated list like 0,11)", flag, v, piece);
    }
    b = e + 1;
  }
  return out;
}

const std::vector<F>& plan_flags() {
  using A = PlanArgs;
  static const std::vector<F> flags = concat(model::model_shape_flags<A>([](A& a) -> model::ModelConfig& { return a.model; }), {
      int_flag<A>("seq-length", "tokens per sequence (default: the model's max-position-embeddings)",
                  [](A& a) -> auto& { return a.seq_length; }),
      int_flag<A>("global-batch-size", "sequences per optimizer step", [](A& a) -> auto& { return a.global_batch_size; }),
      int_flag<A>("num-gpus", "devices of the job", [](A& a) -> auto& { return a.num_gpus; }),
      int_flag<A>("gpus-per-node", "devices per node (0: the catalog's for the device)",
                  [](A& a) -> auto& { return a.gpus_per_node; }),
      string_flag<A>("device", "device in the hardware catalog (a100, h100, h200, b200, cpu, ...)",
                     [](A& a) -> auto& { return a.device; }),
      string_flag<A>("precision", "fp32, bf16, fp16 or fp8 (default: bf16 on GPUs, fp32 on the CPU)",
                     [](A& a) -> auto& { return a.precision; }),
      string_flag<A>("fp8-high-precision-layers",
                     "with --precision fp8: blocks whose GEMMs stay bf16 (e.g. 0,11; --fp8-layer-selection auto's "
                     "choice, which --load reads from a checkpoint)",
                     [](A& a) -> auto& { return a.fp8_high_precision_layers; }),
      string_flag<A>("load", "checkpoint directory: read its FP8 per-block choice (state.fp8_high_precision_layers)",
                     [](A& a) -> auto& { return a.load; }),
      string_flag<A>("exp-avg-dtype", "AdamW first moment's dtype for the memory model: fp32, bf16, fp16 or fp8",
                     [](A& a) -> auto& { return a.exp_avg_dtype; }),
      string_flag<A>("exp-avg-sq-dtype", "AdamW second moment's dtype for the memory model: fp32, bf16 or fp8",
                     [](A& a) -> auto& { return a.exp_avg_sq_dtype; }),
      string_flag<A>("main-params-dtype",
                     "master weights' dtype for the memory model: fp32 or fp16 (claw's trainer: the parameters "
                     "themselves, with fp32 working copies of the layers in use; 16-bit stacks: the master copy)",
                     [](A& a) -> auto& { return a.main_params_dtype; }),
      string_flag<A>("attention-kernel",
                     "flash (claw's: scores never stored) or unfused (Megatron before flash attention: scores, "
                     "softmax and dropout mask materialised)",
                     [](A& a) -> auto& { return a.attention_kernel; }),
      int_flag<A>("data-centers", "data centres the nodes are spread over (data parallelism spans them)",
                  [](A& a) -> auto& { return a.data_centers; }),
      double_flag<A>("inter-dc-rtt-ms", "round-trip time between data centres, ms",
                     [](A& a) -> auto& { return a.inter_dc_rtt_ms; }),
      double_flag<A>("inter-dc-gbps", "bandwidth between data centres, Gbit/s each way",
                     [](A& a) -> auto& { return a.inter_dc_gbps; }),
      int_flag<A>("diloco-inner-steps", "across data centres: cost DiLoCo with this H (0: 10, 50 and 100)",
                  [](A& a) -> auto& { return a.diloco_inner_steps; }),
      int_flag<A>("diloco-delta-bits", "across data centres: DiLoCo's deltas in 32, 8 or 4 bits",
                  [](A& a) -> auto& { return a.diloco_delta_bits; }),
      int_flag<A>("tensor-model-parallel-size", "pin TP (0: search)", [](A& a) -> auto& { return a.tp; }),
      int_flag<A>("pipeline-model-parallel-size", "pin PP (0: search)", [](A& a) -> auto& { return a.pp; }),
      int_flag<A>("context-parallel-size", "pin CP (0: search)", [](A& a) -> auto& { return a.cp; }),
      int_flag<A>("expert-model-parallel-size", "pin EP (0: search; MoE models)", [](A& a) -> auto& { return a.ep; }),
      int_flag<A>("num-layers-per-virtual-pipeline-stage", "pin interleaving: layers per model chunk (0: search)",
                  [](A& a) -> auto& { return a.layers_per_virtual_stage; }),
      string_flag<A>("pipeline-schedule", "pin the schedule: gpipe, 1f1b, interleaved or zb-h1",
                     [](A& a) -> auto& { return a.pipeline_schedule; }),
      int_flag<A>("micro-batch-size", "pin the micro-batch size (0: search)",
                  [](A& a) -> auto& { return a.micro_batch_size; }),
      string_flag<A>("recompute-granularity", "pin recompute: full or none (default: search)",
                     [](A& a) -> auto& { return a.recompute_granularity; }),
      int_flag<A>("zero-stage", "pin the ZeRO stage 0-3 (-1: search)", [](A& a) -> auto& { return a.zero_stage; }),
      int_flag<A>("ddp-bucket-size", "elements per gradient bucket, as claw train's (0: max(40M, 1M x DP)): "
                  "how much of the reduction overlap can hide",
                  [](A& a) -> auto& { return a.ddp_bucket_size; }),
      switch_flag<A>("use-distributed-optimizer", "pin ZeRO stage 1",
                     [](A& a) -> auto& { return a.use_distributed_optimizer; }),
      switch_flag<A>("sequence-parallel", "pin sequence parallelism on (default: on with TP)",
                     [](A& a) -> auto& { return a.sequence_parallel; }),
      switch_flag<A>("no-sequence-parallel", "pin sequence parallelism off",
                     [](A& a) -> auto& { return a.no_sequence_parallel; }),
  });
  return flags;
}

double gib(double b) { return b / (1024.0 * 1024.0 * 1024.0); }

nlohmann::json to_json(const plan::Estimate& e, const plan::Job& job, int rank) {
  const plan::Layout& l = e.layout;
  const plan::StageMemory& m = e.memory;
  const plan::StepTime& t = e.time;
  return {{"rank", rank},
          {"layout", l.describe()},
          {"flags", l.flags(job)},
          {"tensor_model_parallel_size", l.tp},
          {"pipeline_model_parallel_size", l.pp},
          {"context_parallel_size", l.cp},
          {"expert_model_parallel_size", l.ep},
          {"expert_tensor_parallel_size", l.expert_tp()},
          {"data_parallel_size", l.dp},
          {"virtual_pipeline_model_parallel_size", l.virtual_stages},
          {"pipeline_schedule", std::string(parallel::to_string(l.schedule))},
          {"sequence_parallel", l.sequence_parallel && l.tp > 1},
          {"micro_batch_size", l.micro_batch_size},
          {"num_micro_batches", l.microbatches(job)},
          {"zero_stage", l.zero_stage},
          {"overlap_grad_reduce", l.overlap_grad_reduce},
          {"recompute_granularity", l.recompute() ? "full" : "none"},
          {"fits", e.fits},
          {"why_not", e.why_not},
          {"memory_bytes_per_device", m.total()},
          {"memory_breakdown_bytes",
           {{"stage", m.stage},
            {"params", m.params},
            {"grads", m.grads},
            {"optimizer", m.optimizer},
            {"zero_buffers", m.zero_buffers},
            {"activations", m.activations},
            {"activation_slots", m.slots},
            {"comm_buffers", m.comm_buffers},
            {"runtime", m.runtime}}},
          {"step_time_s", t.total},
          {"step_time_breakdown_s",
           {{"compute", t.compute},
            {"recompute", t.recompute},
            {"tp_comm", t.tp_comm},
            {"cp_comm", t.cp_comm},
            {"ep_comm", t.ep_comm},
            {"pipeline_bubble", t.bubble},
            {"dp_comm_exposed", t.dp_comm},
            {"dp_comm_total", t.dp_comm_total},
            {"optimizer", t.optimizer},
            {"network_cpu", t.network_cpu}}},
          {"tokens_per_s", e.tokens_per_s},
          {"model_tflops_per_device", e.model_tflops_per_device},
          {"hardware_tflops_per_device", e.hardware_tflops_per_device},
          {"mfu", e.mfu}};
}

struct PlanCommand {
  std::string model_arg;
  std::string catalog_file;
  bool json = false, show_rejected = false, trainer_only = false;
  int top = 10;
  std::unique_ptr<FlagBinder<PlanArgs>> binder;

  void run() {
    PlanArgs a = read_args();
    plan::Catalog catalog = plan::Catalog::builtin();
    if (!catalog_file.empty()) catalog.merge_file(catalog_file);
    plan::Cluster cluster;
    cluster.device = catalog.device(a.device);
    cluster.num_devices = a.num_gpus;
    cluster.devices_per_node = a.gpus_per_node > 0 ? a.gpus_per_node : cluster.device.devices_per_node;
    cluster.data_centers = a.data_centers;
    cluster.inter_dc_bandwidth = a.inter_dc_gbps * 1e9 / 8;
    cluster.inter_dc_rtt = a.inter_dc_rtt_ms * 1e-3;
    if (a.data_centers == 1 && (a.inter_dc_gbps > 0 || a.inter_dc_rtt_ms > 0))
      fail("--inter-dc-gbps / --inter-dc-rtt-ms describe a link between data centres; give --data-centers > 1 too");
    std::string prec_name;
    const plan::Precision prec = precision_of(a, cluster, prec_name);
    const plan::Constraints pins = pins_of(a);
    if (a.diloco_delta_bits != 32 && a.diloco_delta_bits != 8 && a.diloco_delta_bits != 4)
      fail("--diloco-delta-bits {} must be 32, 8 or 4", a.diloco_delta_bits);
    if (a.diloco_inner_steps < 0) fail("--diloco-inner-steps {} must be >= 0", a.diloco_inner_steps);
    if (a.data_centers == 1 && (a.diloco_inner_steps > 0 || a.diloco_delta_bits != 32))
      fail("--diloco-inner-steps / --diloco-delta-bits cost DiLoCo across data centres; give --data-centers > 1 too");
    const std::vector<int64_t> diloco_h =
        a.diloco_inner_steps > 0 ? std::vector<int64_t>{a.diloco_inner_steps} : std::vector<int64_t>{10, 50, 100};
    const plan::Job job{.model = a.model, .seq_length = a.seq_length, .global_batch_size = a.global_batch_size};
    const plan::SearchResult r = plan::search(job, cluster, prec, pins, &catalog);
    // Across data centres: the best layout under each way of crossing.
    std::optional<plan::DataCenterStrategies> strategies;
    if (cluster.data_centers > 1 && !r.ranked.empty())
      strategies = plan::data_center_strategies(job, r.ranked.front().layout, cluster, prec, diloco_h,
                                                a.diloco_delta_bits);
    if (json)
      print_json(a, job, cluster, prec_name, r, strategies);
    else
      print_table(a, job, cluster, prec_name, r, strategies);
  }

  // The job's arguments: the --model preset or `claw train` TOML, then the flags; checked.
  PlanArgs read_args() {
    PlanArgs a;
    const bool shape_only = model_arg.empty();
    bool seq_given = false;  // by a flag or the TOML config
    if (!model_arg.empty()) {
      const bool is_file = model_arg.ends_with(".toml") || std::filesystem::exists(model_arg);
      if (!is_file) {
        a.model = model::model_preset(model_arg);
      } else {
        // A `claw train` config: its model preset and shape, seq-length and global-batch-size;
        // training-only keys (lr, data, ...) do not change the plan.
        auto pairs = read_toml_pairs(model_arg, train_flag_names(), train_switch_names());
        for (const auto& [k, v] : pairs)
          if (k == "model") a.model = model::model_preset(v);
        for (const auto& [k, v] : pairs) {
          if (k == "micro-batch-size" || k == "model") continue;  // a training choice, not part of the job
          if (k == "seq-length") seq_given = true;
          auto it = std::find_if(plan_flags().begin(), plan_flags().end(), [&](const F& f) { return f.name == k; });
          if (it != plan_flags().end()) it->set(a, v);
        }
      }
    } else {
      a.model.name = "custom";
    }
    binder->apply(a);
    if (top <= 0) fail("--top must be positive (the number of layouts to print), got {}", top);
    seq_given = seq_given || binder->given("seq-length");
    if (seq_given && a.seq_length <= 0)
      fail("--seq-length must be positive (tokens per sequence), got {}; leave it out to plan at the model's "
           "max-position-embeddings",
           a.seq_length);
    if (shape_only && !binder->given("max-position-embeddings") && seq_given)
      a.model.max_position_embeddings = a.seq_length;
    if (!seq_given) a.seq_length = a.model.max_position_embeddings;
    if (a.seq_length > a.model.max_position_embeddings)
      fail("--seq-length {} exceeds --max-position-embeddings {} of the model; raise --max-position-embeddings",
           a.seq_length, a.model.max_position_embeddings);
    if (a.num_gpus <= 0) fail("--num-gpus is required (the devices of the job), got {}", a.num_gpus);
    if (a.global_batch_size <= 0) fail("--global-batch-size is required (sequences per step), got {}", a.global_batch_size);
    a.model.validate();

    return a;
  }

  // The precision to plan at (--precision, the optimizer's state dtypes, the FP8 choice).
  plan::Precision precision_of(const PlanArgs& a, const plan::Cluster& cluster, std::string& prec_name) {
    prec_name = a.precision.empty() ? (a.device == "cpu" ? "fp32" : "bf16") : a.precision;
    plan::Precision prec = plan::precision(prec_name);
    if (a.attention_kernel != "flash" && a.attention_kernel != "unfused")
      fail("--attention-kernel {}: not one of flash, unfused", a.attention_kernel);
    prec.flash_attention = a.attention_kernel == "flash";
    {
      optim::AdamWConfig adam{.precision_aware = true};
      adam.exp_avg_dtype = optim::parse_optimizer_dtype("exp-avg-dtype", a.exp_avg_dtype);
      adam.exp_avg_sq_dtype = optim::parse_optimizer_dtype("exp-avg-sq-dtype", a.exp_avg_sq_dtype);
      prec.moment_bytes = static_cast<double>(optim::AdamW::bytes_per_element(adam)) / 2;
      prec.fp8_moments = optim::AdamW::fp8_moments(adam);
    }
    if (a.exp_avg_sq_dtype == "fp16") fail("--exp-avg-sq-dtype fp16: claw's optimizer stores the second moment in fp32 or bf16");
    if (a.main_params_dtype != "fp32" && a.main_params_dtype != "fp16")
      fail("--main-params-dtype {}: expected fp32 or fp16", a.main_params_dtype);
    if (a.main_params_dtype == "fp16") {
      if (prec.master_bytes > 0)
        prec.master_bytes = 2;  // a 16-bit stack's master copy
      else
        prec.main_params_dtype = DType::f16;  // claw's trainer: the parameters are the masters
    }
    if (!a.fp8_high_precision_layers.empty() && !a.load.empty())
      fail("--fp8-high-precision-layers and --load both name the FP8 choice; give one");
    if (!a.fp8_high_precision_layers.empty())
      prec.high_precision_layers = parse_layer_list("--fp8-high-precision-layers", a.fp8_high_precision_layers);
    if (!a.load.empty()) {
      const std::string dir = ckpt::resolve_load_dir(a.load);
      const ckpt::Metadata meta = ckpt::Metadata::read(dir);
      const auto it = meta.state.find("fp8_high_precision_layers");
      if (it == meta.state.end())
        fail("--load {}: the checkpoint holds no FP8 layer choice (state.fp8_high_precision_layers: saved by runs with "
             "--fp8-layer-selection auto)", dir);
      prec.high_precision_layers = it->get<std::vector<int64_t>>();
      fmt::print("FP8 layer choice from {}: blocks kept in bf16: {}\n", dir,
                 prec.high_precision_layers.empty() ? "none" : fmt::format("{}", fmt::join(prec.high_precision_layers, ",")));
    }
    if (!prec.high_precision_layers.empty()) {
      if (prec.compute != "fp8") fail("--fp8-high-precision-layers / --load's FP8 choice needs --precision fp8");
      for (int64_t b : prec.high_precision_layers)
        if (b < 0 || b >= a.model.num_layers)
          fail("FP8 choice: block {} is not one of the model's {} layers", b, a.model.num_layers);
    }
    cluster.device.peak_flops(prec.compute);  // the device must have a peak for the precision

    return prec;
  }

  // What the flags pin of the layout (the search chooses the rest).
  plan::Constraints pins_of(const PlanArgs& a) {
    plan::Constraints pins;
    pins.claw_trainer = trainer_only;
    if (a.tp) pins.tp = a.tp;
    if (a.pp) pins.pp = a.pp;
    if (a.cp) pins.cp = a.cp;
    if (a.ep) pins.ep = a.ep;
    if (a.micro_batch_size) pins.micro_batch_size = a.micro_batch_size;
    if (a.ddp_bucket_size < 0) fail("--ddp-bucket-size {} must be positive (elements per gradient bucket)", a.ddp_bucket_size);
    if (a.ddp_bucket_size) pins.ddp_bucket_size = a.ddp_bucket_size;
    if (a.use_distributed_optimizer && a.zero_stage >= 0 && a.zero_stage != 1)
      fail("--use-distributed-optimizer means ZeRO stage 1 but --zero-stage {} was given; give one of them",
           a.zero_stage);
    if (a.use_distributed_optimizer) pins.zero_stage = 1;
    if (a.zero_stage >= 0) pins.zero_stage = a.zero_stage;
    if (a.sequence_parallel && a.no_sequence_parallel)
      fail("--sequence-parallel and --no-sequence-parallel contradict each other; give one");
    if (a.sequence_parallel) pins.sequence_parallel = true;
    if (a.no_sequence_parallel) pins.sequence_parallel = false;
    if (!a.recompute_granularity.empty()) {
      if (a.recompute_granularity == "full") pins.recompute = true;
      else if (a.recompute_granularity == "none") pins.recompute = false;
      else fail("--recompute-granularity {}: the planner models full or none", a.recompute_granularity);
    }
    if (!a.pipeline_schedule.empty()) pins.schedule = parallel::parse_schedule_kind(a.pipeline_schedule);
    if (a.layers_per_virtual_stage > 0) {
      if (!a.pp) fail("--num-layers-per-virtual-pipeline-stage needs --pipeline-model-parallel-size");
      if (a.model.num_layers % (a.layers_per_virtual_stage * a.pp) != 0)
        fail("--num-layers {} is not divisible by --pipeline-model-parallel-size {} x "
             "--num-layers-per-virtual-pipeline-stage {}",
             a.model.num_layers, a.pp, a.layers_per_virtual_stage);
      pins.virtual_stages = static_cast<int>(a.model.num_layers / (a.layers_per_virtual_stage * a.pp));
      if (!pins.schedule) pins.schedule = parallel::ScheduleKind::interleaved;
    } else if (a.pp) {
      pins.virtual_stages = 1;
    }
    return pins;
  }

  void print_json(const PlanArgs& a, const plan::Job& job, const plan::Cluster& cluster, const std::string& prec_name,
                  const plan::SearchResult& r, const std::optional<plan::DataCenterStrategies>& strategies) {
    const double tokens = static_cast<double>(a.global_batch_size * a.seq_length);
    nlohmann::json out = {{"model", a.model.name},
                          {"num_params", a.model.num_params()},
                          {"device", cluster.device.key},
                          {"num_gpus", a.num_gpus},
                          {"gpus_per_node", cluster.devices_per_node},
                          {"precision", prec_name},
                          {"seq_length", a.seq_length},
                          {"global_batch_size", a.global_batch_size},
                          {"considered", r.considered},
                          {"none_fit", r.none_fit},
                          {"layouts", nlohmann::json::array()},
                          {"rejected", nlohmann::json::array()}};
    for (size_t k = 0; k < r.ranked.size() && static_cast<int>(k) < top; ++k)
      out["layouts"].push_back(to_json(r.ranked[k], job, static_cast<int>(k) + 1));
    if (strategies) {
      const auto row = [&](double step) { return nlohmann::json{{"step_time_s", step}, {"tokens_per_s", tokens / step}}; };
      nlohmann::json d = {{"layout", r.ranked.front().layout.describe()},
                          {"one_dc", row(strategies->one_dc)},
                          {"flat", row(strategies->flat)},
                          {"hierarchical", row(strategies->hierarchical)},
                          {"hierarchical_overlapped", row(strategies->hierarchical_overlapped)},
                          {"diloco_delta_bits", a.diloco_delta_bits},
                          {"diloco", nlohmann::json::object()}};
      for (const auto& [h, step] : strategies->diloco) d["diloco"][std::to_string(h)] = row(step);
      out["data_centers"] = d;
    }
    if (show_rejected)
      for (size_t k = 0; k < r.rejected.size() && static_cast<int>(k) < top; ++k)
        out["rejected"].push_back(to_json(r.rejected[k], job, 0));
    std::cout << out.dump(2) << std::endl;
    if (r.ranked.empty()) fail("{}", r.none_fit);
  }

  void print_table(const PlanArgs& a, const plan::Job& job, const plan::Cluster& cluster, const std::string& prec_name,
                   const plan::SearchResult& r, const std::optional<plan::DataCenterStrategies>& strategies) {
    fmt::print("claw plan: {} ({:.2f}B parameters), {} x {} ({} per node{}), seq {}, global batch {}, {}\n",
               a.model.name, a.model.num_params() / 1e9, a.num_gpus, cluster.device.key, cluster.devices_per_node,
               a.data_centers > 1 ? fmt::format(", {} data centres", a.data_centers) : "", a.seq_length,
               a.global_batch_size, prec_name);
    fmt::print("{} valid layouts: {} fit in {:.1f} GiB, {} do not\n", r.considered, r.ranked.size(),
               gib(cluster.device.memory_bytes), r.rejected.size());
    if (r.ranked.empty()) {
      std::fflush(stdout);  // the error comes last, after the counts
      fail("{}", r.none_fit);
    }
    fmt::print("{:>3}  {:<34} {:>7} {:>26}  {:>8} {:>39}  {:>10} {:>9} {:>8} {:>6}\n", "#", "layout", "mem GiB",
               "(params+grads+opt+act)", "step s", "(compute+tp+cp+ep+bubble+dp+opt)", "tokens/s", "tok/s/dev",
               "TFLOP/s", "MFU");
    for (size_t k = 0; k < r.ranked.size() && static_cast<int>(k) < top; ++k) {
      const plan::Estimate& e = r.ranked[k];
      const plan::StageMemory& m = e.memory;
      const plan::StepTime& t = e.time;
      fmt::print("{:>3}  {:<34} {:>7.1f} {:>26}  {:>8.3f} {:>39}  {:>10.0f} {:>9.0f} {:>8.1f} {:>5.1f}%\n", k + 1,
                 e.layout.describe(), gib(m.total()),
                 fmt::format("({:.1f}+{:.1f}+{:.1f}+{:.1f})", gib(m.params), gib(m.grads),
                             gib(m.optimizer + m.zero_buffers), gib(m.activations + m.comm_buffers)),
                 t.total,
                 fmt::format("({:.2f}+{:.2f}+{:.2f}+{:.2f}+{:.2f}+{:.2f}+{:.2f})", t.compute, t.tp_comm, t.cp_comm,
                             t.ep_comm, t.bubble, t.dp_comm, t.optimizer),
                 e.tokens_per_s, e.tokens_per_s / a.num_gpus, e.model_tflops_per_device, 100 * e.mfu);
    }
    if (show_rejected)
      for (size_t k = 0; k < r.rejected.size() && static_cast<int>(k) < top; ++k)
        fmt::print("  does not fit: {:<34} {}\n", r.rejected[k].layout.describe(), r.rejected[k].why_not);
    fmt::print("best: claw train {}{}\n", r.ranked.front().layout.flags(job),
               a.data_centers > 1 ? fmt::format(" --data-centers {}", a.data_centers) : "");
    if (cluster.data_centers > 1) {
      fmt::print("{}\n", plan::advise_data_centers(r.ranked.front(), cluster).summary);
      const plan::DataCenterStrategies& s = *strategies;
      std::string diloco;
      for (const auto& [h, step] : s.diloco) diloco += fmt::format(", DiLoCo H={} {:.3f} s", h, step);
      fmt::print("step of the best layout across {} data centres: one data centre {:.3f} s; flat {:.3f} s; "
                 "hierarchical {:.3f} s, overlapped {:.3f} s{}{}\n",
                 cluster.data_centers, s.one_dc, s.flat, s.hierarchical, s.hierarchical_overlapped, diloco,
                 a.diloco_delta_bits < 32 ? fmt::format(" ({}-bit deltas)", a.diloco_delta_bits) : "");
    }
  }
};

}  // namespace

void add_plan_command(CLI::App& app) {
  auto cmd = std::make_shared<PlanCommand>();
  CLI::App* sub = app.add_subcommand(
      "plan", "choose the parallel layout for a model on a cluster: memory per device, step time, tokens/s, MFU");
  sub->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  sub->add_option("--model", cmd->model_arg,
                  "model preset, or a `claw train` TOML config; shape flags override it (default: gpt2-124m, or the "
                  "shape given by the flags alone)");
  sub->add_option("--hardware-catalog", cmd->catalog_file,
                  "TOML file of [device.<name>] tables adding to or replacing the built-in catalog");
  sub->add_flag("--json", cmd->json, "print the ranked layouts as JSON");
  sub->add_option("--top", cmd->top, "layouts to print")->default_val(10);
  sub->add_flag("--show-rejected", cmd->show_rejected, "also list layouts that do not fit, and why");
  sub->add_flag("--trainer-only", cmd->trainer_only,
                "only layouts `claw train` runs today (pipeline without ZeRO-2/3, overlap or recompute)");
  static const PlanArgs defaults;
  cmd->binder = std::make_unique<FlagBinder<PlanArgs>>(*sub, plan_flags(), defaults);
  sub->callback([cmd] { cmd->run(); });
}

}  // namespace claw::cli
