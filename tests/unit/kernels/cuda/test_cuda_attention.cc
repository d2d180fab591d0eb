// The CUDA attention kernels (fp32 flash attention and --bf16's tensor-core one)
// against the CPU's fp32 attention; the conventions of test_cuda_kernels.cc.
#include "cuda_test.h"

namespace claw::kernels {
namespace {

using namespace cuda_test;

struct AttnCase {
  int64_t B, T, H, G, D;
  bool docs;
};

std::vector<float> rounded_bf16(std::vector<float> x) {
  for (float& e : x) e = bf16_to_f32(f32_to_bf16(e));
  return x;
}

// tc: the tensor-core kernels (GpuCtx::bf16_attention) on bf16-valued q, k, v
// (as --bf16 makes them), against the CPU's fp32 attention on the same values:
// P, dS and dout are rounded to bf16 inside, hence the looser tolerance.
void check_attention(const AttnCase& c, uint32_t seed, bool tc = false) {
  std::mt19937 gen(seed);
  const int64_t B = c.B, T = c.T, H = c.H, G = c.G, D = c.D;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  auto q = random_floats(B * T * H * D, gen, -2.f, 2.f), k = random_floats(B * T * G * D, gen, -2.f, 2.f);
  auto v = random_floats(B * T * G * D, gen), dout = random_floats(B * T * H * D, gen);
  GpuCtx ctx = gctx();
  ctx.bf16_attention = tc;
  const double tol = tc ? 1e-2 : kTol, tol_lse = tc ? 1e-4 : kTol;
  if (tc) {
    q = rounded_bf16(q);
    k = rounded_bf16(k);
    v = rounded_bf16(v);
  }
  std::vector<int32_t> seg;
  if (c.docs) {
    // Documents of random length 1..90 (a 1-token one included), seg_start = each token's document start.
    seg.resize(B * T);
    std::uniform_int_distribution<int> len(1, 90);
    for (int64_t b = 0; b < B; ++b) {
      int64_t start = 0;
      bool first = true;
      while (start < T) {
        const int64_t l = first && b == 0 ? 1 : len(gen);
        first = false;
        for (int64_t i = start; i < std::min(T, start + l); ++i) seg[b * T + i] = static_cast<int32_t>(start);
        start += l;
      }
    }
  }
  const int32_t* cseg = c.docs ? seg.data() : nullptr;
  std::vector<float> out(B * T * H * D), lse(B * H * T);
  attention_forward(cpu, out.data(), lse.data(), q.data(), k.data(), v.data(), B, T, H, G, D, scale, cseg);
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
  attention_backward(cpu, dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out.data(),
                     lse.data(), B, T, H, G, D, scale, cseg);

  Buf<float> dQ(q), dK(k), dV(v), dDout(dout), dOut(out.size()), dLse(lse.size());
  Buf<float> dDq(dq.size()), dDk(dk.size()), dDv(dv.size());
  Buf<int32_t> dSeg(c.docs ? seg : std::vector<int32_t>(1, 0));
  const int32_t* gseg = c.docs ? dSeg.get() : nullptr;
  dOut.poison();
  dLse.poison();
  gpu::attention_forward(ctx, dOut.get(), dLse.get(), dQ.get(), dK.get(), dV.get(), B, T, H, G, D, scale, gseg);
  char tag[96];
  std::snprintf(tag, sizeof tag, "B%lld T%lld H%lld G%lld D%lld%s%s", static_cast<long long>(B),
                static_cast<long long>(T), static_cast<long long>(H), static_cast<long long>(G),
                static_cast<long long>(D), c.docs ? " docs" : "", tc ? " tc" : "");
  auto what = [&](const char* name) { return std::string(name) + " " + tag; };
  EXPECT_CLOSE(what("out").c_str(), dOut.download(), out, tol);
  EXPECT_CLOSE(what("lse").c_str(), dLse.download(), lse, tol_lse);
  // Backward from the CPU's out and lse, so it is tested on its own.
  dOut.upload(out);
  dLse.upload(lse);
  dDq.poison();
  dDk.poison();
  dDv.poison();
  gpu::attention_backward(ctx, dDq.get(), dDk.get(), dDv.get(), dDout.get(), dQ.get(), dK.get(), dV.get(),
                          dOut.get(), dLse.get(), B, T, H, G, D, scale, gseg);
  auto gdq = dDq.download(), gdk = dDk.download(), gdv = dDv.download();
  if (T > 1) {
    EXPECT_CLOSE(what("dq").c_str(), gdq, dq, tol);
    EXPECT_CLOSE(what("dk").c_str(), gdk, dk, tol);
  } else {
    // One key per query: dS = P (dP - Delta) is 0 in exact arithmetic and
    // both sides hold rounding noise, so the difference is measured against
    // the size of dv (the gradient that is not 0).
    auto against_dv = [&](const std::vector<float>& g, const std::vector<float>& c) {
      double num = 0, den = 0;
      for (size_t i = 0; i < g.size(); ++i) num += (double(g[i]) - c[i]) * (double(g[i]) - c[i]);
      for (float x : dv) den += double(x) * x;
      return std::sqrt(num / den);
    };
    std::printf("  %-24s %-28s err/|dv| %.3e %.3e (tol %.0e)\n", test_name().c_str(), what("dq, dk").c_str(),
                against_dv(gdq, dq), against_dv(gdk, dk), tol);
    EXPECT_LE(against_dv(gdq, dq), tol);
    EXPECT_LE(against_dv(gdk, dk), tol);
  }
  EXPECT_CLOSE(what("dv").c_str(), gdv, dv, tol);
  // Deterministic: a second run gives the same bits.
  gpu::attention_backward(ctx, dDq.get(), dDk.get(), dDv.get(), dDout.get(), dQ.get(), dK.get(), dV.get(),
                          dOut.get(), dLse.get(), B, T, H, G, D, scale, gseg);
  EXPECT_TRUE(dDq.download() == gdq && dDk.download() == gdk && dDv.download() == gdv) << "not deterministic";
}

TEST_F(CudaKernels, AttentionGptShapes) {
  check_attention({2, 77, 4, 4, 64, false}, 120);
  check_attention({1, 256, 4, 4, 64, false}, 121);
}

TEST_F(CudaKernels, AttentionGqa) {
  check_attention({2, 77, 4, 2, 64, false}, 122);
  check_attention({1, 256, 4, 2, 64, false}, 123);
  check_attention({1, 130, 4, 1, 64, false}, 124);
}

TEST_F(CudaKernels, AttentionHeadDim128) {
  check_attention({2, 77, 4, 2, 128, false}, 125);
  check_attention({1, 256, 4, 2, 128, true}, 126);
}

TEST_F(CudaKernels, AttentionDocuments) {
  check_attention({2, 77, 4, 2, 64, true}, 127);
  check_attention({2, 256, 4, 2, 64, true}, 128);
}

TEST_F(CudaKernels, AttentionOddHeadDim) {
  check_attention({2, 45, 2, 1, 30, true}, 129);  // D % 4 != 0: scalar tile loads
  check_attention({1, 100, 3, 3, 96, false}, 130);
  check_attention({1, 1, 2, 2, 64, false}, 131);  // T = 1
}

// The tensor-core kernels (--bf16) on the same cases as the fp32 ones above.
TEST_F(CudaKernels, AttentionTensorCores) {
  check_attention({2, 77, 4, 4, 64, false}, 140, true);
  check_attention({1, 256, 4, 2, 64, false}, 141, true);
  check_attention({1, 130, 4, 1, 64, false}, 142, true);
  check_attention({2, 77, 4, 2, 128, false}, 143, true);
  check_attention({1, 256, 4, 2, 128, true}, 144, true);
  check_attention({2, 256, 4, 2, 64, true}, 145, true);
  check_attention({1, 1, 2, 2, 64, false}, 146, true);  // T = 1
  check_attention({1, 64, 2, 2, 64, true}, 147, true);  // one tile exactly
}

// The training shapes at T = 1024 (GPT-2 124M's heads, Llama 3.2 1B's GQA):
// the tensor-core kernels against the fp32 ones on the GPU (the CPU would
// take minutes), and both timed (median of 5 after a warm-up, CUDA events)
// as forward + backward TFLOP/s: 4 B H T^2 D / 2 (causal) forward, 2.5x that
// backward.
TEST_F(CudaKernels, AttentionTensorCoresAtScale) {
  struct Shape {
    const char* name;
    int64_t B, T, H, G, D;
  };
  for (const Shape& c : {Shape{"gpt2-124m", 8, 1024, 12, 12, 64}, Shape{"llama3.2-1b", 2, 1024, 32, 8, 64},
                         Shape{"D=128", 2, 1024, 16, 4, 128}}) {
    std::mt19937 gen(150);
    const int64_t B = c.B, T = c.T, H = c.H, G = c.G, D = c.D;
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    auto q = rounded_bf16(random_floats(B * T * H * D, gen, -2.f, 2.f));
    auto k = rounded_bf16(random_floats(B * T * G * D, gen, -2.f, 2.f));
    auto v = rounded_bf16(random_floats(B * T * G * D, gen));
    auto dout = random_floats(B * T * H * D, gen);
    Buf<float> dQ(q), dK(k), dV(v), dDout(dout);
    std::vector<float> results[2][5];
    float ms[2] = {};
    for (int tc = 0; tc < 2; ++tc) {
      GpuCtx ctx = gctx();
      ctx.bf16_attention = tc == 1;
      Buf<float> out(q.size()), lse(B * H * T), dq(q.size()), dk(k.size()), dv(v.size());
      auto run = [&] {
        gpu::attention_forward(ctx, out.get(), lse.get(), dQ.get(), dK.get(), dV.get(), B, T, H, G, D, scale, nullptr);
        gpu::attention_backward(ctx, dq.get(), dk.get(), dv.get(), dDout.get(), dQ.get(), dK.get(), dV.get(), out.get(),
                                lse.get(), B, T, H, G, D, scale, nullptr);
      };
      run();
      results[tc][0] = out.download();
      results[tc][1] = lse.download();
      results[tc][2] = dq.download();
      results[tc][3] = dk.download();
      results[tc][4] = dv.download();
      auto stream = static_cast<cudaStream_t>(gctx().stream);
      std::vector<float> times;
      for (int rep = 0; rep < 5; ++rep) {
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        cudaEventRecord(e0, stream);
        run();
        cudaEventRecord(e1, stream);
        cudaEventSynchronize(e1);
        float t = 0;
        cudaEventElapsedTime(&t, e0, e1);
        times.push_back(t);
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
      }
      std::sort(times.begin(), times.end());
      ms[tc] = times[2];
    }
    const double flops = 3.5 * 4.0 * B * H * static_cast<double>(T) * T * D / 2;
    std::printf("  %-24s %-12s fwd+bwd fp32 %.3f ms (%.1f TFLOP/s), tensor cores %.3f ms (%.1f TFLOP/s): %.1fx\n",
                test_name().c_str(), c.name, ms[0], flops / ms[0] / 1e9, ms[1], flops / ms[1] / 1e9, ms[0] / ms[1]);
    const char* names[5] = {"out", "lse", "dq", "dk", "dv"};
    for (int i = 0; i < 5; ++i) {
      const std::string what = std::string(names[i]) + " " + c.name + " tc vs fp32";
      EXPECT_CLOSE(what.c_str(), results[1][i], results[0][i], i == 1 ? 1e-4 : 1e-2);
    }
  }
}

// ---- cross-entropy --------------------------------------------------------------------------

}  // namespace
}  // namespace claw::kernels
