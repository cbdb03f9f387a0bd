// test_ops_gpu.cpp — the CUDA backend's non-GEMM ops (kernels/cuda/ops.h) on the device against
// the CPU backend, on odd sizes, by one harness over the op list (kernels/ops.def): every kernel
// op of the list has a case generator here, cases_<op>, or this file does not compile. (The
// linear layer's entries have their own suite, test_gemm_gpu.cpp: formats × scalings × split-K.)
// Skipped where no CUDA device is present.
//
// What each op must give, and why:
//  * bit-identical to the CPU: embedding forward/backward, RMSNorm dweight, attention dv, top-k
//    (all tie rules), AdamW — the device runs the CPU's operations in the CPU's order (hd/*.h);
//  * bit-identical to the host composition of the same MOERL_HD functions (tests/cuda_host/
//    hd_compose.h) where no transcendental function is involved — RMSNorm forward and dinp,
//    softmax backward, attention backward: this checks that the device reduces in the order
//    hd/reduce.h documents (and tests/cuda_host checks that order against kernels/ref);
//  * within tolerance of the CPU elsewhere: the tree order of the row sums (2n·u relative, u =
//    2^-24) plus the device's expf (≤ 2 ulp) / logf (≤ 1 ulp) and double pow/cos/sin (RoPE);
//  * every op bit-reproducible run to run (no atomics anywhere), and '+=' outputs accumulated
//    onto their seeded initial values exactly as the CPU does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "../cuda_host/hd_compose.h"
#include "../kernels/test_ops_util.h"
#include "gpu_test.h"
#include "kernels/backend.h"
#include "kernels/cuda/backend_cuda.h"

namespace moerl {
namespace {

using test_ops::expect_bits;
using test_ops::expect_close;
using test_ops::kEps;
using test_ops::label;
using test_ops::normals;

constexpr double kExpUlps = 8.0;  // device expf/logf (≤ 2 ulp each) through a formula, in u

const Backend& gpu() { return cuda::cuda_backend(); }
const Backend& cpu() { return cpu_backend(); }

float max_abs(const std::vector<float>& v) {
  float m = 0.0f;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

// |got − ref| ≤ tol[i] everywhere; reports the first violation.
void expect_within(const std::vector<float>& ref, const std::vector<float>& got,
                   const std::vector<double>& tol, const std::string& what) {
  ASSERT_EQ(ref.size(), got.size()) << what;
  for (size_t i = 0; i < ref.size(); ++i)
    if (!(std::fabs(static_cast<double>(got[i]) - ref[i]) <= tol[i])) {
      ADD_FAILURE() << what << ": at " << i << " ref " << ref[i] << " got " << got[i] << " tol "
                    << tol[i];
      return;
    }
}

// ---- the harness -------------------------------------------------------------------------------
// A case is one call of an op (or a fixed sequence of calls) on seeded inputs. The harness runs it
// twice on the CUDA backend and once on the CPU backend, each on fresh copies of the outputs'
// start values, and checks
//  * every output bit-identical run to run on the device;
//  * every output against the CPU's by the output's rule (bits, or a tolerance and its reason);
//  * the outputs marked vs_host bit-identical to the case's host composition (hd_compose);
//  * then the case's own further checks (untouched rows, null outputs, rejected arguments).
// '=' outputs start from NaN (floats) / -7 (ids) for the device and from 0 / -8 for the CPU, so an
// element the CUDA backend does not hand back cannot pass by starting equal; '+=' and in-place
// outputs start from their seeded values on every side.

struct Bufs {
  std::vector<std::vector<float>> f;    // the float outputs, in the order of Case::outs
  std::vector<std::vector<int32_t>> i;  // the int32 outputs, in the order of Case::ids
};
// How the device's output must agree with the CPU's.
using Compare = std::function<void(const std::vector<float>& cpu, const std::vector<float>& gpu,
                                   const std::string& what)>;

struct Out {
  std::string name;
  size_t size = 0;
  std::vector<float> start;  // '+=' / in-place outputs: their values before the call; empty: '='
  Compare vs_cpu;
  bool vs_host = false;
};
Out written(std::string name, size_t size, Compare vs_cpu, bool vs_host = false) {
  return {std::move(name), size, {}, std::move(vs_cpu), vs_host};
}
Out accumulated(std::string name, std::vector<float> start, Compare vs_cpu, bool vs_host = false) {
  const size_t n = start.size();
  return {std::move(name), n, std::move(start), std::move(vs_cpu), vs_host};
}
struct IdsOut {  // an int32 '=' output: equal to the CPU's
  std::string name;
  size_t size = 0;
};

struct Case {
  explicit Case(std::string what_) : what(std::move(what_)) {}
  std::string what;
  std::vector<Out> outs;
  std::vector<IdsOut> ids;
  std::function<void(const Backend&, Bufs&)> run;
  std::function<void(Bufs&)> host;                     // optional: hd_compose on the host
  std::function<void(const Bufs& cpu, const Bufs& gpu)> more;  // optional further checks
};

Compare bits() {
  return [](const std::vector<float>& c, const std::vector<float>& g, const std::string& w) {
    expect_bits(c, g, w);
  };
}
// |gpu − cpu| ≤ abs + |cpu|·rel
Compare close(double abs, double rel) {
  return [=](const std::vector<float>& c, const std::vector<float>& g, const std::string& w) {
    expect_close(c, g, abs, rel, w);
  };
}
// |gpu − cpu| ≤ abs_of_max·max|cpu| + |cpu|·rel: an error relative to the tensor's scale.
Compare close_to_scale(double abs_of_max, double rel) {
  return [=](const std::vector<float>& c, const std::vector<float>& g, const std::string& w) {
    expect_close(c, g, abs_of_max * max_abs(c), rel, w);
  };
}
// |gpu[i] − cpu[i]| ≤ tol(i, cpu[i]): an error bound per element.
Compare within(std::function<double(size_t i, float cpu_i)> tol) {
  return [=](const std::vector<float>& c, const std::vector<float>& g, const std::string& w) {
    std::vector<double> t(c.size());
    for (size_t i = 0; i < c.size(); ++i) t[i] = tol(i, c[i]);
    expect_within(c, g, t, w);
  };
}

Bufs start_values(const Case& c, float fill, int32_t id_fill) {
  Bufs b;
  for (const Out& o : c.outs)
    b.f.push_back(o.start.empty() ? std::vector<float>(o.size, fill) : o.start);
  for (const IdsOut& o : c.ids) b.i.emplace_back(o.size, id_fill);
  return b;
}

void check(const Case& c) {
  SCOPED_TRACE(c.what);
  Bufs dev = start_values(c, std::numeric_limits<float>::quiet_NaN(), -7), dev2 = dev;
  Bufs ref = start_values(c, 0.0f, -8);
  c.run(gpu(), dev);
  c.run(gpu(), dev2);
  c.run(cpu(), ref);
  for (size_t k = 0; k < c.outs.size(); ++k) {
    const char* name = c.outs[k].name.c_str();
    expect_bits(dev.f[k], dev2.f[k], label("%s %s run to run", c.what.c_str(), name));
    c.outs[k].vs_cpu(ref.f[k], dev.f[k], label("%s %s vs cpu", c.what.c_str(), name));
  }
  for (size_t k = 0; k < c.ids.size(); ++k) {
    EXPECT_EQ(dev.i[k], dev2.i[k]) << c.what << " " << c.ids[k].name << " run to run";
    EXPECT_EQ(ref.i[k], dev.i[k]) << c.what << " " << c.ids[k].name << " vs cpu";
  }
  if (c.host) {
    Bufs hd = start_values(c, 0.0f, -8);
    c.host(hd);
    for (size_t k = 0; k < c.outs.size(); ++k)
      if (c.outs[k].vs_host)
        expect_bits(hd.f[k], dev.f[k], label("%s %s: device order = hd_compose", c.what.c_str(),
                                             c.outs[k].name.c_str()));
  }
  if (c.more) c.more(ref, dev);
}

// One case per size: make(size) for each of sizes.
template <class Size, size_t n, class Make>
std::vector<Case> per_size(const Size (&sizes)[n], Make make) {
  std::vector<Case> cases;
  for (const Size& s : sizes) cases.push_back(make(s));
  return cases;
}

size_t sz(int64_t a, int64_t b = 1, int64_t c = 1, int64_t d = 1) {
  return static_cast<size_t>(a * b * c * d);
}

// ---- embedding ---------------------------------------------------------------------------------
constexpr int kEmbV = 50, kEmbD = 67, kEmbN = 301;
std::vector<int32_t> embedding_tokens() {
  std::vector<int32_t> tok(kEmbN);
  for (int n = 0; n < kEmbN; ++n) tok[n] = (n * 7 + n / 3) % 13 + (n % 5 == 0 ? 37 : 0);  // repeats
  return tok;
}

std::vector<Case> cases_embedding_forward() {
  const int N = kEmbN, D = kEmbD;
  const auto table = normals(sz(kEmbV, D), 1);
  const auto tok = embedding_tokens();
  Case c("embedding forward");
  c.outs = {written("out", sz(N, D), bits())};
  c.run = [=](const Backend& b, Bufs& o) {
    b.embedding_forward(o.f[0].data(), tok.data(), table.data(), N, D);
  };
  return {c};
}

std::vector<Case> cases_embedding_backward() {
  const int N = kEmbN, D = kEmbD;
  const auto tok = embedding_tokens();
  const auto dout = normals(sz(N, D), 2);
  const auto dtable0 = normals(sz(kEmbV, D), 3);  // '+=' onto these
  Case c("embedding backward (rows of each token in order n)");
  c.outs = {accumulated("dtable", dtable0, bits())};
  c.run = [=](const Backend& b, Bufs& o) {
    b.embedding_backward(o.f[0].data(), dout.data(), tok.data(), N, D);
  };
  c.more = [=](const Bufs&, const Bufs& dev) {  // the rows no token names keep their values
    std::vector<bool> named(kEmbV, false);
    for (int32_t t : tok) named[t] = true;
    int untouched = 0;
    for (int r = 0; r < kEmbV; ++r) {
      if (named[r]) continue;
      ++untouched;
      EXPECT_TRUE(std::equal(dev.f[0].begin() + sz(r, D), dev.f[0].begin() + sz(r + 1, D),
                             dtable0.begin() + sz(r, D)))
          << "row " << r << " is named by no token";
    }
    EXPECT_GT(untouched, 0) << "the tokens must leave some rows unnamed";
  };
  return {c};
}

// ---- RMSNorm -----------------------------------------------------------------------------------
constexpr int kWidths[] = {1, 7, 300, 1029};

std::vector<Case> cases_rmsnorm_forward() {
  const int N = 37;
  return per_size(kWidths, [&](int D) {
    const auto x = normals(sz(N, D), 10, D), w = normals(D, 11, D);
    Case c(label("rmsnorm forward D=%d", D));
    // positive terms: the sums' orders differ by ≤ 2D·u relative (see tests/cuda_host)
    c.outs = {written("out", x.size(), close(0.0, (D + 8) * kEps), true),
              written("rstd", N, close(0.0, (D + 6) * kEps), true)};
    c.run = [=](const Backend& b, Bufs& o) {
      b.rmsnorm_forward(o.f[0].data(), o.f[1].data(), x.data(), w.data(), N, D, 1e-5f, ReduceCtx{});
    };
    c.host = [=](Bufs& o) {
      hd_compose::rmsnorm_forward(o.f[0].data(), o.f[1].data(), x.data(), w.data(), N, D, 1e-5f);
    };
    return c;
  });
}

std::vector<Case> cases_rmsnorm_backward() {
  const int N = 29;
  return per_size(kWidths, [&](int D) {
    const auto x = normals(sz(N, D), 12, D), w = normals(D, 13, D);
    const auto dy = normals(x.size(), 14, D);
    std::vector<float> out(x.size()), rstd(N);
    cpu().rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, D, 1e-5f, ReduceCtx{});
    const auto dinp0 = normals(x.size(), 15, D), dw0 = normals(D, 16, D);  // '+=' onto these
    Case c(label("rmsnorm backward D=%d", D));
    // dinp: the dot's order error through coef·x, relative to the tensor's scale (tests/cuda_host);
    // dweight: rows in order, as the CPU
    c.outs = {accumulated("dinp", dinp0, close_to_scale(2.0 * D * kEps, 8 * kEps), true),
              accumulated("dweight", dw0, bits())};
    c.run = [=](const Backend& b, Bufs& o) {
      b.rmsnorm_backward(o.f[0].data(), o.f[1].data(), dy.data(), x.data(), w.data(), rstd.data(),
                         N, D);
    };
    c.host = [=](Bufs& o) {
      hd_compose::rmsnorm_backward(o.f[0].data(), o.f[1].data(), dy.data(), x.data(), w.data(),
                                   rstd.data(), N, D);
    };
    c.more = [=](const Bufs&, const Bufs& dev) {  // either output may be null; the other is
      auto dinp_only = dinp0, dw_only = dw0;      // unchanged by its absence
      gpu().rmsnorm_backward(dinp_only.data(), nullptr, dy.data(), x.data(), w.data(), rstd.data(),
                             N, D);
      gpu().rmsnorm_backward(nullptr, dw_only.data(), dy.data(), x.data(), w.data(), rstd.data(),
                             N, D);
      expect_bits(dev.f[0], dinp_only, label("dinp alone D=%d", D));
      expect_bits(dev.f[1], dw_only, label("dweight alone D=%d", D));
    };
    return c;
  });
}

// ---- RoPE --------------------------------------------------------------------------------------
// c, s may differ by 1 ulp (device double pow/cos/sin rounded to float): each output a·c ∓ b·s
// moves by ≤ 2u·(|a| + |b|) ≤ 4u·max|x|, plus its own 3 roundings; the backward applied to the
// forward's output allows that twice.
constexpr int kRopeN = 45, kRopeH = 3;
constexpr float kTheta = 10000.0f;
std::vector<int32_t> rope_positions() {
  std::vector<int32_t> pos(kRopeN);
  for (int n = 0; n < kRopeN; ++n) pos[n] = n * 977 % 5000;
  return pos;
}

// The rotation (forward, or backward applied to the CPU forward's output), in place on x.
constexpr int kHeadWidths[] = {2, 7, 64};
std::vector<Case> rope_cases(bool backward) {
  const int N = kRopeN, H = kRopeH;
  const auto pos = rope_positions();
  return per_size(kHeadWidths, [&](int Dh) {
    const auto x0 = normals(sz(N, H, Dh), 20, Dh);
    auto x = x0;
    if (backward) cpu().rope_forward(x.data(), pos.data(), N, H, Dh, kTheta);
    const double abs = 4 * kEps * max_abs(x0);
    Case c(label("rope %s Dh=%d", backward ? "backward" : "forward", Dh));
    c.outs = {accumulated("x", x, backward ? close(2 * abs, 8 * kEps) : close(abs, 4 * kEps))};
    c.run = [=](const Backend& b, Bufs& o) {
      if (backward)
        b.rope_backward(o.f[0].data(), pos.data(), N, H, Dh, kTheta);
      else
        b.rope_forward(o.f[0].data(), pos.data(), N, H, Dh, kTheta);
    };
    if (Dh % 2)
      c.more = [=](const Bufs&, const Bufs& dev) {
        EXPECT_EQ(dev.f[0][Dh - 1], x0[Dh - 1]) << "odd Dh: the last element is not rotated";
      };
    return c;
  });
}
std::vector<Case> cases_rope_forward() { return rope_cases(false); }
std::vector<Case> cases_rope_backward() { return rope_cases(true); }

// ---- attention ---------------------------------------------------------------------------------
struct Shape {
  int B, T, H, Dh;
};
const Shape kShapes[] = {{1, 1, 1, 1}, {2, 13, 3, 10}, {3, 70, 2, 64}, {1, 300, 1, 8}};

std::vector<Case> cases_attention_forward() {
  return per_size(kShapes, [&](const Shape& s) {
    const size_t n = sz(s.B, s.T, s.H, s.Dh), na = sz(s.B, s.H, s.T, s.T);
    const auto q = normals(n, 30, s.T), k = normals(n, 31, s.T), v = normals(n, 32, s.T);
    Case c(label("attention forward T=%d", s.T));
    // scores are the CPU's fma chains; p differs by the denominator's order (2T·u relative)
    // and the device's expf; out = Σ p·v off by that relative error of p times max|v|.
    c.outs = {written("out", n, close((2 * s.T + 8 + kExpUlps) * kEps * max_abs(v), 4 * kEps)),
              written("att", na, close(0.0, (2 * s.T + 4 + kExpUlps) * kEps))};
    c.run = [=](const Backend& b, Bufs& o) {
      b.attention_forward(o.f[0].data(), o.f[1].data(), q.data(), k.data(), v.data(), s.B, s.T, s.H,
                          s.Dh, ReduceCtx{});
    };
    c.more = [=](const Bufs&, const Bufs& dev) {
      const std::vector<float>& att = dev.f[1];
      size_t upper_nonzero = 0;  // causal: exactly 0 above the diagonal, as the CPU writes
      for (size_t r = 0; r < na / s.T; ++r)
        for (int j = static_cast<int>(r % s.T) + 1; j < s.T; ++j)
          upper_nonzero += att[r * s.T + j] != 0.0f;
      EXPECT_EQ(upper_nonzero, 0u) << label("T=%d", s.T);
    };
    return c;
  });
}

// Decode runs the forward's row routine on cache rows 0..len-1: for a query at position len-1 it
// gives the forward's output bits; against the CPU decode within the forward's tolerance.
std::vector<Case> cases_attention_decode() {
  const int B = 3, T = 37, Tmax = 40, H = 4, Dh = 16;
  const int64_t ld = H * Dh;
  const size_t n = sz(B, T, ld);
  const auto q = normals(n, 40), k = normals(n, 41), v = normals(n, 42);
  const std::vector<int32_t> len = {1, 20, 37};
  std::vector<float> kc(sz(B, Tmax, ld), NAN), vc(kc.size(), NAN), qd(sz(B, ld));
  for (int b = 0; b < B; ++b) {  // rows past len are NaN: reading one would show
    std::copy_n(k.begin() + b * T * ld, len[b] * ld, kc.begin() + b * Tmax * ld);
    std::copy_n(v.begin() + b * T * ld, len[b] * ld, vc.begin() + b * Tmax * ld);
    std::copy_n(q.begin() + (b * T + len[b] - 1) * ld, ld, qd.begin() + b * ld);
  }
  const std::vector<float> kT = test_ops::keys_transposed(kc, B, Tmax, static_cast<int>(ld));  // kv_cache.h
  Case c("attention decode");
  c.outs = {written("out", sz(B, ld),
                    close((2 * Tmax + 8 + kExpUlps) * kEps * max_abs(v), 4 * kEps))};
  c.run = [=](const Backend& b, Bufs& o) {
    b.attention_decode(o.f[0].data(), qd.data(), kT.data(), vc.data(), len.data(), B, Tmax, H, Dh,
                       ReduceCtx{});
  };
  c.more = [=](const Bufs&, const Bufs& dev) {
    std::vector<float> out(n), att(sz(B, H, T, T));
    gpu().attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), B, T, H, Dh,
                            ReduceCtx{});
    const std::vector<float>& dec = dev.f[0];
    for (int b = 0; b < B; ++b) {
      const std::vector<float> fwd(out.begin() + (b * T + len[b] - 1) * ld,
                                   out.begin() + (b * T + len[b]) * ld);
      const std::vector<float> got(dec.begin() + b * ld, dec.begin() + (b + 1) * ld);
      expect_bits(fwd, got, label("decode b=%d = forward row", b));
    }
    std::vector<float> scratch(dec.size());
    const int32_t bad[B] = {1, 0, 5};
    EXPECT_THROW(gpu().attention_decode(scratch.data(), qd.data(), kT.data(), vc.data(), bad, B,
                                        Tmax, H, Dh, ReduceCtx{}),
                 std::invalid_argument);
  };
  return {c};
}

// Decode compaction: rows 0 and 2 of 6 take rows 5 and 3's first `held` positions, row 1 stays;
// the caches start seeded (the rows not kept, and positions past held, must be left as they are).
// Copies: bit-identical.
std::vector<Case> cases_kv_cache_keep() {
  const int B = 6, D = 24, Tc = 64, held = 37, n = 3;
  const auto k0 = normals(sz(B, D, Tc), 43), v0 = normals(sz(B, Tc, D), 44);
  const std::vector<int32_t> from = {5, 1, 3};
  Case c("kv cache keep");
  c.outs = {accumulated("kcache", k0, bits()), accumulated("vcache", v0, bits())};
  c.run = [=](const Backend& b, Bufs& o) {
    b.kv_cache_keep(o.f[0].data(), o.f[1].data(), from.data(), n, D, Tc, held);
  };
  return {c};
}

// The prompt's positions (t0 = 0) and one decode position into seeded caches; copies: bits.
std::vector<Case> cases_kv_cache_write() {
  const int B = 3, D = 24, Tc = 40;
  const auto k0 = normals(sz(B, D, Tc), 45), v0 = normals(sz(B, Tc, D), 46);
  std::vector<Case> cases;
  for (const auto& [T, t0] : {std::pair{17, 0}, std::pair{1, 29}}) {
    const auto k = normals(sz(B, T, D), 47 + t0), v = normals(sz(B, T, D), 48 + t0);
    Case c(label("kv cache write T=%d at %d", T, t0));
    c.outs = {accumulated("kcache", k0, bits()), accumulated("vcache", v0, bits())};
    c.run = [=](const Backend& b, Bufs& o) {
      b.kv_cache_write(o.f[0].data(), o.f[1].data(), k.data(), v.data(), B, T, D, Tc, t0);
    };
    cases.push_back(c);
  }
  return cases;
}

// A decode step's writes at each sequence's own length; copies: bits.
std::vector<Case> cases_kv_cache_append() {
  const int B = 4, D = 24, Tc = 40;
  const auto k0 = normals(sz(B, D, Tc), 49), v0 = normals(sz(B, Tc, D), 50);
  const auto k = normals(sz(B, 1, D), 51), v = normals(sz(B, 1, D), 52);
  const std::vector<int32_t> len = {1, 40, 13, 13};
  Case c("kv cache append");
  c.outs = {accumulated("kcache", k0, bits()), accumulated("vcache", v0, bits())};
  c.run = [=](const Backend& b, Bufs& o) {
    b.kv_cache_append(o.f[0].data(), o.f[1].data(), k.data(), v.data(), len.data(), B, D, Tc);
  };
  return {c};
}

// Values over every format's range: normals scaled from 2^-30 to 2^20 (the FP8 and FP16
// subnormals, the FP16 and E5M2 overflow to inf, E4M3's saturation), and ties. hd/round.h is the
// CPU's rounding step for step: bits, in every format.
std::vector<float> storage_values(size_t n, uint64_t seed) {
  auto x = normals(n, seed);
  for (size_t i = 0; i < n; ++i) x[i] = std::ldexp(x[i], static_cast<int>(i % 51) - 30);
  x[0] = 1.0f + 1.0f / 256;  // a bf16 tie (to even: 1)
  x[1] = 70000.0f;           // past FP16's 65504
  x[2] = -1.0e6f;            // E4M3 saturates at -448
  return x;
}
constexpr Format kStorageFormats[] = {Format::fp32, Format::bf16, Format::fp16, Format::fp8_e4m3, Format::fp8_e5m2};
constexpr int64_t kStorageN = 4099;

std::vector<Case> cases_round_format() {
  std::vector<Case> cases;
  for (Format f : kStorageFormats) {
    Case c(label("round_format %s", format_name(f)));
    c.outs = {accumulated("x", storage_values(kStorageN, 91), bits())};
    c.run = [=](const Backend& b, Bufs& o) { b.round_format(o.f[0].data(), kStorageN, f); };
    cases.push_back(c);
  }
  return cases;
}

std::vector<Case> cases_add_round() {
  const auto a = storage_values(kStorageN, 92), bb = storage_values(kStorageN, 93);
  std::vector<Case> cases;
  for (Format f : kStorageFormats) {
    Case c(label("add_round %s", format_name(f)));
    c.outs = {written("out", kStorageN, bits())};
    c.run = [=](const Backend& b, Bufs& o) { b.add_round(o.f[0].data(), a.data(), bb.data(), kStorageN, f); };
    cases.push_back(c);
  }
  return cases;
}

// IEEE division on both sides (the device's __fdiv_rn): bits.
std::vector<Case> cases_divide_scalar() {
  const auto x = storage_values(kStorageN, 94);
  Case c("divide_scalar by 0.6");
  c.outs = {written("out", kStorageN, bits())};
  c.run = [=](const Backend& b, Bufs& o) { b.divide_scalar(o.f[0].data(), x.data(), kStorageN, 0.6f); };
  return {c};
}

std::vector<Case> cases_attention_backward() {
  return per_size(kShapes, [&](const Shape& s) {
    const size_t n = sz(s.B, s.T, s.H, s.Dh), na = sz(s.B, s.H, s.T, s.T);
    const auto q = normals(n, 50, s.T), k = normals(n, 51, s.T), v = normals(n, 52, s.T);
    const auto dout = normals(n, 53, s.T);
    std::vector<float> out(n), att(na);
    cpu().attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), s.B, s.T, s.H,
                            s.Dh, ReduceCtx{});
    const auto dq0 = normals(n, 54, s.T), dk0 = normals(n, 55, s.T), dv0 = normals(n, 56, s.T);
    Case c(label("attention backward T=%d", s.T));
    // dq, dk: (tests/cuda_host bounds hd_compose against ref element by element; here a coarse
    // sanity check against the CPU: the ds tree moves dq, dk by ~T·u ≈ 2e-5 of the tensor's scale
    // at most, a wrong term by O(1)); dv: the CPU's order
    c.outs = {accumulated("dq", dq0, close_to_scale(1e-3, 0.0), true),
              accumulated("dk", dk0, close_to_scale(1e-3, 0.0), true),
              accumulated("dv", dv0, bits())};
    c.run = [=](const Backend& b, Bufs& o) {
      b.attention_backward(o.f[0].data(), o.f[1].data(), o.f[2].data(), dout.data(), att.data(),
                           q.data(), k.data(), v.data(), s.B, s.T, s.H, s.Dh);
    };
    c.host = [=](Bufs& o) {
      std::vector<float> g(na);
      hd_compose::attention_backward(o.f[0].data(), o.f[1].data(), o.f[2].data(), g.data(),
                                     dout.data(), att.data(), q.data(), k.data(), v.data(), s.B,
                                     s.T, s.H, s.Dh);
    };
    return c;
  });
}

// ---- softmax family ----------------------------------------------------------------------------
constexpr int kSoftmaxN = 19;
std::vector<float> softmax_input(int C) { return normals(sz(kSoftmaxN, C), 60, C, 0, 3.0f); }

std::vector<Case> cases_softmax_forward() {
  return per_size(kWidths, [&](int C) {
    const auto x = softmax_input(C);
    Case c(label("softmax C=%d", C));
    c.outs = {written("p", x.size(), close(0.0, (2 * C + 4 + kExpUlps) * kEps))};
    c.run = [=](const Backend& b, Bufs& o) {
      b.softmax_forward(o.f[0].data(), x.data(), kSoftmaxN, C);
    };
    return c;
  });
}

std::vector<Case> cases_log_softmax_forward() {
  return per_size(kWidths, [&](int C) {
    const auto x = softmax_input(C);
    Case c(label("log_softmax C=%d", C));
    c.outs = {written("logp", x.size(), close((2 * C + 2 + kExpUlps) * kEps, 4 * kEps))};
    c.run = [=](const Backend& b, Bufs& o) {
      b.log_softmax_forward(o.f[0].data(), x.data(), kSoftmaxN, C);
    };
    return c;
  });
}

std::vector<Case> cases_softmax_backward() {
  const int N = kSoftmaxN;
  return per_size(kWidths, [&](int C) {
    const auto x = softmax_input(C);
    std::vector<float> y(x.size());
    cpu().softmax_forward(y.data(), x.data(), N, C);
    const auto dy = normals(x.size(), 61, C), dx0 = normals(x.size(), 62, C);
    Case c(label("softmax_backward C=%d", C));
    // the dot's order error, 2C·u·Σ|p·dy| ≤ 2C·u·max|dy|, times p ≤ 1
    c.outs = {accumulated("dx", dx0, close(2.0 * C * kEps * max_abs(dy), 4 * kEps), true)};
    c.run = [=](const Backend& b, Bufs& o) {
      b.softmax_backward(o.f[0].data(), dy.data(), y.data(), N, C);
    };
    c.host = [=](Bufs& o) {
      hd_compose::softmax_backward(o.f[0].data(), dy.data(), y.data(), N, C);
    };
    return c;
  });
}

// ---- log-prob ----------------------------------------------------------------------------------
constexpr int kLogprobN = 23;
constexpr int kVocabs[] = {1, 7, 300, 5003};
std::vector<int32_t> logprob_targets(int V) {
  std::vector<int32_t> tgt(kLogprobN);
  for (int n = 0; n < kLogprobN; ++n) tgt[n] = n % 5 == 2 ? -1 : (n * 7919) % V;  // ignored rows
  return tgt;
}
std::vector<float> logprob_logits(int V) { return normals(sz(kLogprobN, V), 70, V, 0, 4.0f); }

std::vector<Case> cases_logprob_forward() {
  const int N = kLogprobN;
  return per_size(kVocabs, [&](int V) {
    const auto x = logprob_logits(V);
    const auto tgt = logprob_targets(V);
    Case c(label("logprob V=%d", V));
    c.outs = {written("logp", N, close((2 * V + 2 + kExpUlps) * kEps, 4 * kEps))};
    c.run = [=](const Backend& b, Bufs& o) {
      b.logprob_forward(o.f[0].data(), x.data(), tgt.data(), N, V);
    };
    c.more = [](const Bufs&, const Bufs& dev) {
      EXPECT_EQ(dev.f[0][2], 0.0f) << "target < 0 gives logp 0";
    };
    return c;
  });
}

std::vector<Case> cases_logprob_backward() {
  const int N = kLogprobN;
  return per_size(kVocabs, [&](int V) {
    const auto x = logprob_logits(V);
    const auto tgt = logprob_targets(V);
    const auto dlogp = normals(N, 71, V), dl0 = normals(x.size(), 72, V);
    Case c(label("logprob_backward V=%d", V));
    c.outs = {accumulated("dlogits", dl0,
                          close(max_abs(dlogp) * (2 * V + 4 + kExpUlps) * kEps, 4 * kEps))};
    c.run = [=](const Backend& b, Bufs& o) {
      b.logprob_backward(o.f[0].data(), dlogp.data(), x.data(), tgt.data(), N, V);
    };
    c.more = [=](const Bufs&, const Bufs& dev) {
      const std::vector<float>& dl = dev.f[0];
      EXPECT_TRUE(std::equal(dl.begin() + 2 * V, dl.begin() + 3 * V, dl0.begin() + 2 * V))
          << "a row with target < 0 stays untouched";
    };
    return c;
  });
}

// ---- element-wise ------------------------------------------------------------------------------
constexpr int kSwigluN = 7, kSwigluF = 1001;
std::vector<float> swiglu_gate() {
  auto gate = normals(sz(kSwigluN, kSwigluF), 80, 0, 0, 6.0f);
  gate[0] = 100.0f;
  gate[1] = -100.0f;
  gate[2] = 0.0f;
  return gate;
}

std::vector<Case> cases_swiglu_forward() {
  const auto gate = swiglu_gate(), up = normals(gate.size(), 81);
  Case c("swiglu forward");
  // σ off by the device expf's 2 ulp (relative ≤ 2u after 1/(1+e)), then 3 roundings.
  c.outs = {written("out", gate.size(), close(1e-30, kExpUlps * kEps))};
  c.run = [=](const Backend& b, Bufs& o) {
    b.swiglu_forward(o.f[0].data(), gate.data(), up.data(), kSwigluN, kSwigluF);
  };
  return {c};
}

std::vector<Case> cases_swiglu_backward() {
  const auto gate = swiglu_gate(), up = normals(gate.size(), 81), dout = normals(gate.size(), 82);
  const auto dg0 = normals(gate.size(), 83), du0 = normals(gate.size(), 84);
  Case c("swiglu backward");
  // slope = σ·(1 + g·(1 − σ)): σ's error ~2u·σ is multiplied by up to |g| in g·(1 − σ); the
  // products and the '+=' add a few u of |dout·up|·(1 + |g|) and of the start value.
  const auto tol_dgate = [=](size_t i, float cpu_i) {
    const double du_ = std::fabs(dout[i] * up[i]);
    return kExpUlps * kEps * (du_ * (1.0 + std::fabs(gate[i])) + std::fabs(cpu_i));
  };
  const auto tol_dup = [=](size_t i, float cpu_i) {
    return kExpUlps * kEps * (std::fabs(dout[i] * gate[i]) + std::fabs(cpu_i));
  };
  c.outs = {accumulated("dgate", dg0, within(tol_dgate)), accumulated("dup", du0, within(tol_dup))};
  c.run = [=](const Backend& b, Bufs& o) {
    b.swiglu_backward(o.f[0].data(), o.f[1].data(), dout.data(), gate.data(), up.data(), kSwigluN,
                      kSwigluF);
  };
  return {c};
}

// The MoE layer's rows: N tokens, K slots, a grouping by expert as the dispatcher draws it (every
// slot a distinct row), a combine order per token (reversed for the odd ones). The device runs the
// CPU's FMA chains in the same order: bits.
struct MoeRows {
  int N = 37, K = 3, D = 40;
  std::vector<int32_t> slot_row, row_token, order;
  MoeRows() {
    const int NK = N * K;
    slot_row.resize(NK);
    row_token.resize(NK);
    order.resize(NK);
    for (int i = 0; i < NK; ++i) slot_row[i] = (i * 7 + 3) % NK;  // 7 and N·K = 111 coprime: a permutation
    for (int i = 0; i < NK; ++i) row_token[slot_row[i]] = i / K;
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k) order[n * K + k] = n % 2 ? K - 1 - k : k;
  }
};

// The plan's rows and the combine orders: integers, the CPU's (hd/moe.h on both sides).
std::vector<Case> cases_moe_plan() {
  std::vector<Case> cases;
  for (const int E : {1, 7, 64}) {
    const int N = 301, K = 4, NK = N * K;
    std::vector<int32_t> ids(NK);
    for (int i = 0; i < NK; ++i) ids[i] = (i * 13 + i / 5) % E / 3 * 3 % E;  // some experts empty
    Case c(label("moe plan E=%d", E));
    c.ids = {{"row_token", sz(NK)}, {"slot_row", sz(NK)}};
    c.run = [=](const Backend& b, Bufs& o) { b.moe_plan(o.i[0].data(), o.i[1].data(), ids.data(), N, K, E); };
    cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<Case> cases_moe_offsets() {
  std::vector<Case> cases;
  for (const int E : {1, 7, 64}) {
    const int N = 301, K = 4, NK = N * K;
    std::vector<int32_t> ids(NK);
    for (int i = 0; i < NK; ++i) ids[i] = (i * 13 + i / 5) % E / 3 * 3 % E;  // some experts empty
    Case c(label("moe offsets E=%d", E));
    c.ids = {{"offsets", sz(E + 1)}};
    c.run = [=](const Backend& b, Bufs& o) { b.moe_offsets(o.i[0].data(), ids.data(), N, K, E); };
    cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<Case> cases_moe_combine_order() {
  std::vector<Case> cases;
  const int N = 257, K = 6, NK = N * K;
  std::vector<int32_t> base(NK);
  for (int i = 0; i < NK; ++i) base[i] = (i % K * 5 + i / K) % K;
  for (const OrderKind kind : {OrderKind::fixed, OrderKind::reversed, OrderKind::split_k})
    for (const bool with_base : {false, true}) {
      ReduceCtx ctx;
      ctx.order.kind = kind;
      ctx.key = NoiseKey{29, 1, 4, 1000};
      Case c(label("moe combine order kind=%d base=%d", int(kind), int(with_base)));
      c.ids = {{"order", sz(NK)}};
      c.run = [=](const Backend& b, Bufs& o) {
        b.moe_combine_order(o.i[0].data(), with_base ? base.data() : nullptr, N, K, ctx);
      };
      cases.push_back(std::move(c));
    }
  return cases;
}

std::vector<Case> cases_moe_gather() {
  const MoeRows m;
  const auto h = normals(sz(m.N, m.D), 101);
  Case c("moe gather");
  c.outs = {written("xe", sz(m.N * m.K, m.D), bits())};
  c.run = [=](const Backend& b, Bufs& o) {
    b.moe_gather(o.f[0].data(), h.data(), m.row_token.data(), m.N, m.N * m.K, m.D);
  };
  return {c};
}

std::vector<Case> cases_moe_combine() {
  const MoeRows m;
  const auto ye = normals(sz(m.N * m.K, m.D), 102), gate = normals(sz(m.N, m.K), 103);
  const auto extra = normals(sz(m.N, m.D), 104);
  std::vector<Case> cases;
  for (bool with_extra : {false, true}) {
    Case c(with_extra ? "moe combine + shared expert" : "moe combine");
    c.outs = {written("y", sz(m.N, m.D), bits())};
    c.run = [=](const Backend& b, Bufs& o) {
      b.moe_combine(o.f[0].data(), ye.data(), gate.data(), with_extra ? extra.data() : nullptr, m.slot_row.data(),
                    m.order.data(), m.N, m.K, m.D);
    };
    cases.push_back(c);
  }
  return cases;
}

std::vector<Case> cases_moe_combine_backward() {
  const MoeRows m;
  const auto ye = normals(sz(m.N * m.K, m.D), 105), gate = normals(sz(m.N, m.K), 106);
  const auto dy = normals(sz(m.N, m.D), 107);
  Case c("moe combine backward");
  c.outs = {written("dye", sz(m.N * m.K, m.D), bits()), written("dgate", sz(m.N, m.K), bits())};
  c.run = [=](const Backend& b, Bufs& o) {
    b.moe_combine_backward(o.f[0].data(), o.f[1].data(), dy.data(), ye.data(), gate.data(), m.slot_row.data(), m.N,
                           m.K, m.D);
  };
  return {c};
}

std::vector<Case> cases_moe_scatter_add() {
  const MoeRows m;
  const auto dxe = normals(sz(m.N * m.K, m.D), 108), dh0 = normals(sz(m.N, m.D), 109);
  Case c("moe scatter add");
  c.outs = {accumulated("dh", dh0, bits())};
  c.run = [=](const Backend& b, Bufs& o) {
    b.moe_scatter_add(o.f[0].data(), dxe.data(), m.slot_row.data(), m.N, m.K, m.D);
  };
  return {c};
}

// Two steps of the update, in place on w, m, v.
std::vector<Case> cases_adamw_update() {
  const int64_t n = 100003;
  const auto g = normals(n, 90, 0, 0, 0.01f);
  auto w = normals(n, 91), m = normals(n, 92, 0, 0, 0.001f), v = normals(n, 93, 0, 0, 1e-3f);
  for (auto& x : v) x = x * x;
  const double bc1 = 1.0 - std::pow(0.9, 7), bc2 = 1.0 - std::pow(0.95, 7);
  Case c("adamw");
  c.outs = {accumulated("w", w, bits()), accumulated("m", m, bits()), accumulated("v", v, bits())};
  c.run = [=](const Backend& b, Bufs& o) {
    for (int step = 0; step < 2; ++step)
      b.adamw_update(o.f[0].data(), o.f[1].data(), o.f[2].data(), g.data(), n, 0.7f, 0.9f, 0.95f,
                     bc1, bc2, 3e-4f, 3e-5f, 1e-8f);
  };
  return {c};
}

// ---- top-k -------------------------------------------------------------------------------------
// Equal to the CPU in every tie rule, with and without exact ties, −0/+0, NaN and ±inf.
std::vector<Case> cases_topk_forward() {
  std::vector<Case> cases;
  const int N = 133;
  const NoiseKey key{11, 2, 6, 1000};
  for (TieBreak tie : {TieBreak::lowest, TieBreak::highest, TieBreak::random})
    for (int E : {5, 64, 257})
      for (int K : {1, 2, 8, E}) {
        if (K > E) continue;
        for (bool ties : {false, true}) {
          auto s = normals(sz(N, E), 100, E, K, 2.0f);
          if (ties) {  // a 1/4 grid: many exact ties, −0/+0, NaN and ±inf
            for (size_t i = 0; i < s.size(); ++i) {
              s[i] = std::round(s[i] * 4.0f) / 4.0f;
              if (i % 37 == 5) s[i] = std::numeric_limits<float>::quiet_NaN();
              if (i % 53 == 7) s[i] = -std::numeric_limits<float>::infinity();
              if (i % 71 == 9) s[i] = std::numeric_limits<float>::infinity();
              if (i % 29 == 3) s[i] = -0.0f;
            }
          }
          Case c(label("top-k E=%d K=%d tie=%s ties=%d", E, K, tie_break_name(tie), int(ties)));
          c.outs = {written("vals", sz(N, K), bits())};
          c.ids = {{"ids", sz(N, K)}};
          c.run = [=](const Backend& b, Bufs& o) {
            b.topk_forward(o.i[0].data(), o.f[0].data(), s.data(), N, E, K, tie, key);
          };
          cases.push_back(std::move(c));
        }
      }
  return cases;
}

// ---- the router after its scores (hd/router.h) ----------------------------------------------------
// Router inputs of N rows: logits z [N, E], their scores (softmax or sigmoid, by the CPU), the top-k
// ids of z and a second id set (the probe ids of RSPO: a shifted top-k).
struct RouterRows {
  int N = 131, E = 24, K = 4;
  std::vector<float> z, soft, sig;
  std::vector<int32_t> ids, probe;
  RouterRows() {
    z = normals(sz(N, E), 120, 0, 0, 2.0f);
    soft.resize(z.size());
    sig.resize(z.size());
    cpu().softmax_forward(soft.data(), z.data(), N, E);
    cpu().sigmoid_forward(sig.data(), z.data(), static_cast<int64_t>(z.size()));
    ids.resize(sz(N, K));
    std::vector<float> vals(ids.size());
    cpu().topk_forward(ids.data(), vals.data(), z.data(), N, E, K, TieBreak::lowest, NoiseKey{});
    probe = ids;
    for (auto& e : probe) e = (e + 5) % E;
  }
};

std::vector<Case> cases_sigmoid_forward() {
  const auto x = normals(kStorageN, 121, 0, 0, 4.0f);
  Case c("sigmoid");
  c.outs = {written("out", kStorageN, close(kEps, (2 + kExpUlps) * kEps))};
  c.run = [=](const Backend& b, Bufs& o) { b.sigmoid_forward(o.f[0].data(), x.data(), kStorageN); };
  return {c};
}

std::vector<Case> cases_add_bias_rows() {
  const RouterRows r;
  const auto bias = normals(r.E, 122, 0, 0, 0.1f);
  Case c("add bias rows");
  c.outs = {written("out", sz(r.N, r.E), bits())};
  c.run = [=](const Backend& b, Bufs& o) { b.add_bias_rows(o.f[0].data(), r.sig.data(), bias.data(), r.N, r.E); };
  return {c};
}

// Gates: bit-identical where no exp is involved (the scores at the ids, renormalised or not); the
// renormalised softmax and the log-probs within the device's expf/logf.
std::vector<Case> cases_router_gate_forward() {
  const RouterRows r;
  std::vector<Case> cases;
  for (bool softmax : {true, false})
    for (bool norm : {true, false})
      for (bool probe : {false, true}) {
        Case c(label("router gate softmax=%d norm=%d probe=%d", int(softmax), int(norm), int(probe)));
        const Compare gate_rule = softmax && norm ? close(kExpUlps * kEps, (2 * r.K + kExpUlps) * kEps) : bits();
        c.outs = {written("gate", sz(r.N, r.K), gate_rule),
                  written("logp", sz(r.N, r.K), close((2 * r.E + kExpUlps) * 4 * kEps, 4 * kEps))};
        c.run = [=](const Backend& b, Bufs& o) {
          b.router_gate_forward(o.f[0].data(), o.f[1].data(), r.z.data(), softmax ? r.soft.data() : r.sig.data(),
                                r.ids.data(), probe ? r.probe.data() : nullptr, r.N, r.E, r.K, softmax, norm);
        };
        cases.push_back(std::move(c));
      }
  return cases;
}

// The gates' backward: no transcendental function, the CPU's operations in its order — bits.
std::vector<Case> cases_router_gate_backward() {
  const RouterRows r;
  const auto dgate = normals(sz(r.N, r.K), 123);
  std::vector<Case> cases;
  for (bool softmax : {true, false})
    for (bool norm : {true, false}) {
      std::vector<float> gate(sz(r.N, r.K));
      cpu().router_gate_forward(gate.data(), nullptr, r.z.data(), softmax ? r.soft.data() : r.sig.data(), r.ids.data(),
                                nullptr, r.N, r.E, r.K, softmax, norm);
      Case c(label("router gate backward softmax=%d norm=%d", int(softmax), int(norm)));
      c.outs = {written("dz", sz(r.N, r.E), bits())};
      c.run = [=](const Backend& b, Bufs& o) {
        b.router_gate_backward(o.f[0].data(), softmax ? r.soft.data() : r.sig.data(), r.ids.data(), gate.data(),
                               dgate.data(), r.N, r.E, r.K, softmax, norm);
      };
      cases.push_back(std::move(c));
    }
  return cases;
}

// ---- the rollout's sampler and the mismatch metrics (hd/sampling.h, hd/mismatch.h) ---------------
// Rows of logits over each vocabulary size and their tempered log-softmax (by the CPU, as the
// rollout's own op would give them), with one uniform per row.
struct SamplerRows {
  int N = 67, V;
  std::vector<float> logits, lp;
  std::vector<double> u;
  SamplerRows(int V_, float tau) : V(V_) {
    logits = normals(sz(N, V), 130, V, 0, 2.0f);
    std::vector<float> scaled(logits.size());
    cpu().divide_scalar(scaled.data(), logits.data(), static_cast<int64_t>(logits.size()), tau > 0 ? tau : 1.0f);
    lp.resize(logits.size());
    cpu().log_softmax_forward(lp.data(), scaled.data(), N, V);
    const auto uf = normals(sz(N, 1), 131, V);
    for (float x : uf) u.push_back(0.5 * (1.0 + std::erf(x / std::sqrt(2.0))));  // uniform on [0, 1)
  }
};

// The token must be the CPU's (an FP64 exp ≤ 1 ulp apart moves a boundary of the cumulative
// weights by ~1e-16: no row's uniform falls that close); log μ at it is a gather: bits; the
// entropy, an FP64 sum rounded to FP32: within 2 FP32 ulps.
std::vector<Case> cases_sample_rows() {
  std::vector<Case> cases;
  for (int V : kVocabs)
    for (float tau : {0.0f, 0.6f, 1.0f})
      for (float top_p : {1.0f, 0.8f}) {
        const SamplerRows r(V, tau);
        Case c(label("sample V=%d tau=%.1f top_p=%.1f", V, tau, top_p));
        c.outs = {written("logp", sz(r.N, 1), bits()), written("entropy", sz(r.N, 1), close(kEps, 2 * kEps))};
        c.ids = {{"tokens", sz(r.N, 1)}};
        c.run = [=](const Backend& b, Bufs& o) {
          b.sample_rows(o.i[0].data(), o.f[0].data(), o.f[1].data(), r.logits.data(), r.lp.data(), r.u.data(), r.N,
                        r.V, tau, top_p);
        };
        cases.push_back(std::move(c));
      }
  return cases;
}

// A copy: bits; the rows not named keep their start values.
std::vector<Case> cases_scatter_rows() {
  const int N = 37, C = 45, rows = 50;
  const auto src = normals(sz(N, C), 132);
  std::vector<int32_t> dst_row(N);
  for (int n = 0; n < N; ++n) dst_row[n] = n % 5 == 3 ? -1 : (n * 7) % rows;  // distinct: 7 is prime to 50
  Case c("scatter rows");
  c.outs = {accumulated("dst", normals(sz(rows, C), 133), bits())};
  c.run = [=](const Backend& b, Bufs& o) { b.scatter_rows(o.f[0].data(), src.data(), dst_row.data(), N, C); };
  return {c};
}

// FP64 outputs, compared as FP32 pairs (the value rounded, then what the rounding left): within a
// few FP64 ulps of the row's scale through the device's exp and log (≤ 1 ulp each).
constexpr double kEps64 = 1.1102230246251565e-16;
void split_f64(const std::vector<double>& x, std::vector<float>* hi, std::vector<float>* lo) {
  for (size_t i = 0; i < x.size(); ++i) {
    (*hi)[i] = static_cast<float>(x[i]);
    (*lo)[i] = static_cast<float>(x[i] - static_cast<double>((*hi)[i]));
  }
}

std::vector<Case> cases_kl_rows() {
  return per_size(kVocabs, [&](int V) {
    const int N = 53, rows = 29;
    const auto a = normals(sz(rows, V), 134, V, 0, 1.5f), bb = normals(sz(rows, V), 135, V, 0, 1.5f);
    std::vector<int32_t> ar(N), br(N), t(N);
    for (int n = 0; n < N; ++n) {
      ar[n] = (n * 7) % rows;
      br[n] = (n * 3 + 1) % rows;
      t[n] = (n * 13) % V;
    }
    Case c(label("kl rows V=%d", V));
    // The FP32 halves first (the rounded value within 2 FP32 ulps); then, in `more`, the FP64
    // values rebuilt from both halves: within 4·(V + 4) FP64 ulps of the row's scale (|log ratio|,
    // the terms of the KL: ≤ 10 here) through the device's FP64 exp and log (≤ 1 ulp each).
    const double tol64 = 4.0 * (V + 4) * 10.0 * kEps64;
    const Compare in_more = [](const std::vector<float>&, const std::vector<float>&, const std::string&) {};
    c.outs = {written("kl", sz(N, 1), close(tol64, 2 * kEps)), written("kl lo", sz(N, 1), in_more),
              written("log ratio", sz(N, 1), close(tol64, 2 * kEps)), written("log ratio lo", sz(N, 1), in_more)};
    c.run = [=](const Backend& b, Bufs& o) {
      std::vector<double> kl(N), lr(N);
      b.kl_rows(kl.data(), lr.data(), a.data(), bb.data(), ar.data(), br.data(), t.data(), N, V);
      split_f64(kl, &o.f[0], &o.f[1]);
      split_f64(lr, &o.f[2], &o.f[3]);
    };
    c.more = [=](const Bufs& cpu_out, const Bufs& dev) {
      for (int k : {0, 2})
        for (int n = 0; n < N; ++n) {
          const double want = static_cast<double>(cpu_out.f[k][n]) + cpu_out.f[k + 1][n];
          const double got = static_cast<double>(dev.f[k][n]) + dev.f[k + 1][n];
          EXPECT_NEAR(got, want, tol64) << (k == 0 ? "kl" : "log ratio") << " row " << n << " (FP64)";
        }
    };
    return c;
  });
}

std::vector<Case> cases_logit_stats_rows() {
  return per_size(kVocabs, [&](int V) {
    const int N = 53, rows = 29;
    const auto x = normals(sz(rows, V), 136, V, 0, 3.0f);
    std::vector<int32_t> at(N);
    for (int n = 0; n < N; ++n) at[n] = (n * 11) % rows;
    Case c(label("logit stats rows V=%d", V));
    // no transcendental function: the CPU's operations in its order, so the FP64 values are the
    // CPU's bits (both FP32 halves)
    c.outs = {written("stdev", sz(N, 1), bits()), written("stdev lo", sz(N, 1), bits()),
              written("margin", sz(N, 1), bits()), written("margin lo", sz(N, 1), bits())};
    c.run = [=](const Backend& b, Bufs& o) {
      std::vector<double> sd(N), mg(N);
      b.logit_stats_rows(sd.data(), mg.data(), x.data(), at.data(), N, V, 0.6f);
      split_f64(sd, &o.f[0], &o.f[1]);
      split_f64(mg, &o.f[2], &o.f[3]);
    };
    return c;
  });
}

// The clip's sum of squares: a fixed tree per range on the device, the serial sum on the CPU —
// within n·2⁻⁵³ of the sum (the terms are positive), compared in FP64 (`more`).
std::vector<Case> cases_sum_squares() {
  std::vector<Case> cases;
  const auto x = normals(sz(300001), 140, 0, 0, 0.01f);
  const std::vector<int64_t> begin = {0, 7, 1000, 250000, 250000}, end = {7, 1000, 250000, 300001, 250000};
  const int R = static_cast<int>(begin.size());
  for (const bool per_range : {false, true}) {
    const int n_out = per_range ? R : 1;
    Case c(label("sum squares per_range=%d", int(per_range)));
    const Compare in_more = [](const std::vector<float>&, const std::vector<float>&, const std::string&) {};
    c.outs = {written("sq", sz(n_out), close(0, 300001 * 2 * kEps64 + kEps)), written("sq lo", sz(n_out), in_more)};
    c.run = [=](const Backend& b, Bufs& o) {
      std::vector<double> sq(n_out);
      b.sum_squares(sq.data(), x.data(), begin.data(), end.data(), R, per_range);
      split_f64(sq, &o.f[0], &o.f[1]);
    };
    c.more = [=](const Bufs& cpu_out, const Bufs& dev) {
      for (int r = 0; r < n_out; ++r) {
        const double want = static_cast<double>(cpu_out.f[0][r]) + cpu_out.f[1][r];
        const double got = static_cast<double>(dev.f[0][r]) + dev.f[1][r];
        EXPECT_NEAR(got, want, 300001 * 2 * kEps64 * want) << "range " << r << " (FP64)";
      }
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

// The RL policy loss (hd/policy_loss.h): a mini-batch of S sequences picked from a step of
// S_step (seq), their response log-probs in packed rows (new_row), some tokens masked, a few
// settings: token ratio with a sequence correction and the k3 KL, GSPO's sequence ratio, RSPO's γ
// with the dual clip. The row function runs on both sides in FP64 with the same roundings: the
// per-token outputs are within an FP32 ulp or two (the device's exp, ≤ 1 FP64 ulp, can move the
// last rounding to FP32), the totals' FP64 sums within S·R FP64 ulps of their scale (rows summed
// in another order), the token counts exact.
std::vector<Case> cases_policy_loss_rows() {
  std::vector<Case> cases;
  const int S = 24, R = 17, S_step = 40;
  const auto shifted = [](std::vector<float> x, float mean) {
    for (float& v : x) v += mean;
    return x;
  };
  const auto old_lp = shifted(normals(sz(S_step, R), 150, 0, 0, 0.5f), -1.0f);
  const auto roll = shifted(normals(sz(S_step, R), 151, 0, 0, 0.5f), -1.0f);
  const auto ref = shifted(normals(sz(S_step, R), 152, 0, 0, 0.5f), -1.0f);
  const auto adv = normals(sz(S_step), 153);
  const auto noise = normals(sz(S, R), 154, 0, 0, 0.05f);
  const auto gam = shifted(normals(sz(S, R), 155, 0, 0, 0.1f), 0.8f);
  std::vector<float> mask(sz(S_step, R), 0.0f);
  std::vector<int32_t> seq(S), new_row(S), len(S_step);
  for (int s = 0; s < S_step; ++s) {
    len[s] = s % 7 == 3 ? 0 : 1 + (s * 5) % R;  // every seventh response fully masked
    for (int t = 0; t < len[s]; ++t) mask[sz(s) * R + t] = 1.0f;
  }
  int rows = 0;
  for (int i = 0; i < S; ++i) {
    seq[i] = (i * 11 + 3) % S_step;
    new_row[i] = rows + 4;  // a prompt of 5: the response's log-probs from row 4 on
    rows += 5 + len[seq[i]];
  }
  std::vector<float> logp_new(sz(rows + R), 0.0f);
  for (int i = 0; i < S; ++i)
    for (int t = 0; t < len[seq[i]]; ++t)
      logp_new[sz(new_row[i] + t)] = old_lp[sz(seq[i]) * R + t] + noise[sz(i) * R + t];
  std::vector<double> scale(S);
  for (int i = 0; i < S; ++i) scale[i] = len[seq[i]] > 0 ? 1.0 / (len[seq[i]] * 20.0) : 0.0;
  struct Setting {
    const char* name;
    PolicyRatio ratio;
    int correction;
    float kl, dual;
    bool gamma;
  };
  const Setting settings[] = {{"token tis+seq-mis kl", PolicyRatio::token, 7, 0.05f, 0.0f, false},
                              {"sequence (gspo) seq-tis-geo", PolicyRatio::sequence, 5, 0.0f, 0.0f, false},
                              {"token gamma icepop dual", PolicyRatio::token, 3, 0.0f, 3.0f, true}};
  for (const Setting& st : settings) {
    PolicyLossParams p;
    p.ratio = st.ratio;
    p.correction = st.correction;
    p.kl_coef = st.kl;
    p.dual_clip = st.dual;
    p.seq_mask_low = 0.5f;
    p.seq_mask_high = 2.0f;
    if (st.ratio == PolicyRatio::sequence) p.clip_low = 3e-4f, p.clip_high = 4e-4f;
    Case c(label("policy loss %s", st.name));
    const Compare in_more = [](const std::vector<float>&, const std::vector<float>&, const std::string&) {};
    const Compare per_token = close(1e-30, 2 * kEps);
    c.outs = {written("dlogp", sz(rows + R), per_token), written("ratio", sz(S, R), per_token),
              written("weight", sz(S, R), per_token), written("term", sz(S, R), per_token),
              written("totals", sz(kLossTotals), in_more), written("totals lo", sz(kLossTotals), in_more)};
    c.run = [=](const Backend& b, Bufs& o) {
      std::vector<double> totals(kLossTotals);
      o.f[0].assign(sz(rows + R), 0.0f);
      b.policy_loss_rows(o.f[0].data(), totals.data(), o.f[1].data(), o.f[2].data(), o.f[3].data(), logp_new.data(),
                         new_row.data(), old_lp.data(), roll.data(), mask.data(), ref.data(), seq.data(), adv.data(),
                         st.gamma ? gam.data() : nullptr, scale.data(), S, R, p);
      split_f64(totals, &o.f[4], &o.f[5]);
    };
    c.more = [=](const Bufs& cpu_out, const Bufs& dev) {
      for (int k = 0; k < kLossTotals; ++k) {
        const double want = static_cast<double>(cpu_out.f[4][k]) + cpu_out.f[5][k];
        const double got = static_cast<double>(dev.f[4][k]) + dev.f[5][k];
        const bool count = k == kLossTokens || k == kLossClipped || k == kLossMasked;
        EXPECT_NEAR(got, want, count ? 0.0 : 4.0 * S * R * kEps64 * (1.0 + std::fabs(want))) << "total " << k;
      }
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

// ---- the table over the op list ----------------------------------------------------------------
struct OpCases {
  Op op;
  std::vector<Case> (*cases)();
};
// One row per kernel of kernels/ops.def: a new op without cases_<op> above fails to compile here.
const OpCases kOpCases[] = {
#define MOERL_OP(name, params, args) {Op::name, &cases_##name},
#define MOERL_LINEAR_OP(name, params, args)  // test_gemm_gpu.cpp
#include "kernels/ops.def"
};

// gtest prints a parameter in the test's listing: the op's name, not the row's bytes.
void PrintTo(const OpCases& c, std::ostream* os) { *os << op_name(c.op); }

class OpsGpu : public ::testing::TestWithParam<OpCases> {};

TEST_P(OpsGpu, AgreesWithCpu) {
  MOERL_REQUIRE_GPU();
  const std::vector<Case> cases = GetParam().cases();
  ASSERT_FALSE(cases.empty()) << op_name(GetParam().op) << " has no case";
  for (const Case& c : cases) check(c);
}

INSTANTIATE_TEST_SUITE_P(Op, OpsGpu, ::testing::ValuesIn(kOpCases),
                         [](const ::testing::TestParamInfo<OpCases>& info) {
                           return std::string(op_name(info.param.op));
                         });

}  // namespace
}  // namespace moerl
