// ParamStore: sharded parameters (tensor parallelism) and sharded buffers
// (ZeRO) hold exactly their slice of what one rank holding everything has.
#include <gtest/gtest.h>

#include <vector>

#include "claw/model/param.h"

namespace claw::model {
namespace {

const CpuCtx ctx{2};

Param make(const std::string& name, Shape shape, int dim = -1, int count = 1, int index = 0) {
  Param p;
  p.spec = {.name = name, .shape = shape, .init_std = 0.5, .init_rows = shape.ndim() > 1 ? shape[0] - 1 : -1};
  p.spec.shard_dim = dim;
  p.spec.shard_count = count;
  p.spec.shard_index = index;
  return p;
}

std::vector<float> values(const Param& p) { return {p.data(), p.data() + p.spec.local_shape().numel()}; }

TEST(ParamStore, TensorParallelSlicesInitialiseAsTheirPartOfTheWhole) {
  const Shape shape{6, 4, 3};
  Param whole = make("w", shape);
  ParamStore full({&whole});
  full.init(ctx, 5);
  const std::vector<float> all = values(whole);  // the last row is init_rows padding: zero
  for (int dim = 0; dim < 3; ++dim) {
    const int count = static_cast<int>(shape[dim]) % 3 == 0 ? 3 : 2;
    for (int index = 0; index < count; ++index) {
      Param part = make("w", shape, dim, count, index);
      ParamStore store({&part});
      store.init(ctx, 5);
      const Shape local = part.spec.local_shape();
      EXPECT_EQ(local[dim], shape[dim] / count);
      const std::vector<float> got = values(part);
      // Walk the local tensor and compare with the whole at the shifted coordinate.
      int64_t i = 0;
      for (int64_t a = 0; a < local[0]; ++a)
        for (int64_t b = 0; b < local[1]; ++b)
          for (int64_t c = 0; c < local[2]; ++c, ++i) {
            int64_t x[3] = {a, b, c};
            x[dim] += index * local[dim];
            const int64_t g = (x[0] * shape[1] + x[1]) * shape[2] + x[2];
            ASSERT_EQ(part.spec.global_index(i), g);
            ASSERT_EQ(got[i], all[g]) << "dim " << dim << " slice " << index << " element " << i;
          }
    }
  }
}

TEST(ParamStore, ZeroShardsHoldTheirRangeOfTheFlatBuffer) {
  Param a = make("a", {5, 7}), b = make("b", {3});
  ParamStore full({&a, &b});
  full.init(ctx, 9);
  for (int shard = 0; shard < 3; ++shard) {
    Param a2 = make("a", {5, 7}), b2 = make("b", {3});
    ParamStore part({&a2, &b2}, {.shards = 3, .shard = shard, .shard_values = true, .shard_grads = true});
    part.init(ctx, 9);
    EXPECT_EQ(part.total() % (16 * 3), 0);
    EXPECT_FALSE(a2.value.defined());
    for (int64_t i = part.shard_lo(); i < part.shard_hi(); ++i)
      ASSERT_EQ(part.value_shard()[i - part.shard_lo()], full.values()[i]) << "shard " << shard << " element " << i;
  }
}

}  // namespace
}  // namespace claw::model
