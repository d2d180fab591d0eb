// Dumps what the PyTorch reference (torch_reference.py) needs to check claw's
// model, and claw's own results to compare against:
//   init.safetensors   initial parameters (claw canonical names), metadata:
//                      config (JSON), hyper-parameters, no-decay list,
//                      frozen list (--freeze: no gradients, no AdamW state)
//   batch.safetensors  tokens/targets [steps, B, T] (int32)
//   step0.safetensors  logits [B*T, Vp] of the first batch at the initial
//                      weights, "grad.<name>" for every trainable parameter,
//                      and the loss
//   result.json        per-step loss, grad norm and lr over `steps` AdamW steps
//   final.safetensors  the parameters after those steps
//
// With --dpo-beta the loss is DPO's (train/dpo.h) instead: rows 2j and
// 2j + 1 of a batch are a pair sharing a prompt (its targets masked), the
// reference log-probabilities are the initial model's, and metadata "dpo"
// says beta and the loss type. dpo_step<s>.safetensors then holds, for
// every step, the parameters its gradients were taken at ("param.<name>"),
// the gradients and the loss (float64).
//
// With --grpo-generations G the loss is GRPO's (rl/grpo_loss.h): rows are
// completions in groups of G, each a prompt of T / 4 tokens (not learned)
// and a completion of its own length; rewards are random; the behaviour
// log-probabilities are the initial model's, perturbed by up to +-0.3 so
// that ratios leave the clip range both ways (stale samples); the
// reference is the initial model; with --importance-correction the
// proximal log-probabilities are claw's at each step's weights. Metadata
// "grpo" holds the options; grpo.safetensors the rewards [steps, B] and the
// behaviour log-probabilities [steps, B, T]; grpo_step<s>.safetensors, like
// dpo_step<s>, the weights, gradients and loss of every step and the
// proximal log-probabilities.
//
// Every step's gradients come from `accum` micro-batches (B / accum
// sequences each) to exercise accumulation; the reference uses whole batches.
#include <filesystem>
#include <fstream>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "claw/ckpt/safetensors.h"
#include "claw/core/error.h"
#include "claw/core/philox.h"
#include "claw/kernels/cpu/blas.h"
#include "claw/model/gpt.h"
#include "claw/optim/adamw.h"
#include "claw/optim/lr_schedule.h"
#include "claw/runtime/model_chunks.h"
#include "claw/rl/grpo_loss.h"
#include "claw/train/dpo.h"
#include "claw/train/step.h"

using namespace claw;

namespace {

nlohmann::json moe_json(const model::ModelConfig& c) {
  if (!c.moe.enabled()) return nullptr;
  nlohmann::json layers = nlohmann::json::array();
  for (int64_t l = 0; l < c.num_layers; ++l) layers.push_back(c.moe.is_moe_layer(l, c.num_layers));
  return {{"num_experts", c.moe.num_experts},
          {"topk", c.moe.router_topk},
          {"score", c.moe.router_score_function},
          {"aux_coeff", c.moe.aux_loss_coeff},
          {"z_coeff", c.moe.z_loss_coeff},
          {"expert_bias", c.moe.router_enable_expert_bias},
          {"bias_rate", c.moe.router_bias_update_rate},
          {"capacity", c.moe.expert_capacity_factor},
          {"drop", c.moe.token_drop_policy},
          {"ffn", c.moe_ffn()},
          {"shared", c.moe.shared_expert_intermediate_size},
          {"layers", layers}};
}

nlohmann::json config_json(const model::ModelConfig& c) {
  return {{"num_layers", c.num_layers},
          {"hidden_size", c.hidden_size},
          {"num_attention_heads", c.num_attention_heads},
          {"num_query_groups", c.kv_heads()},
          {"head_dim", c.head_dim()},
          {"ffn_hidden_size", c.ffn()},
          {"vocab_size", c.vocab_size},
          {"padded_vocab_size", c.padded_vocab_size()},
          {"max_position_embeddings", c.max_position_embeddings},
          {"normalization", std::string(model::to_string(c.normalization))},
          {"norm_epsilon", c.norm_epsilon},
          {"position_embedding_type", std::string(model::to_string(c.position_embedding_type))},
          {"rotary_base", c.rotary_base},
          {"mlp", std::string(model::to_string(c.mlp))},
          {"add_bias_linear", c.add_bias_linear},
          {"tied", c.tied()},
          {"moe", moe_json(c)}};
}

std::vector<ckpt::TensorView> param_views(model::GPT& m, bool grads, const std::string& prefix) {
  std::vector<ckpt::TensorView> v;
  for (const model::Param* p : m.store().params()) {
    if (grads && !p->spec.trainable) continue;  // frozen: no gradient
    std::vector<int64_t> shape;
    for (int i = 0; i < p->spec.shape.ndim(); ++i) shape.push_back(p->spec.shape[i]);
    v.push_back({prefix + p->spec.name, DType::f32, shape, grads ? p->gdata() : p->data()});
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  kernels::ensure_fast_blas(argc, argv);
  CLI::App app("claw parity dump");
  std::string preset = "gpt2-tiny", out, freeze, dpo_loss = "sigmoid";
  rl::GrpoConfig grpo{.num_generations = 0, .clip_eps_low = 0.2, .clip_eps_high = 0.28};
  double dpo_beta = 0;
  int64_t B = 4, T = 64, steps = 10, accum = 2, seed = 1234, threads = 2, vocab = 0;
  app.add_option("--model", preset);
  app.add_option("--out", out)->required();
  app.add_option("--batch", B);
  app.add_option("--seq", T);
  app.add_option("--steps", steps);
  app.add_option("--accum", accum);
  app.add_option("--seed", seed);
  app.add_option("--threads", threads);
  app.add_option("--freeze", freeze, "comma-separated glob patterns of parameters that do not train");
  app.add_option("--vocab-size", vocab, "override the preset's vocabulary (0: keep it)");
  double moe_z = -1;
  app.add_option("--moe-z-loss-coeff", moe_z, "override the preset's router z-loss coefficient");
  app.add_option("--dpo-beta", dpo_beta, "DPO's loss with this beta instead of the language-model loss (0: off)");
  app.add_option("--dpo-loss", dpo_loss, "with --dpo-beta: sigmoid, ipo or hinge");
  app.add_option("--grpo-generations", grpo.num_generations, "GRPO's loss over groups of this many rows (0: off)");
  app.add_option("--kl-beta", grpo.kl_beta, "with --grpo-generations: the k3 penalty's weight");
  app.add_flag("--importance-correction", grpo.importance_correction, "with --grpo-generations");
  app.add_option("--loss-agg-mode", grpo.loss_agg_mode, "with --grpo-generations");
  app.add_flag("--advantage-no-std", grpo.advantage_no_std, "with --grpo-generations");
  app.add_flag("--learner-batch-invariant", grpo.learner_batch_invariant,
               "with --grpo-generations: the forward in the engine's batch-invariant kernels");
  CLI11_PARSE(app, argc, argv);
  try {
    CLAW_CHECK(B % accum == 0, "--batch must be a multiple of --accum");
    std::filesystem::create_directories(out);
    CpuCtx cpu = kernels::make_cpu_ctx(static_cast<int>(threads));
    model::ModelConfig cfg = model::model_preset(preset);
    if (vocab > 0) cfg.vocab_size = vocab;
    if (moe_z >= 0) cfg.moe.z_loss_coeff = moe_z;
    model::StoreOptions storage;
    for (size_t b = 0; !freeze.empty();) {
      const size_t e = freeze.find(',', b);
      storage.freeze.push_back(freeze.substr(b, e == std::string::npos ? e : e - b));
      if (e == std::string::npos) break;
      b = e + 1;
    }
    model::GPT m(cfg, storage);
    m.init_weights(cpu, static_cast<uint64_t>(seed));
    const int64_t mb = B / accum;
    m.reserve(mb, T);

    // Hyper-parameters exercised: warmup then cosine, clipping that engages
    // (a small clip value), decoupled weight decay on matrices only.
    optim::AdamWConfig adam{.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .clip_grad = 0.5};
    optim::LrSchedule sched{.max_lr = 3e-3, .min_lr = 3e-4, .warmup_iters = 3, .decay_iters = steps,
                            .style = optim::DecayStyle::cosine};
    optim::AdamW opt(m.store(), adam);

    // Random token batches, one per step (Philox, so the dump is reproducible).
    std::vector<int32_t> tokens(steps * B * T), targets(steps * B * T);
    RandomStream rng(static_cast<uint64_t>(seed), hash_name("parity.batch"));
    for (int64_t i = 0; i < steps * B * T; ++i) {
      tokens[i] = static_cast<int32_t>(rng.block(i)[0] % cfg.vocab_size);
      targets[i] = static_cast<int32_t>(rng.block(i)[1] % cfg.vocab_size);
    }
    const bool dpo = dpo_beta > 0;
    if (dpo) {  // pairs: a shared prompt of T / 4 tokens (not learned); the rejected side learns 3 tokens fewer
      CLAW_CHECK((B / accum) % 2 == 0, "--dpo-beta needs micro-batches of whole pairs");
      const int64_t P = T / 4;
      for (int64_t r = 0; r < steps * B; r += 2) {
        std::copy_n(&tokens[r * T], P, &tokens[(r + 1) * T]);
        std::copy_n(&targets[r * T], P, &targets[(r + 1) * T]);
        for (int64_t side = 0; side < 2; ++side)
          for (int64_t t = 0; t < P - 1; ++t) targets[(r + side) * T + t] = -1;
        for (int64_t t = T - 3; t < T; ++t) targets[(r + 1) * T + t] = -1;
      }
    }

    const bool grpo_on = grpo.num_generations > 0;
    std::vector<int64_t> completion_len(static_cast<size_t>(steps * B));
    if (grpo_on) {  // a prompt of T / 4 tokens, then a completion of T / 2 + (r * 7) % (T / 4) tokens
      CLAW_CHECK(B % grpo.num_generations == 0, "--batch must hold whole groups of --grpo-generations");
      const int64_t P = T / 4;
      for (int64_t r = 0; r < steps * B; ++r) {
        const int64_t n = T / 2 + (r * 7) % (T / 4);
        completion_len[r] = n;
        for (int64_t t = 0; t < T; ++t)
          if (t < P - 1 || t >= P - 1 + n) targets[r * T + t] = -1;
      }
    }

    nlohmann::json meta = {{"config", config_json(cfg)},
                           {"batch", B}, {"seq", T}, {"steps", steps}, {"accum", accum},
                           {"adam", {{"beta1", adam.beta1}, {"beta2", adam.beta2}, {"eps", adam.eps},
                                     {"weight_decay", adam.weight_decay}, {"clip_grad", adam.clip_grad}}}};
    nlohmann::json no_decay = nlohmann::json::array(), frozen = nlohmann::json::array(),
                   buffers = nlohmann::json::array();
    for (const model::Param* p : m.store().params()) {
      if (!p->spec.weight_decay) no_decay.push_back(p->spec.name);
      if (p->spec.buffer)
        buffers.push_back(p->spec.name);  // no gradient, moved by its own rule (the MoE expert bias)
      else if (!p->spec.trainable)
        frozen.push_back(p->spec.name);
    }
    meta["buffers"] = buffers;
    meta["no_decay"] = no_decay;
    meta["dpo"] = dpo ? nlohmann::json{{"beta", dpo_beta}, {"loss", dpo_loss}} : nlohmann::json();
    meta["grpo"] = grpo_on ? nlohmann::json{{"num_generations", grpo.num_generations},
                                            {"clip_eps_low", grpo.clip_eps_low},
                                            {"clip_eps_high", grpo.clip_eps_high},
                                            {"kl_beta", grpo.kl_beta},
                                            {"importance_correction", grpo.importance_correction},
                                            {"is_truncation", grpo.is_truncation},
                                            {"loss_agg_mode", grpo.loss_agg_mode},
                                            {"advantage_no_std", grpo.advantage_no_std},
                                            {"prompt_len", T / 4}}
                           : nlohmann::json();
    meta["frozen"] = frozen;
    ckpt::write_safetensors(out + "/init.safetensors", param_views(m, false, ""), {{"meta", meta.dump()}});
    ckpt::write_safetensors(out + "/batch.safetensors",
                            {{"tokens", DType::i32, {steps, B, T}, tokens.data()},
                             {"targets", DType::i32, {steps, B, T}, targets.data()}});

    // Step 0 in detail: gradients accumulated over micro-batches, and the logits
    // of the whole batch (forward only, micro-batch by micro-batch).
    std::vector<float> logits(B * T * cfg.padded_vocab_size());
    train::GlobalBatch batch(accum, mb, T, data::PackingOptions{});
    runtime::ModelChunks whole(m, nullptr, accum, mb, T);
    nlohmann::json result;
    // DPO's reference: the initial model's log-probability of every sample.
    std::vector<double> reference(static_cast<size_t>(steps * B));
    std::unique_ptr<train::DpoLoss> dpo_loss_fn;
    if (dpo) {
      train::SequenceLogps record([&](int64_t sample, double logp) { reference[sample] = logp; });
      for (int64_t s = 0; s < steps; ++s) {
        const int64_t off = s * B * T;
        batch.assign({tokens.begin() + off, tokens.begin() + off + B * T},
                     {targets.begin() + off, targets.begin() + off + B * T});
        train::eval_loss(whole, cpu, batch, static_cast<uint64_t>(seed), static_cast<uint64_t>(s * B), &record);
      }
      dpo_loss_fn = std::make_unique<train::DpoLoss>(train::DpoConfig{.enabled = true, .beta = dpo_beta,
                                                                      .loss_type = dpo_loss},
                                                     [&](int64_t sample) { return reference[sample]; });
    }
    // GRPO: every step's completions, their rewards and behaviour
    // log-probabilities (the initial model's, perturbed), and the reference.
    std::vector<std::vector<rl::PolicySample>> grpo_batches(static_cast<size_t>(steps));
    std::vector<double> rewards(static_cast<size_t>(steps * B));
    std::vector<float> behaviour(static_cast<size_t>(steps * B * T), 0.0f);
    std::unique_ptr<rl::GrpoLoss> grpo_loss_fn;
    if (grpo_on) {
      const int64_t P = T / 4;
      std::vector<float> initial(static_cast<size_t>(steps * B * T), 0.0f);
      rl::TokenLogps record([&](int64_t sample, int64_t t, float lp) { initial[sample * T + t] = lp; },
                            grpo.learner_batch_invariant);
      for (int64_t s = 0; s < steps; ++s) {
        const int64_t off = s * B * T;
        batch.assign({tokens.begin() + off, tokens.begin() + off + B * T},
                     {targets.begin() + off, targets.begin() + off + B * T});
        train::eval_loss(whole, cpu, batch, static_cast<uint64_t>(seed), static_cast<uint64_t>(s * B), &record);
      }
      RandomStream noise(static_cast<uint64_t>(seed), hash_name("parity.grpo"));
      for (int64_t r = 0; r < steps * B; ++r) rewards[r] = static_cast<double>(noise.block(r)[0] % 1000) / 1000.0;
      for (int64_t s = 0; s < steps; ++s) {
        const std::vector<double> adv =
            rl::group_advantages({rewards.begin() + s * B, rewards.begin() + (s + 1) * B}, grpo.num_generations,
                                 grpo.advantage_no_std);
        for (int64_t b = 0; b < B; ++b) {
          const int64_t r = s * B + b;
          rl::PolicySample ps{.prompt_len = P, .advantage = adv[b]};
          for (int64_t j = 0; j < completion_len[r]; ++j) {
            const int64_t t = P - 1 + j;
            const float u = static_cast<float>(noise.block(steps * B + r * T + t)[1] % 2001) / 1000.0f - 1.0f;
            behaviour[r * T + t] = initial[r * T + t] + 0.3f * u;
            ps.behaviour.push_back(behaviour[r * T + t]);
            if (grpo.kl_beta > 0) ps.reference.push_back(initial[r * T + t]);
          }
          grpo_batches[s].push_back(std::move(ps));
        }
      }
      grpo_loss_fn = std::make_unique<rl::GrpoLoss>(grpo);
      ckpt::write_safetensors(out + "/grpo.safetensors", {{"rewards", DType::f64, {steps, B}, rewards.data()},
                                                          {"behaviour", DType::f32, {steps, B, T}, behaviour.data()}});
    }
    std::vector<float> proximal(static_cast<size_t>(B * T), 0.0f);
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t off = s * B * T;
      batch.assign({tokens.begin() + off, tokens.begin() + off + B * T},
                   {targets.begin() + off, targets.begin() + off + B * T});
      if (grpo_on) {
        if (grpo.importance_correction) {  // the learner's own log-probabilities before the update
          std::fill(proximal.begin(), proximal.end(), 0.0f);
          rl::TokenLogps record([&](int64_t sample, int64_t t, float lp) { proximal[(sample - s * B) * T + t] = lp; },
                                grpo.learner_batch_invariant);
          train::eval_loss(whole, cpu, batch, static_cast<uint64_t>(seed), static_cast<uint64_t>(s * B), &record);
          for (int64_t b = 0; b < B; ++b) {
            rl::PolicySample& ps = grpo_batches[s][b];
            ps.proximal.clear();
            for (int64_t j = 0; j < completion_len[s * B + b]; ++j)
              ps.proximal.push_back(proximal[b * T + ps.prompt_len - 1 + j]);
          }
        }
        grpo_loss_fn->set_batch(s * B, &grpo_batches[s]);
      }
      if (s == 0) {
        model::StepCtx ctx{.cpu = cpu, .B = mb, .T = T};
        for (int64_t k = 0; k < accum; ++k) {
          m.forward(ctx, batch.micro(k).tokens, batch.micro(k).targets, 0.0);
          m.logits(ctx, logits.data() + k * mb * T * cfg.padded_vocab_size());
        }
      }
      double lr = sched.at(s);
      auto dump_step0 = [&](const train::StepResult& r) {
        if (dpo) {  // every step: the weights its gradients were taken at, the gradients, the loss
          auto views = param_views(m, true, "grad.");
          for (const ckpt::TensorView& v : param_views(m, false, "param.")) views.push_back(v);
          const double loss = r.loss;
          views.push_back({"loss", DType::f64, {1}, &loss});
          ckpt::write_safetensors(fmt::format("{}/dpo_step{}.safetensors", out, s), views);
        }
        if (grpo_on) {  // the same, with the proximal log-probabilities the step used
          auto views = param_views(m, true, "grad.");
          for (const ckpt::TensorView& v : param_views(m, false, "param.")) views.push_back(v);
          const double loss = r.loss;
          views.push_back({"loss", DType::f64, {1}, &loss});
          views.push_back({"proximal", DType::f32, {B, T}, proximal.data()});
          ckpt::write_safetensors(fmt::format("{}/grpo_step{}.safetensors", out, s), views);
        }
        if (s != 0) return;
        auto views = param_views(m, true, "grad.");
        float loss_value = static_cast<float>(r.loss);
        views.push_back({"logits", DType::f32, {B * T, cfg.padded_vocab_size()}, logits.data()});
        views.push_back({"loss", DType::f32, {1}, &loss_value});
        ckpt::write_safetensors(out + "/step0.safetensors", views);
      };
      train::StepResult r = train::train_step(whole, opt, cpu, batch, s, lr, static_cast<uint64_t>(seed),
                                              static_cast<uint64_t>(s * B), dump_step0,
                                              grpo_on ? static_cast<model::SequenceLoss*>(grpo_loss_fn.get())
                                                      : dpo_loss_fn.get());
      result["losses"].push_back(r.loss);
      result["grad_norms"].push_back(r.grad_norm);
      result["lrs"].push_back(lr);
    }
    std::ofstream(out + "/result.json") << result.dump(1) << "\n";
    ckpt::write_safetensors(out + "/final.safetensors", param_views(m, false, ""));
  } catch (const Error& e) {
    std::fprintf(stderr, "parity_dump: %s\n", e.what());
    return 1;
  }
  return 0;
}
