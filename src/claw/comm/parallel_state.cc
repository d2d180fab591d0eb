#include "claw/comm/parallel_state.h"

#include <algorithm>
#include <array>
#include <cctype>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "claw/core/error.h"

namespace claw::comm {
namespace {

constexpr std::array<std::string_view, 5> kNames = {"tp", "cp", "ep", "dp", "pp"};
constexpr std::string_view kDefaultOrder = "tp-cp-ep-dp-pp";

std::vector<std::string> split_dashes(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t dash = s.find('-', start);
    out.emplace_back(s.substr(start, dash == std::string_view::npos ? std::string_view::npos : dash - start));
    if (dash == std::string_view::npos) return out;
    start = dash + 1;
  }
}

// Size of each dimension of `order`, taking tp/cp/ep/dp/pp from `by_name`
// (indexed like kNames).
std::vector<int> ordered_sizes(const std::string& order, const std::array<int, 5>& by_name) {
  std::vector<int> sizes;
  for (const std::string& n : split_dashes(order))
    sizes.push_back(by_name[std::find(kNames.begin(), kNames.end(), n) - kNames.begin()]);
  return sizes;
}

// Megatron's RankGenerator.get_mask: true for the dimensions of `order` named in `token`.
std::vector<bool> token_mask(const std::string& order, std::string_view token) {
  const std::vector<std::string> dims = split_dashes(order);
  std::vector<bool> mask(dims.size(), false);
  for (const std::string& t : split_dashes(token)) {
    auto it = std::find(dims.begin(), dims.end(), t);
    if (it == dims.end())
      fail("unknown parallel dimension '{}' in group token '{}' (names: tp, cp, ep, dp, pp joined by '-')", t, token);
    mask[it - dims.begin()] = true;
  }
  return mask;
}

std::array<int, 5> dense_sizes(const RankGrid& g) { return {g.tp, g.cp, 1, g.dp, g.pp}; }
std::array<int, 5> expert_sizes(const RankGrid& g) { return {g.etp, 1, g.ep, g.expert_dp, g.pp}; }

}  // namespace

std::vector<std::vector<int>> masked_orthogonal_rank_groups(int world_size, const std::vector<int>& sizes,
                                                            const std::vector<bool>& mask) {
  CLAW_CHECK(sizes.size() == mask.size(), "{} sizes, {} mask entries", sizes.size(), mask.size());
  // A rank is sum(coordinate[i] * stride[i]) with stride the exclusive prefix
  // product of the sizes (first dimension fastest). A group fixes the
  // unmasked coordinates (numbered by the group index, mixed radix over the
  // unmasked sizes in order) and walks the masked ones (mixed radix over the
  // masked sizes, first fastest) -- Megatron-Core's decompose/inner_product.
  std::vector<int> masked_size, masked_stride, unmasked_size, unmasked_stride;
  int stride = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    CLAW_CHECK(sizes[i] >= 1, "dimension {} has size {}", i, sizes[i]);
    (mask[i] ? masked_size : unmasked_size).push_back(sizes[i]);
    (mask[i] ? masked_stride : unmasked_stride).push_back(stride);
    stride *= sizes[i];
  }
  CLAW_CHECK(stride == world_size, "grid sizes {} multiply to {}, not the world size {}", sizes, stride, world_size);

  // rank offset of `index` written in mixed radix `radix`, each digit scaled by `strides`.
  auto offset = [](int index, const std::vector<int>& radix, const std::vector<int>& strides) {
    int r = 0;
    for (size_t i = 0; i < radix.size(); ++i) {
      r += (index % radix[i]) * strides[i];
      index /= radix[i];
    }
    return r;
  };
  int group_size = 1;
  for (int s : masked_size) group_size *= s;
  const int num_groups = world_size / group_size;
  std::vector<std::vector<int>> groups(num_groups, std::vector<int>(group_size));
  for (int g = 0; g < num_groups; ++g) {
    const int base = offset(g, unmasked_size, unmasked_stride);
    for (int i = 0; i < group_size; ++i) groups[g][i] = base + offset(i, masked_size, masked_stride);
  }
  return groups;
}

RankGrid RankGrid::make(int world_size, const ParallelSizes& s) {
  CLAW_CHECK(world_size >= 1, "world size {}", world_size);
  auto positive = [](int v, const char* flag) {
    if (v < 1) fail("{} {} must be at least 1", flag, v);
  };
  positive(s.tp, "--tensor-model-parallel-size");
  positive(s.cp, "--context-parallel-size");
  positive(s.ep, "--expert-model-parallel-size");
  positive(s.pp, "--pipeline-model-parallel-size");
  if (s.etp != 0) positive(s.etp, "--expert-tensor-parallel-size");

  RankGrid g;
  g.world = world_size;
  g.tp = s.tp;
  g.cp = s.cp;
  g.ep = s.ep;
  g.etp = s.etp > 0 ? s.etp : s.tp;
  g.pp = s.pp;
  g.order = s.order;
  std::transform(g.order.begin(), g.order.end(), g.order.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::vector<std::string> dims = split_dashes(g.order);
  std::vector<std::string> sorted_dims = dims, sorted_names(kNames.begin(), kNames.end());
  std::sort(sorted_dims.begin(), sorted_dims.end());
  std::sort(sorted_names.begin(), sorted_names.end());
  if (sorted_dims != sorted_names)
    fail("--parallel-order '{}' must name each of tp, cp, ep, dp, pp exactly once, joined by '-' (default {})", s.order,
         kDefaultOrder);

  const int model = g.tp * g.cp * g.pp;
  if (world_size % model != 0)
    fail("world size {} is not divisible by --tensor-model-parallel-size {} x --context-parallel-size {} x "
         "--pipeline-model-parallel-size {} = {}; use sizes whose product divides the {} ranks",
         world_size, g.tp, g.cp, g.pp, model, world_size);
  g.dp = world_size / model;
  const int expert_model = g.etp * g.ep * g.pp;
  if (world_size % expert_model != 0) {
    if (s.etp == 0)  // ETP = TP
      fail("--expert-model-parallel-size {} must divide data-parallel x context-parallel = {} (data-parallel {} = "
           "world {} / (tp {} x cp {} x pp {}), --context-parallel-size {})",
           g.ep, g.dp * g.cp, g.dp, world_size, g.tp, g.cp, g.pp, g.cp);
    fail("--expert-tensor-parallel-size {} x --expert-model-parallel-size {} x --pipeline-model-parallel-size {} = {} "
         "does not divide the world size {}; the expert grid needs ETP x EP x PP to divide the ranks",
         g.etp, g.ep, g.pp, expert_model, world_size);
  }
  g.expert_dp = world_size / expert_model;
  positive(s.instances, "--num-distributed-optimizer-instances");
  positive(s.inter_streams, "--inter-dc-streams");
  g.instances = s.instances;
  if (g.dp * g.cp % g.instances != 0)
    fail("--num-distributed-optimizer-instances {} does not divide data-parallel x context-parallel = {} (dp {} x cp "
         "{}): each instance (data centre) holds whole model replicas",
         g.instances, g.dp * g.cp, g.dp, g.cp);

  // Megatron-Core builds the expert grid with the same order and CP folded
  // into its data-parallel size; a pipeline stage must still be the same set
  // of ranks in both grids (initialize_model_parallel's two assertions).
  if (g.pp > 1 && dims.back() != "pp" && g.expert_dp != g.dp)
    fail("--parallel-order '{}' does not end with pp, so the expert layers' data-parallel size ({} = dp {} x cp {} / "
         "ep {}) must equal the dense one ({}); put pp last or use --expert-model-parallel-size equal to "
         "--context-parallel-size",
         g.order, g.expert_dp, g.dp, g.cp, g.ep, g.dp);
  if (g.pp > 1 && g.groups("pp") != g.expert_groups("pp"))
    fail("--parallel-order '{}': the pipeline groups of the dense and expert layers differ (cp and ep lie on "
         "different sides of pp); put pp last or put cp and ep on the same side of pp",
         g.order);
  return g;
}

std::vector<std::vector<int>> RankGrid::groups(std::string_view token) const {
  return masked_orthogonal_rank_groups(world, ordered_sizes(order, dense_sizes(*this)), token_mask(order, token));
}

std::vector<std::vector<int>> RankGrid::expert_groups(std::string_view token) const {
  return masked_orthogonal_rank_groups(world, ordered_sizes(order, expert_sizes(*this)), token_mask(order, token));
}

std::vector<std::vector<int>> RankGrid::embedding_groups() const {
  std::vector<std::vector<int>> out;
  for (const std::vector<int>& stages : groups("pp")) {
    // Megatron-Core's default_embedding_ranks: the first and last stage.
    if (stages.size() == 1)
      out.push_back({stages.front()});
    else
      out.push_back({stages.front(), stages.back()});
    for (size_t i = 1; i + 1 < stages.size(); ++i) out.push_back({stages[i]});
  }
  return out;
}

std::vector<std::vector<int>> RankGrid::instance_groups(bool intra) const {
  std::vector<std::vector<int>> out;
  for (const std::vector<int>& ranks : groups("dp-cp")) {
    const size_t per = ranks.size() / static_cast<size_t>(instances);
    for (size_t i = 0; i < (intra ? static_cast<size_t>(instances) : per); ++i) {
      out.emplace_back();
      if (intra)
        out.back().assign(ranks.begin() + static_cast<long>(i * per), ranks.begin() + static_cast<long>((i + 1) * per));
      else
        for (size_t k = i; k < ranks.size(); k += per) out.back().push_back(ranks[k]);
    }
  }
  return out;
}

int RankGrid::coordinate(std::string_view name, int r) const {
  CLAW_CHECK(r >= 0 && r < world, "rank {} outside the world of {}", r, world);
  const std::array<int, 5> by_name = dense_sizes(*this);
  int stride = 1;
  for (const std::string& n : split_dashes(order)) {
    const int size = by_name[std::find(kNames.begin(), kNames.end(), n) - kNames.begin()];
    if (n == name) return r / stride % size;
    stride *= size;
  }
  CLAW_CHECK(false, "no dimension {} in order {}", name, order);
  return 0;
}

int RankGrid::tp_rank(int r) const { return coordinate("tp", r); }
int RankGrid::cp_rank(int r) const { return coordinate("cp", r); }
int RankGrid::dp_rank(int r) const { return coordinate("dp", r); }
int RankGrid::pp_rank(int r) const { return coordinate("pp", r); }

std::string RankGrid::describe() const {
  std::string s = fmt::format("world {} = tp {} x cp {} x dp {} x pp {}, ep {}{} (expert dp {})", world, tp, cp, dp,
                              pp, ep, etp != tp ? fmt::format(" x etp {}", etp) : "", expert_dp);
  if (order != kDefaultOrder) s += fmt::format(", order {}", order);
  if (instances > 1)
    s += fmt::format(", {} distributed-optimizer instances of {} dp x cp ranks", instances, dp * cp / instances);
  return s;
}

std::unique_ptr<ParallelState> ParallelState::create(World& world, const ParallelSizes& sizes) {
  auto ps = std::make_unique<ParallelState>();
  ps->grid_ = RankGrid::make(world.size(), sizes);
  const RankGrid& g = ps->grid_;
  // Every rank splits in this same order: each split is collective over the world.
  ps->world_ = world.world_group();
  ps->tp_ = world.split("tp", g.groups("tp"));
  ps->cp_ = world.split("cp", g.groups("cp"));
  ps->dp_ = world.split("dp", g.groups("dp"));
  ps->pp_ = world.split("pp", g.groups("pp"));
  ps->dp_cp_ = world.split("dp_cp", g.groups("dp-cp"));
  ps->mp_ = world.split("mp", g.groups("tp-pp"));
  ps->ep_ = world.split("ep", g.expert_groups("ep"));
  ps->expert_dp_ = world.split("expert_dp", g.expert_groups("dp"));
  ps->embedding_ = world.split("embedding", g.embedding_groups());
  if (g.instances > 1) {
    ps->dp_intra_ = world.split("dp_intra", g.instance_groups(true));
    for (int k = 0; k < sizes.inter_streams; ++k)
      ps->dp_inter_.push_back(
          world.split(sizes.inter_streams == 1 ? "dp_inter" : fmt::format("dp_inter{}", k), g.instance_groups(false)));
    // Groups whose members sit in different instances carry long-haul
    // traffic: their messages say so (a timeout there is likely the link).
    std::vector<int> instance(static_cast<size_t>(g.world));
    for (const std::vector<int>& ranks : g.groups("dp-cp"))
      for (size_t i = 0; i < ranks.size(); ++i)
        instance[static_cast<size_t>(ranks[i])] = static_cast<int>(i / (ranks.size() / static_cast<size_t>(g.instances)));
    const std::string span = fmt::format("(across {} data centres)", g.instances);
    for (Group* grp : {ps->world_.get(), ps->tp_.get(), ps->cp_.get(), ps->dp_.get(), ps->pp_.get(), ps->dp_cp_.get(),
                       ps->mp_.get(), ps->ep_.get(), ps->expert_dp_.get(), ps->embedding_.get()})
      for (int r : grp->world_ranks())
        if (instance[static_cast<size_t>(r)] != instance[static_cast<size_t>(grp->world_ranks().front())]) {
          grp->set_span(span);
          break;
        }
    for (const auto& grp : ps->dp_inter_) grp->set_span(span);
  } else {
    ps->dp_intra_ = ps->dp_cp_;
    ps->dp_inter_.push_back(std::make_shared<SelfGroup>("dp_inter", world.rank()));
  }
  return ps;
}

std::string ParallelState::describe() const { return grid_.describe(); }

}  // namespace claw::comm
