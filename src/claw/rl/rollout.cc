#include "claw/rl/rollout.h"

#include <cstring>

#include "claw/core/error.h"
#include "claw/core/philox.h"

namespace claw::rl {

namespace {
class Writer {
 public:
  template <typename T>
  void put(const T& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
  }
  template <typename T>
  void put_vector(const std::vector<T>& v) {
    put<int64_t>(static_cast<int64_t>(v.size()));
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    out.insert(out.end(), p, p + v.size() * sizeof(T));
  }
  std::vector<uint8_t> out;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& b) : b_(b) {}
  template <typename T>
  T get() {
    CLAW_CHECK(pos_ + sizeof(T) <= b_.size(), "truncated trajectory message ({} bytes)", b_.size());
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  template <typename T>
  std::vector<T> get_vector() {
    const auto n = static_cast<size_t>(get<int64_t>());
    CLAW_CHECK(pos_ + n * sizeof(T) <= b_.size(), "truncated trajectory message ({} bytes)", b_.size());
    std::vector<T> v(n);
    std::memcpy(v.data(), b_.data() + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return v;
  }
  bool done() const { return pos_ == b_.size(); }

 private:
  const std::vector<uint8_t>& b_;
  size_t pos_ = 0;
};
}  // namespace

std::vector<uint8_t> encode_trajectories(const std::vector<Trajectory>& ts) {
  Writer w;
  w.put<int64_t>(static_cast<int64_t>(ts.size()));
  for (const Trajectory& t : ts) {
    w.put(t.prompt);
    w.put(t.step);
    w.put(t.slot);
    w.put(t.version);
    w.put<uint8_t>(t.truncated);
    w.put(t.reward);
    w.put_vector(t.prompt_tokens);
    w.put_vector(t.completion);
    w.put_vector(t.logprobs);
    w.put_vector(t.learn);
    w.put_vector(std::vector<char>(t.reply.begin(), t.reply.end()));
    w.put<uint8_t>(static_cast<uint8_t>(t.env));
    w.put(t.turns);
    w.put(t.unaligned);
  }
  return std::move(w.out);
}

std::vector<Trajectory> decode_trajectories(const std::vector<uint8_t>& bytes) {
  Reader r(bytes);
  std::vector<Trajectory> ts(static_cast<size_t>(r.get<int64_t>()));
  for (Trajectory& t : ts) {
    t.prompt = r.get<int64_t>();
    t.step = r.get<int64_t>();
    t.slot = r.get<int64_t>();
    t.version = r.get<int64_t>();
    t.truncated = r.get<uint8_t>() != 0;
    t.reward = r.get<double>();
    t.prompt_tokens = r.get_vector<int32_t>();
    t.completion = r.get_vector<int32_t>();
    t.logprobs = r.get_vector<float>();
    t.learn = r.get_vector<uint8_t>();
    const std::vector<char> reply = r.get_vector<char>();
    t.reply.assign(reply.begin(), reply.end());
    t.env = static_cast<EnvStatus>(r.get<uint8_t>());
    t.turns = r.get<int32_t>();
    t.unaligned = r.get<int32_t>();
  }
  CLAW_CHECK(r.done(), "trailing bytes in a trajectory message");
  return ts;
}

Generator::Generator(const model::ModelConfig& cfg, const CpuCtx& cpu, int64_t max_seqs, int64_t max_model_len,
                     const EnvSetup* env)
    : cpu_(cpu), model_(std::make_unique<model::GPT>(cfg)) {
  serve::EngineConfig ec;
  ec.max_model_len = max_model_len;
  ec.max_num_seqs = max_seqs;
  // Every sequence's whole context at once, plus a block each for the
  // prefix cache's partial last blocks: no preemption in a step.
  ec.num_blocks = max_seqs * ((max_model_len + ec.block_size - 1) / ec.block_size + 1);
  if (env)
    env_ = std::make_unique<EnvEpisodes>(*model_, cpu_, ec, *env);
  else
    engine_ = std::make_unique<serve::Engine>(*model_, cpu_, ec);
}

Generator::~Generator() = default;

std::vector<Trajectory> Generator::generate(const std::vector<RolloutRequest>& requests, int64_t group, int64_t step,
                                            const SamplingConfig& sampling, bool greedy) {
  CLAW_CHECK(version_ >= 0, "a generator samples only after its first weight set");
  const int64_t per = greedy ? 1 : group;
  // Completion k of request r: out[r per + k], sampled with seed[r per + k].
  std::vector<Trajectory> out(requests.size() * static_cast<size_t>(per));
  std::vector<uint64_t> seed(out.size());
  const RandomStream seeds(sampling.seed, hash_name("rl.rollout"));
  for (size_t r = 0; r < requests.size(); ++r)
    for (int64_t k = 0; k < per; ++k) {
      const size_t i = r * static_cast<size_t>(per) + static_cast<size_t>(k);
      Trajectory& t = out[i];
      t.prompt = requests[r].prompt;
      t.step = step;
      t.slot = requests[r].slot;
      t.version = version_;
      t.prompt_tokens = requests[r].tokens;
      const Philox::Block b = seeds.block(static_cast<uint64_t>(step), static_cast<uint64_t>(requests[r].slot * per + k));
      seed[i] = (static_cast<uint64_t>(b[0]) << 32) | b[1];
    }
  if (env_) {
    std::vector<std::string> prompts;
    for (const RolloutRequest& q : requests)
      for (int64_t k = 0; k < per; ++k) prompts.push_back(q.env_prompt);
    env_->run(out, prompts, seed, sampling, greedy);
    return out;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    Trajectory& t = out[i];
    t.truncated = true;
    serve::GenerationRequest g;
    g.prompt = t.prompt_tokens;
    g.max_tokens = sampling.max_new_tokens;
    g.stop_tokens = sampling.stop_tokens;
    g.sampling.temperature = greedy ? 0.0 : sampling.temperature;
    g.sampling.seed = seed[i];
    g.on_token = [&t](const serve::TokenOutput& o) {
      if (o.prompt) return true;
      t.completion.push_back(o.token);
      t.logprobs.push_back(static_cast<float>(o.logprob));
      if (o.finish != serve::FinishReason::none) t.truncated = o.finish == serve::FinishReason::length;
      return true;
    };
    engine_->add(std::move(g));
  }
  while (engine_->step()) {
  }
  return out;
}

}  // namespace claw::rl
