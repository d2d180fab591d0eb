// ParamStore: sharded parameters (tensor parallelism) and sharded buffers
// (ZeRO) hold exactly their slice of what one rank holding everything has.
#include <gtest/gtest.h>

#include <vector>

#include "claw/core/error.h"
#include "claw/core/storage.h"
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
    ASSERT_EQ(part.regions().size(), 1u);
    const StoreRegion& r = part.regions()[0];
    for (int64_t i = r.shard_lo(); i < r.shard_hi(); ++i)
      ASSERT_EQ(part.value_shard(0)[i - r.shard_lo()], full.values()[i]) << "shard " << shard << " element " << i;
  }
}

// Frozen parameters: values in a region of their own, no gradient buffer,
// no optimizer segment; the trainable ones keep values and gradients at
// equal offsets of their region.
TEST(ParamStore, FrozenParametersHoldValuesOnly) {
  Param a = make("a", {5, 7}), b = make("b", {6, 4}), c = make("c", {3});
  b.spec.trainable = false;
  ParamStore store({&a, &b, &c});
  store.init(ctx, 9);
  ASSERT_EQ(store.regions().size(), 2u);
  EXPECT_TRUE(store.regions()[0].trainable);
  EXPECT_FALSE(store.regions()[1].trainable);
  EXPECT_EQ(store.regions()[0].params, (std::vector<size_t>{0, 2}));
  EXPECT_EQ(store.regions()[1].params, (std::vector<size_t>{1}));
  // a: 35 floats -> 48 with alignment, c: 3 -> 16; b: 24 -> 32.
  EXPECT_EQ(store.grad_total(), 48 + 16);
  EXPECT_EQ(store.grad_bytes(), (48 + 16) * sizeof(float));
  EXPECT_EQ(store.total(), 48 + 16 + 32);
  EXPECT_EQ(store.frozen_numel(), 24);
  EXPECT_FALSE(b.grad.defined());
  EXPECT_EQ(store.grad_offset(1), -1);
  EXPECT_EQ(c.gdata() - store.grads(), store.grad_offset(2));
  EXPECT_EQ(c.data() - store.values(), store.value_offset(2));
  EXPECT_EQ(b.data() - store.values(), 64);
  const std::vector<Segment> segs = store.full_segments();
  ASSERT_EQ(segs.size(), 2u);
  EXPECT_EQ(segs[0].param, &a);
  EXPECT_EQ(segs[1].param, &c);
  // Initialisation is keyed by name, not position.
  Param a1 = make("a", {5, 7}), b1 = make("b", {6, 4}), c1 = make("c", {3});
  ParamStore all({&a1, &b1, &c1});
  all.init(ctx, 9);
  EXPECT_EQ(values(b), values(b1));
  EXPECT_EQ(values(a), values(a1));
  EXPECT_EQ(values(c), values(c1));
}

TEST(ParamStore, ZeroShardsSplitEachRegion) {
  Param a = make("a", {5, 7}), b = make("b", {6, 4});
  b.spec.trainable = false;
  ParamStore full({&a, &b});
  full.init(ctx, 9);
  for (int shard = 0; shard < 3; ++shard) {
    Param a2 = make("a", {5, 7}), b2 = make("b", {6, 4});
    b2.spec.trainable = false;
    ParamStore part({&a2, &b2}, {.shards = 3, .shard = shard, .shard_values = true, .shard_grads = true});
    part.init(ctx, 9);
    ASSERT_EQ(part.regions().size(), 2u);
    size_t held = 0;
    for (int r = 0; r < 2; ++r) {
      const StoreRegion& g = part.regions()[r];
      EXPECT_EQ(g.total % (16 * 3), 0);
      held += g.shard_size();
      for (int64_t i = g.shard_lo(); i < g.shard_hi(); ++i)
        ASSERT_EQ(part.value_shard(r)[i - g.shard_lo()], full.values()[g.value_base + i])
            << "region " << r << " shard " << shard << " element " << i;
    }
    EXPECT_EQ(part.value_bytes(), held * sizeof(float));
    EXPECT_EQ(part.grad_bytes(), part.regions()[0].shard_size() * sizeof(float));
  }
}

TEST(ParamStore, FreezePatternsNameWhatTheyMiss) {
  const std::vector<std::string> names = {"embedding.word_embeddings.weight", "layers.0.mlp.fc.weight"};
  EXPECT_TRUE(matches_any({"layers.*.mlp.*"}, "layers.12.mlp.fc.bias"));
  EXPECT_FALSE(matches_any({"layers.*.mlp.*"}, "layers.1.attention.q_proj.weight"));
  check_patterns_match({"embedding.*", "layers.*.mlp.*"}, names, "--freeze");
  try {
    check_patterns_match({"embedding.*", "layers.*.mlpx.*"}, names, "--freeze");
    FAIL() << "a pattern matching nothing was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--freeze 'layers.*.mlpx.*' matches no parameter"), std::string::npos)
        << e.what();
  }
}

// The three roles of a store and their dtypes: fp32 everywhere by default,
// where the layers read the masters themselves; a bf16 compute copy is a
// buffer of its own, laid out like the values, holding each master value
// rounded to nearest even after init and after every refresh.
TEST(ParamStore, RolesDefaultToFp32AndShareTheValues) {
  Param a = make("a", {5, 7}), b = make("b", {3});
  ParamStore store({&a, &b});
  EXPECT_EQ(store.dtypes().of(ParamRole::master), DType::f32);
  EXPECT_EQ(store.dtypes().of(ParamRole::compute), DType::f32);
  EXPECT_EQ(store.dtypes().of(ParamRole::grad), DType::f32);
  EXPECT_EQ(store.compute_bytes(), 0u);
  EXPECT_EQ(a.compute.raw(), a.value.raw());
  EXPECT_EQ(a.compute.dtype(), DType::f32);
}

TEST(ParamStore, ComputeCopyHoldsTheMastersRounded) {
  for (DType compute : {DType::bf16, DType::f16}) {
    Param a = make("a", {5, 7}), b = make("b", {3}), frozen = make("c", {4, 2});
    b.spec.init = Init::ones;
    frozen.spec.trainable = false;
    StoreOptions opts;
    opts.dtypes.compute = compute;
    ParamStore store({&a, &b, &frozen}, opts);
    // Laid out like the values, at two bytes an element; the memory plan counts it.
    EXPECT_EQ(store.compute_bytes(), store.value_bytes() / 2);
    EXPECT_EQ(ParamStore::layout({&a.spec, &b.spec, &frozen.spec}, opts).compute_bytes, store.compute_bytes());
    store.init(ctx, 3);
    auto check = [&](const char* when) {
      for (const Param* p : {&a, &b, &frozen}) {
        ASSERT_EQ(p->compute.dtype(), compute);
        ASSERT_EQ(p->compute.shape(), p->value.shape());
        const auto* bits = static_cast<const uint16_t*>(p->compute.raw());
        for (int64_t i = 0; i < p->value.numel(); ++i) {
          const float v = p->data()[i];
          const uint16_t want = compute == DType::bf16 ? narrow<bfloat16>(v).bits : narrow<float16>(v).bits;
          ASSERT_EQ(bits[i], want) << when << ": " << p->spec.name << "[" << i << "]";
        }
      }
    };
    check("after init");
    for (int64_t i = 0; i < a.value.numel(); ++i) a.data()[i] += 1e-3f * static_cast<float>(i);
    store.refresh_compute(ctx);
    check("after refresh");
  }
}

TEST(ParamStore, RoleDtypesAreValidated) {
  Param a = make("a", {4});
  auto build = [&](StoreDtypes d) {
    StoreOptions opts;
    opts.dtypes = d;
    ParamStore store({&a}, opts);
  };
  EXPECT_THROW(build({.master = DType::bf16}), Error);
  EXPECT_THROW(build({.grad = DType::bf16}), Error);
  EXPECT_THROW(build({.compute = DType::e4m3}), Error);
  try {
    build({.compute = DType::i32});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("compute copy of the parameters must be f32, bf16 or f16 (got i32)"),
              std::string::npos)
        << e.what();
  }
  // ZeRO-3 shards the masters; its compute copies would be gathered, not kept.
  StoreOptions sharded;
  sharded.shards = 2;
  sharded.shard_values = sharded.shard_grads = true;
  sharded.dtypes.compute = DType::bf16;
  EXPECT_THROW(ParamStore({&a}, sharded), Error);
}

}  // namespace
}  // namespace claw::model
