// The CUDA kernels (kernels/cuda/ops.h) against the CPU kernels they mirror.
//
// Each test draws random inputs (std::mt19937, a fresh seed per test), runs
// the CPU kernel with CpuCtx{.num_threads = 4} and the CUDA one on the same
// data, and compares ||gpu - cpu|| / ||cpu|| (2-norms over the whole output)
// against 1e-5 for fp32 results. Outputs are poisoned with NaN (all-ones
// bytes) before each GPU run, so an element the kernel leaves unwritten fails
// the comparison. Exact contracts are tested exactly: dropout masks,
// bf16 conversions, first_non_finite; AdamW by its largest ulp difference.
// Every comparison prints its figure, so the log shows the margins.
//
// Without a CUDA device every test is skipped.
#include "cuda_test.h"

namespace claw::kernels {
namespace {

using namespace cuda_test;

TEST_F(CudaKernels, Gemm) {
  std::mt19937 gen(101);
  const int64_t M = 67, N = 45, K = 33;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 1;
      auto A = random_floats((ta ? K : M) * lda, gen);
      auto B = random_floats((tb ? N : K) * ldb, gen);
      auto C = random_floats(M * ldc, gen);
      std::vector<float> ref = C;
      gemm(ta, tb, M, N, K, 0.7f, A.data(), lda, B.data(), ldb, 0.3f, ref.data(), ldc);
      Buf<float> dA(A), dB(B), dC(C);
      gpu::gemm(gctx(), ta, tb, M, N, K, 0.7f, dA.get(), lda, dB.get(), ldb, 0.3f, dC.get(), ldc);
      const std::string what = std::string("C ") + (ta ? "T" : "N") + (tb ? "T" : "N");
      EXPECT_CLOSE(what.c_str(), dC.download(), ref, kTol);
    }
}

TEST_F(CudaKernels, GemmBf16) {
  // Reference: the fp32 product of the bf16-rounded inputs. cuBLAS accumulates
  // in fp32 but may split K differently; 1e-3 is loose for that on purpose.
  std::mt19937 gen(102);
  const int64_t M = 96, N = 80, K = 128;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const int64_t lda = ta ? M : K, ldb = tb ? K : N, ldc = N;
      auto A = random_floats(M * K, gen), B = random_floats(K * N, gen), C = random_floats(M * N, gen);
      std::vector<uint16_t> A16(A.size()), B16(B.size());
      for (size_t i = 0; i < A.size(); ++i) A16[i] = f32_to_bf16(A[i]), A[i] = bf16_to_f32(A16[i]);
      for (size_t i = 0; i < B.size(); ++i) B16[i] = f32_to_bf16(B[i]), B[i] = bf16_to_f32(B16[i]);
      std::vector<float> ref = C;
      gemm(ta, tb, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 0.5f, ref.data(), ldc);
      Buf<uint16_t> dA(A16), dB(B16);
      Buf<float> dC(C);
      gpu::gemm_bf16(gctx(), ta, tb, M, N, K, 1.0f, dA.get(), lda, dB.get(), ldb, 0.5f, dC.get(), ldc);
      const std::string what = std::string("C ") + (ta ? "T" : "N") + (tb ? "T" : "N");
      EXPECT_CLOSE(what.c_str(), dC.download(), ref, 1e-3);
    }
}

TEST_F(CudaKernels, LinearForward) {
  std::mt19937 gen(103);
  const int64_t M = 70, K = 48, N = 36;
  auto inp = random_floats(M * K, gen), w = random_floats(N * K, gen), bias = random_floats(N, gen);
  Buf<float> dinp(inp), dw(w), dbias(bias), dout(M * N);
  for (int with_bias = 0; with_bias < 2; ++with_bias) {
    std::vector<float> ref(M * N);
    linear_forward(cpu, ref.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, M, K, N);
    dout.poison();
    gpu::linear_forward(gctx(), dout.get(), dinp.get(), dw.get(), with_bias ? dbias.get() : nullptr, M, K, N);
    EXPECT_CLOSE(with_bias ? "out (bias)" : "out (no bias)", dout.download(), ref, kTol);
  }
}

TEST_F(CudaKernels, LinearBackwardInput) {
  std::mt19937 gen(104);
  const int64_t M = 70, K = 48, N = 36;
  auto dout = random_floats(M * N, gen), w = random_floats(N * K, gen), dinp0 = random_floats(M * K, gen);
  Buf<float> ddout(dout), dw(w), ddinp(M * K);
  for (int acc = 0; acc < 2; ++acc) {
    std::vector<float> ref = dinp0;
    linear_backward_input(cpu, ref.data(), dout.data(), w.data(), M, K, N, acc != 0);
    if (acc)
      ddinp.upload(dinp0);
    else
      ddinp.poison();
    gpu::linear_backward_input(gctx(), ddinp.get(), ddout.get(), dw.get(), M, K, N, acc != 0);
    EXPECT_CLOSE(acc ? "dinp (accumulate)" : "dinp (overwrite)", ddinp.download(), ref, kTol);
  }
}

TEST_F(CudaKernels, LinearBackwardWeight) {
  std::mt19937 gen(105);
  const int64_t M = 70, K = 48, N = 36;
  auto dout = random_floats(M * N, gen), inp = random_floats(M * K, gen);
  auto dw0 = random_floats(N * K, gen), db0 = random_floats(N, gen);  // pre-filled: checks +=
  std::vector<float> dw = dw0, db = db0;
  linear_backward_weight(cpu, dw.data(), db.data(), dout.data(), inp.data(), M, K, N);
  Buf<float> ddout(dout), dinp(inp), ddw(dw0), ddb(db0);
  gpu::linear_backward_weight(gctx(), ddw.get(), ddb.get(), ddout.get(), dinp.get(), M, K, N);
  EXPECT_CLOSE("dweight", ddw.download(), dw, kTol);
  EXPECT_CLOSE("dbias", ddb.download(), db, kTol);
}

// ---- reductions and element-wise ---------------------------------------------------------

TEST_F(CudaKernels, SumSquares) {
  std::mt19937 gen(106);
  for (int64_t n : {int64_t{5}, int64_t{1000003}, int64_t{3000017}}) {
    auto x = random_floats(n, gen, -3.f, 3.f);
    const double ref = sum_squares(cpu, x.data(), n);
    Buf<float> dx(x);
    const double got = gpu::sum_squares(gctx(), dx.get(), n);
    const double again = gpu::sum_squares(gctx(), dx.get(), n);
    const double e = std::abs(got - ref) / ref;
    std::printf("  %-24s n=%-10lld rel err %.3e (tol 1e-12)\n", test_name().c_str(), static_cast<long long>(n), e);
    EXPECT_LE(e, 1e-12);
    EXPECT_EQ(got, again) << "not deterministic";
  }
}

TEST_F(CudaKernels, Sum) {
  std::mt19937 gen(107);
  const int64_t n = 777777;
  auto x = random_floats(n, gen, -1.f, 2.f);
  double ref = 0;
  for (float v : x) ref += v;
  Buf<float> dx(x);
  const double got = gpu::sum(gctx(), dx.get(), n);
  const double e = std::abs(got - ref) / std::abs(ref);
  std::printf("  %-24s %-28s rel err %.3e (tol 1e-12)\n", test_name().c_str(), "sum", e);
  EXPECT_LE(e, 1e-12);
  EXPECT_EQ(gpu::sum(gctx(), dx.get(), 0), 0.0);
}

TEST_F(CudaKernels, AddAxpyScale) {
  std::mt19937 gen(108);
  const int64_t n = 100003;
  auto a = random_floats(n, gen), b = random_floats(n, gen);
  Buf<float> da(a), db(b), dout(n);
  std::vector<float> ref(n);
  add(cpu, ref.data(), a.data(), b.data(), n);
  dout.poison();
  gpu::add(gctx(), dout.get(), da.get(), db.get(), n);
  EXPECT_CLOSE("add", dout.download(), ref, 0.0);
  gpu::add(gctx(), da.get(), da.get(), db.get(), n);  // out aliases a
  EXPECT_CLOSE("add in place", da.download(), ref, 0.0);

  std::vector<float> y = b;
  axpy(cpu, y.data(), 0.37f, a.data(), n);
  da.upload(a);
  gpu::axpy(gctx(), db.get(), 0.37f, da.get(), n);
  EXPECT_CLOSE("axpy", db.download(), y, 1e-6);  // an FMA on either side moves the last bit

  std::vector<float> s = a;
  kernels::scale(cpu, s.data(), -1.7f, n);
  gpu::scale(gctx(), da.get(), -1.7f, n);
  EXPECT_CLOSE("scale", da.download(), s, 0.0);
}

TEST_F(CudaKernels, MulScaleRows) {
  std::mt19937 gen(109);
  const int64_t rows = 37, cols = 1001;
  auto x = random_floats(rows * cols, gen), w = random_floats(rows * cols, gen), wr = random_floats(rows, gen);
  std::vector<float> ref = x, ref_rows = x;
  for (int64_t i = 0; i < rows * cols; ++i) ref[i] *= w[i];
  for (int64_t i = 0; i < rows * cols; ++i) ref_rows[i] *= wr[i / cols];
  Buf<float> dx(x), dw(w), dwr(wr);
  gpu::mul(gctx(), dx.get(), dw.get(), rows * cols);
  EXPECT_CLOSE("mul", dx.download(), ref, 0.0);
  dx.upload(x);
  gpu::scale_rows(gctx(), dx.get(), dwr.get(), rows, cols);
  EXPECT_CLOSE("scale_rows", dx.download(), ref_rows, 0.0);
}

TEST_F(CudaKernels, FirstNonFinite) {
  std::mt19937 gen(110);
  const int64_t n = 300001;
  auto x = random_floats(n, gen, -100.f, 100.f);
  Buf<float> dx(x);
  EXPECT_EQ(gpu::first_non_finite(gctx(), dx.get(), n), -1);
  x[200000] = std::numeric_limits<float>::infinity();
  x[123457] = std::numeric_limits<float>::quiet_NaN();
  x[299999] = -std::numeric_limits<float>::infinity();
  dx.upload(x);
  const int64_t got = gpu::first_non_finite(gctx(), dx.get(), n);
  std::printf("  %-24s planted NaN at 123457, got %lld (cpu %lld)\n", test_name().c_str(), static_cast<long long>(got),
              static_cast<long long>(first_non_finite(cpu, x.data(), n)));
  EXPECT_EQ(got, 123457);
  EXPECT_EQ(gpu::first_non_finite(gctx(), dx.get(), 123457), -1);  // the prefix before the NaN
  EXPECT_EQ(gpu::first_non_finite(gctx(), dx.get() + 123458, n - 123458), 200000 - 123458);
}

TEST_F(CudaKernels, Gelu) {
  std::mt19937 gen(111);
  const int64_t n = 200003;
  auto x = random_floats(n, gen, -6.f, 6.f), dy = random_floats(n, gen);
  std::vector<float> y(n), dx(n);
  gelu_forward(cpu, y.data(), x.data(), n);
  gelu_backward(cpu, dx.data(), dy.data(), x.data(), n);
  Buf<float> dX(x), dDy(dy), dY(n), dDx(n);
  dY.poison();
  dDx.poison();
  gpu::gelu_forward(gctx(), dY.get(), dX.get(), n);
  gpu::gelu_backward(gctx(), dDx.get(), dDy.get(), dX.get(), n);
  EXPECT_CLOSE("y", dY.download(), y, kTol);
  EXPECT_CLOSE("dx", dDx.download(), dx, kTol);
}

TEST_F(CudaKernels, SwiGLU) {
  std::mt19937 gen(112);
  const int64_t n = 200003;
  auto g = random_floats(n, gen, -8.f, 8.f), u = random_floats(n, gen), dy = random_floats(n, gen);
  std::vector<float> y(n), dg(n), du(n);
  swiglu_forward(cpu, y.data(), g.data(), u.data(), n);
  swiglu_backward(cpu, dg.data(), du.data(), dy.data(), g.data(), u.data(), n);
  Buf<float> dG(g), dU(u), dDy(dy), dY(n), dDg(n), dDu(n);
  dY.poison();
  dDg.poison();
  dDu.poison();
  gpu::swiglu_forward(gctx(), dY.get(), dG.get(), dU.get(), n);
  gpu::swiglu_backward(gctx(), dDg.get(), dDu.get(), dDy.get(), dG.get(), dU.get(), n);
  EXPECT_CLOSE("y", dY.download(), y, kTol);
  EXPECT_CLOSE("dgate", dDg.download(), dg, kTol);
  EXPECT_CLOSE("dup", dDu.download(), du, kTol);
}

TEST_F(CudaKernels, Bf16Conversions) {
  std::mt19937 gen(113);
  const int64_t n = 65536 + 16;
  auto x = random_floats(n, gen, -1e3f, 1e3f);
  // Specials and ties: NaN, +-inf, +-0, a tie to even each way, overflow to inf, a subnormal.
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), 0.0f, -0.0f, 1.00390625f, 1.01171875f,
                            3.4e38f, 1e-40f, -std::numeric_limits<float>::quiet_NaN()};
  std::copy(std::begin(specials), std::end(specials), x.begin());
  std::vector<uint16_t> ref(n);
  for (int64_t i = 0; i < n; ++i) ref[i] = f32_to_bf16(x[i]);
  Buf<float> dx(x);
  Buf<uint16_t> dh(n);
  dh.poison();
  gpu::to_bf16(gctx(), dh.get(), dx.get(), n);
  auto got = dh.download();
  int64_t mismatches = 0;
  for (int64_t i = 0; i < n; ++i) mismatches += got[i] != ref[i];
  std::printf("  %-24s to_bf16 mismatches %lld of %lld\n", test_name().c_str(), static_cast<long long>(mismatches),
              static_cast<long long>(n));
  EXPECT_EQ(mismatches, 0);
  // Every bf16 bit pattern back to fp32.
  std::vector<uint16_t> all(65536);
  std::iota(all.begin(), all.end(), uint16_t{0});
  Buf<uint16_t> dall(all);
  Buf<float> dback(65536);
  dback.poison();
  gpu::from_bf16(gctx(), dback.get(), dall.get(), 65536);
  auto back = dback.download();
  int64_t bad = 0;
  for (int i = 0; i < 65536; ++i) {
    const float r = bf16_to_f32(all[i]);
    bad += std::memcmp(&r, &back[i], 4) != 0;
  }
  std::printf("  %-24s from_bf16 mismatches %lld of 65536\n", test_name().c_str(), static_cast<long long>(bad));
  EXPECT_EQ(bad, 0);
}

// 16-bit activations (--bf16, --fp16): the CPU entry points of
// cpu/bf16_gemm.h called with a context that carries the GPU route to
// kernels/cuda; the bits must be the CPU's for every non-NaN input (NaN
// stays NaN; its payload is the hardware's).
TEST_F(CudaKernels, HalfActivations) {
  std::mt19937 gen(131);
  const int64_t n = 65536 + 24;
  auto x = random_floats(n, gen, -7e4f, 7e4f);
  auto small = random_floats(n / 2, gen, -1e-4f, 1e-4f);  // f16 subnormals and bf16 ties
  std::copy(small.begin(), small.end(), x.begin() + n / 4);
  const float specials[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(), 0.0f,
                            -0.0f, 1.00390625f, 1.01171875f, 3.4e38f, 1e-40f, 65504.0f, 65519.0f, 65520.0f,
                            -65520.0f, 5.96e-8f, 2.98e-8f, std::numeric_limits<float>::quiet_NaN()};
  std::copy(std::begin(specials), std::end(specials), x.begin());
  CpuCtx on_gpu = cpu;
  on_gpu.gpu = &gctx();
  auto same = [](float a, float b) { return std::isnan(a) ? std::isnan(b) : std::memcmp(&a, &b, 4) == 0; };
  for (DType t : {DType::bf16, DType::f16}) {
    const char* name = t == DType::bf16 ? "bf16" : "f16";
    // round in place
    std::vector<float> ref = x;
    round_half_values(cpu, t, ref.data(), n);
    Buf<float> dx(x);
    round_half_values(on_gpu, t, dx.get(), n);
    auto got = dx.download();
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) bad += !same(ref[i], got[i]);
    // pack, then unpack what was packed
    std::vector<uint16_t> bits(n);
    pack_half(cpu, t, x.data(), bits.data(), n);
    Buf<float> dx2(x);
    Buf<uint16_t> dbits(n);
    dbits.poison();
    pack_half(on_gpu, t, dx2.get(), dbits.get(), n);
    auto gbits = dbits.download();
    int64_t bad_pack = 0;
    for (int64_t i = 0; i < n; ++i) bad_pack += std::isnan(x[i]) ? 0 : gbits[i] != bits[i];
    std::vector<float> back(n);
    unpack_half(cpu, t, bits.data(), back.data(), n);
    Buf<uint16_t> dref_bits(bits);
    Buf<float> dback(n);
    dback.poison();
    unpack_half(on_gpu, t, dref_bits.get(), dback.get(), n);
    auto gback = dback.download();
    int64_t bad_unpack = 0;
    for (int64_t i = 0; i < n; ++i) bad_unpack += !same(back[i], gback[i]);
    std::printf("  %-24s %-4s mismatches: round %lld, pack %lld, unpack %lld of %lld\n", test_name().c_str(), name,
                static_cast<long long>(bad), static_cast<long long>(bad_pack), static_cast<long long>(bad_unpack),
                static_cast<long long>(n));
    EXPECT_EQ(bad, 0) << name;
    EXPECT_EQ(bad_pack, 0) << name;
    EXPECT_EQ(bad_unpack, 0) << name;
  }
}

// The linear layers' bias broadcast and the device operand path of --bf16:
// x rounded into a scratch slot, the routed gemm_bf16, against the CPU's
// gemm_bf16 on round_to_bf16 operands (exact products; summation order
// differs).
TEST_F(CudaKernels, Bf16OperandsAndBias) {
  std::mt19937 gen(132);
  const int64_t M = 300, K = 192, N = 136;
  auto x = random_floats(M * K, gen), w = random_floats(N * K, gen), bias = random_floats(N, gen);
  std::vector<float> fx, fw;
  std::vector<uint16_t> bx, bw;
  const Bf16Operand cx = round_to_bf16(cpu, x.data(), M * K, fx, bx);
  const Bf16Operand cw = round_to_bf16(cpu, w.data(), N * K, fw, bw);
  std::vector<float> ref(M * N);
  gemm_bf16(cpu, false, true, M, N, K, 1.0f, cx, K, cw, K, 0.0f, ref.data(), N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t j = 0; j < N; ++j) ref[m * N + j] += bias[j];
  CpuCtx on_gpu = cpu;
  on_gpu.gpu = &gctx();
  Buf<float> dx(x), dw(w), dbias(bias), dy(M * N);
  dy.poison();
  const Bf16Operand gx{.bits = gpu::bf16_in_scratch(gctx(), dx.get(), M * K, 0)};
  const Bf16Operand gw{.bits = gpu::bf16_in_scratch(gctx(), dw.get(), N * K, 1)};
  gemm_bf16(on_gpu, false, true, M, N, K, 1.0f, gx, K, gw, K, 0.0f, dy.get(), N);
  gpu::add_bias(gctx(), dy.get(), dbias.get(), M, N);
  EXPECT_CLOSE("x W^T + b on bf16", dy.download(), ref, 1e-5);
}

TEST_F(CudaKernels, Dropout) {
  std::mt19937 gen(114);
  const int64_t n = 250007;
  const double p = 0.1;
  const RandomStream rng(1234, hash_name("layer.3.attn_dropout"));
  const uint64_t index0 = (uint64_t{1} << 33) + 17;  // counters above 32 bits
  auto x = random_floats(n, gen), dy = random_floats(n, gen);
  std::vector<float> y(n), dx(n);
  dropout_forward(cpu, y.data(), x.data(), n, p, rng, index0);
  dropout_backward(cpu, dx.data(), dy.data(), n, p, rng, index0);
  Buf<float> dX(x), dY(n), dDy(dy);
  dY.poison();
  gpu::dropout_forward(gctx(), dY.get(), dX.get(), n, p, rng, index0);
  gpu::dropout_backward(gctx(), dDy.get(), dDy.get(), n, p, rng, index0);  // in place
  auto gy = dY.download(), gdx = dDy.download();
  int64_t mask_diff = 0, value_diff = 0, dropped = 0;
  for (int64_t i = 0; i < n; ++i) {
    mask_diff += (gy[i] == 0.f) != (y[i] == 0.f);
    value_diff += std::memcmp(&gy[i], &y[i], 4) != 0 || std::memcmp(&gdx[i], &dx[i], 4) != 0;
    dropped += y[i] == 0.f;
  }
  std::printf("  %-24s dropped %lld of %lld (p=%.2f); mask diffs %lld, value diffs %lld\n", test_name().c_str(),
              static_cast<long long>(dropped), static_cast<long long>(n), p, static_cast<long long>(mask_diff),
              static_cast<long long>(value_diff));
  EXPECT_EQ(mask_diff, 0);
  EXPECT_EQ(value_diff, 0);
  EXPECT_GT(dropped, n / 20);
  // p = 0 copies.
  dY.poison();
  gpu::dropout_forward(gctx(), dY.get(), dX.get(), n, 0.0, rng, index0);
  EXPECT_CLOSE("p=0 copy", dY.download(), x, 0.0);
}

TEST_F(CudaKernels, AdamW) {
  // The GPU rounds every operation separately (no FMA), as PyTorch's tensor
  // ops do. The CPU build may let GCC contract a multiply-add (C++ mode does
  // not imply -ffp-contract=off), which moves a result by up to one rounding
  // of the larger term: off by ulps of the result only where two terms cancel.
  // So an element passes at <= 1 ulp, or within 2^-23 of its terms' magnitude.
  std::mt19937 gen(115);
  const int64_t n = 100003;
  auto p = random_floats(n, gen), m = random_floats(n, gen, -0.1f, 0.1f), v = random_floats(n, gen, 0.f, 0.01f);
  Buf<float> dp(p), dm(m), dv(v), dg(n);
  int64_t worst = 0, over_one = 0, bad = 0, exact = 0, total = 0;
  for (int64_t step = 1; step <= 4; ++step) {
    auto g = random_floats(n, gen, -2.f, 2.f);
    AdamWHyper h;
    h.lr = 1e-2;
    h.beta1 = 0.9;
    h.beta2 = 0.95;
    h.eps = 1e-8;
    h.weight_decay = 0.1;
    h.grad_scale = 0.7;
    h.step = step;
    const std::vector<float> p0 = p, m0 = m, v0 = v;
    adamw_update(cpu, p.data(), m.data(), v.data(), g.data(), n, h);
    dg.upload(g);
    gpu::adamw_update(gctx(), dp.get(), dm.get(), dv.get(), dg.get(), n,
                      gpu::AdamWArgs{h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.grad_scale, h.step});
    auto gp = dp.download(), gm = dm.download(), gv = dv.download();
    for (int64_t i = 0; i < n; ++i) {
      const float gs = g[i] * static_cast<float>(h.grad_scale);
      // Magnitudes of the two terms each result is a sum of.
      const double mag_m = std::abs(m0[i] * h.beta1) + std::abs((1 - h.beta1) * gs);
      const double mag_v = std::abs(v0[i] * h.beta2) + std::abs((1 - h.beta2) * gs * gs);
      const double mag_p = std::abs(p0[i]) + std::abs(static_cast<double>(p[i]) - p0[i]);
      const float got[3] = {gp[i], gm[i], gv[i]}, ref[3] = {p[i], m[i], v[i]};
      const double mag[3] = {mag_p, mag_m, mag_v};
      for (int j = 0; j < 3; ++j) {
        const int64_t u = ulp_distance(got[j], ref[j]);
        worst = std::max(worst, u);
        over_one += u > 1;
        exact += u == 0;
        ++total;
        if (u > 1 && std::abs(static_cast<double>(got[j]) - ref[j]) > mag[j] * 0x1p-23) ++bad;
      }
    }
    // Continue both from the CPU state, so one step's difference cannot compound.
    dp.upload(p);
    dm.upload(m);
    dv.upload(v);
  }
  std::printf("  %-24s max ulp %lld; bit-exact %lld of %lld; >1 ulp %lld (all from cancellation unless bad=%lld)\n",
              test_name().c_str(), static_cast<long long>(worst), static_cast<long long>(exact),
              static_cast<long long>(total), static_cast<long long>(over_one), static_cast<long long>(bad));
  EXPECT_EQ(bad, 0);
}

// ---- embedding, norms, rope ---------------------------------------------------------------

TEST_F(CudaKernels, Embedding) {
  std::mt19937 gen(116);
  const int64_t B = 3, T = 41, C = 72, V = 29, P = 64;  // few tokens: many repeats
  std::vector<int32_t> tokens(B * T), positions(B * T);
  std::uniform_int_distribution<int32_t> tok(0, V - 1), pos(0, P - 1);
  for (auto& t : tokens) t = tok(gen);
  for (auto& p : positions) p = pos(gen);
  auto wte = random_floats(V * C, gen), wpe = random_floats(P * C, gen), dout = random_floats(B * T * C, gen);
  Buf<int32_t> dtok(tokens), dpos(positions);
  Buf<float> dwte(wte), dwpe(wpe), dOut(B * T * C), dDout(dout);
  for (int variant = 0; variant < 3; ++variant) {
    const float* cwpe = variant == 0 ? nullptr : wpe.data();
    const int32_t* cpos = variant == 2 ? positions.data() : nullptr;
    std::vector<float> ref(B * T * C);
    embedding_forward(cpu, ref.data(), tokens.data(), wte.data(), cwpe, B, T, C, cpos);
    dOut.poison();
    gpu::embedding_forward(gctx(), dOut.get(), dtok.get(), dwte.get(), variant == 0 ? nullptr : dwpe.get(), B, T, C,
                           variant == 2 ? dpos.get() : nullptr);
    const char* names[] = {"out (wte only)", "out (wte + wpe)", "out (positions)"};
    EXPECT_CLOSE(names[variant], dOut.download(), ref, kTol);
  }
  // Backward into pre-filled gradients (+=), with and without positions, and with dwte null.
  auto gte0 = random_floats(V * C, gen), gpe0 = random_floats(P * C, gen);
  for (int variant = 0; variant < 3; ++variant) {
    std::vector<float> gte = gte0, gpe = gpe0;
    const int32_t* cpos = variant >= 1 ? positions.data() : nullptr;
    embedding_backward(cpu, variant == 2 ? nullptr : gte.data(), gpe.data(), dout.data(), tokens.data(), B, T, C, cpos);
    Buf<float> dgte(gte0), dgpe(gpe0);
    gpu::embedding_backward(gctx(), variant == 2 ? nullptr : dgte.get(), dgpe.get(), dDout.get(), dtok.get(), B, T, C,
                            variant >= 1 ? dpos.get() : nullptr);
    const char* te[] = {"dwte", "dwte (positions)", "dwte (null: unchanged)"};
    const char* pe[] = {"dwpe", "dwpe (positions)", "dwpe (dwte null)"};
    EXPECT_CLOSE(te[variant], dgte.download(), gte, kTol);
    EXPECT_CLOSE(pe[variant], dgpe.download(), gpe, kTol);
  }
}

TEST_F(CudaKernels, LayerNorm) {
  std::mt19937 gen(117);
  for (int64_t C : {int64_t{768}, int64_t{50}}) {
    const int64_t N = 203;
    auto x = random_floats(N * C, gen, 2.f, 4.f);  // |mean| >> std: checks the centred variance
    auto w = random_floats(C, gen, 0.5f, 1.5f), bias = random_floats(C, gen), dy = random_floats(N * C, gen);
    std::vector<float> y(N * C), mean(N), rstd(N);
    layernorm_forward(cpu, y.data(), mean.data(), rstd.data(), x.data(), w.data(), bias.data(), N, C, 1e-5);
    Buf<float> dX(x), dW(w), dBias(bias), dY(N * C), dMean(N), dRstd(N), dDy(dy), dDx(N * C), dDw(C), dDb(C);
    dY.poison();
    dMean.poison();
    dRstd.poison();
    gpu::layernorm_forward(gctx(), dY.get(), dMean.get(), dRstd.get(), dX.get(), dW.get(), dBias.get(), N, C, 1e-5);
    const std::string sfx = " C=" + std::to_string(C);
    EXPECT_CLOSE(("y" + sfx).c_str(), dY.download(), y, kTol);
    EXPECT_CLOSE(("mean" + sfx).c_str(), dMean.download(), mean, kTol);
    EXPECT_CLOSE(("rstd" + sfx).c_str(), dRstd.download(), rstd, kTol);
    std::vector<float> ynb(N * C);
    layernorm_forward<float>(cpu, ynb.data(), mean.data(), rstd.data(), x.data(), w.data(), nullptr, N, C, 1e-5);
    dY.poison();
    gpu::layernorm_forward(gctx(), dY.get(), dMean.get(), dRstd.get(), dX.get(), dW.get(), nullptr, N, C, 1e-5);
    EXPECT_CLOSE(("y (no bias)" + sfx).c_str(), dY.download(), ynb, kTol);

    auto dx0 = random_floats(N * C, gen), dw0 = random_floats(C, gen), db0 = random_floats(C, gen);
    for (int acc = 0; acc < 2; ++acc) {
      std::vector<float> dx = dx0, dw = dw0, db = db0;
      layernorm_backward(cpu, dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(),
                         rstd.data(), N, C, acc != 0);
      dMean.upload(mean);
      dRstd.upload(rstd);
      if (acc)
        dDx.upload(dx0);
      else
        dDx.poison();
      dDw.upload(dw0);
      dDb.upload(db0);
      gpu::layernorm_backward(gctx(), dDx.get(), dDw.get(), dDb.get(), dDy.get(), dX.get(), dW.get(), dMean.get(),
                              dRstd.get(), N, C, acc != 0);
      const std::string a = acc ? " (acc)" : "";
      EXPECT_CLOSE(("dx" + a + sfx).c_str(), dDx.download(), dx, kTol);
      EXPECT_CLOSE(("dweight +=" + a + sfx).c_str(), dDw.download(), dw, kTol);
      EXPECT_CLOSE(("dbias +=" + a + sfx).c_str(), dDb.download(), db, kTol);
    }
  }
}

TEST_F(CudaKernels, RMSNorm) {
  std::mt19937 gen(118);
  for (int64_t C : {int64_t{2048}, int64_t{50}}) {
    const int64_t N = 131;
    auto x = random_floats(N * C, gen, -2.f, 2.f), w = random_floats(C, gen, 0.5f, 1.5f);
    auto dy = random_floats(N * C, gen);
    std::vector<float> y(N * C), rstd(N);
    rmsnorm_forward(cpu, y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6);
    Buf<float> dX(x), dW(w), dY(N * C), dRstd(N), dDy(dy), dDx(N * C), dDw(C);
    dY.poison();
    dRstd.poison();
    gpu::rmsnorm_forward(gctx(), dY.get(), dRstd.get(), dX.get(), dW.get(), N, C, 1e-6);
    const std::string sfx = " C=" + std::to_string(C);
    EXPECT_CLOSE(("y" + sfx).c_str(), dY.download(), y, kTol);
    EXPECT_CLOSE(("rstd" + sfx).c_str(), dRstd.download(), rstd, kTol);
    auto dx0 = random_floats(N * C, gen), dw0 = random_floats(C, gen);
    for (int acc = 0; acc < 2; ++acc) {
      std::vector<float> dx = dx0, dw = dw0;
      rmsnorm_backward(cpu, dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C, acc != 0);
      dRstd.upload(rstd);
      if (acc)
        dDx.upload(dx0);
      else
        dDx.poison();
      dDw.upload(dw0);
      gpu::rmsnorm_backward(gctx(), dDx.get(), dDw.get(), dDy.get(), dX.get(), dW.get(), dRstd.get(), N, C, acc != 0);
      const std::string a = acc ? " (acc)" : "";
      EXPECT_CLOSE(("dx" + a + sfx).c_str(), dDx.download(), dx, kTol);
      EXPECT_CLOSE(("dweight +=" + a + sfx).c_str(), dDw.download(), dw, kTol);
    }
  }
}

TEST_F(CudaKernels, Rope) {
  std::mt19937 gen(119);
  const int64_t B = 2, T = 37, nh = 3, D = 64, P = 128;
  std::vector<float> cos(P * D / 2), sin(P * D / 2);
  rope_table(cos.data(), sin.data(), P, D, 10000.0);
  std::vector<int32_t> positions(B * T);
  std::uniform_int_distribution<int32_t> pos(0, P - 1);
  for (auto& p : positions) p = pos(gen);
  Buf<float> dcos(cos), dsin(sin);
  Buf<int32_t> dpos(positions);
  auto x = random_floats(B * T * nh * D, gen);
  for (int with_pos = 0; with_pos < 2; ++with_pos) {
    std::vector<float> fwd = x, bwd = x;
    const int32_t* cp = with_pos ? positions.data() : nullptr;
    rope_forward(cpu, fwd.data(), cos.data(), sin.data(), B, T, nh, D, cp);
    rope_backward(cpu, bwd.data(), cos.data(), sin.data(), B, T, nh, D, cp);
    Buf<float> dF(x), dB(x);
    gpu::rope_forward(gctx(), dF.get(), dcos.get(), dsin.get(), B, T, nh, D, with_pos ? dpos.get() : nullptr);
    gpu::rope_backward(gctx(), dB.get(), dcos.get(), dsin.get(), B, T, nh, D, with_pos ? dpos.get() : nullptr);
    EXPECT_CLOSE(with_pos ? "forward (positions)" : "forward", dF.download(), fwd, kTol);
    EXPECT_CLOSE(with_pos ? "backward (positions)" : "backward", dB.download(), bwd, kTol);
  }
}

// ---- attention ------------------------------------------------------------------------------

TEST_F(CudaKernels, CrossEntropy) {
  std::mt19937 gen(132);
  const int64_t N = 37, V = 1000, Vp = 1024;
  auto logits = random_floats(N * Vp, gen, -8.f, 8.f);
  std::vector<int32_t> targets(N);
  std::uniform_int_distribution<int32_t> tgt(0, V - 1);
  for (int64_t n = 0; n < N; ++n) targets[n] = n % 7 == 3 ? -1 : tgt(gen);
  targets[0] = V - 1;
  std::vector<float> losses(N), lse(N);
  cross_entropy_forward(cpu, losses.data(), lse.data(), logits.data(), targets.data(), N, V, Vp);
  Buf<float> dLogits(logits), dLosses(N), dLse(N), dD(N * Vp);
  Buf<int32_t> dT(targets);
  dLosses.poison();
  dLse.poison();
  gpu::cross_entropy_forward(gctx(), dLosses.get(), dLse.get(), dLogits.get(), dT.get(), N, V, Vp);
  EXPECT_CLOSE("losses", dLosses.download(), losses, kTol);
  EXPECT_CLOSE("lse", dLse.download(), lse, kTol);

  const float dscale = 1.0f / 30.0f;
  std::vector<float> dlogits(N * Vp);
  cross_entropy_backward(cpu, dlogits.data(), logits.data(), lse.data(), targets.data(), dscale, N, V, Vp);
  dLse.upload(lse);
  dD.poison();
  gpu::cross_entropy_backward(gctx(), dD.get(), dLogits.get(), dLse.get(), dT.get(), dscale, N, V, Vp);
  EXPECT_CLOSE("dlogits", dD.download(), dlogits, kTol);
  gpu::cross_entropy_backward(gctx(), dLogits.get(), dLogits.get(), dLse.get(), dT.get(), dscale, N, V, Vp);
  EXPECT_CLOSE("dlogits in place", dLogits.download(), dlogits, kTol);
}

}  // namespace
}  // namespace claw::kernels
