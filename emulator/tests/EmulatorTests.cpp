//===- EmulatorTests.cpp - The emulator against known answers and faults --===//
//
// Hand-written PTX with known results (mma.sync against a naive matmul in
// f16 and bf16, ldmatrix with and without .trans, every shfl.sync mode,
// cp.async zero-fill) and faults that must be caught (out-of-bounds global
// and shared accesses, misaligned cp.async, a missing wait_group, a barrier
// some threads never reach, races, endless loops, unknown instructions).
// The tests call the driver API of libattnc-emucuda.so directly.
//
//===----------------------------------------------------------------------===//
#include <catch2/catch.hpp>

#include "Float16.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" {
int cuInit(unsigned);
int cuModuleLoadDataEx(void **, const void *, unsigned, int *, void **);
int cuModuleUnload(void *);
int cuModuleGetFunction(void **, void *, const char *);
int cuFuncSetAttribute(void *, int, int);
int cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned,
                   unsigned, unsigned, void *, void **, void **);
int cuLaunchKernelEx(const void *, void *, void **, void **);
int cuMemAlloc_v2(unsigned long long *, size_t);
int cuMemFree_v2(unsigned long long);
int cuMemcpyHtoD_v2(unsigned long long, const void *, size_t);
int cuMemcpyDtoH_v2(void *, unsigned long long, size_t);
int cuCtxSynchronize();
int cuStreamCreate(void **, unsigned);
int cuStreamSynchronize(void *);
int cuStreamDestroy_v2(void *);
const char *attnc_emu_last_report();
void attnc_emu_clear_report();
}

namespace {

using namespace attnc::emu;

/// A loaded module; the JIT log on failure.
struct Ptx {
  void *mod = nullptr;
  int status = 0;
  std::string log;
  explicit Ptx(const std::string &text) {
    static bool init = (cuInit(0), true);
    (void)init;
    std::vector<char> err(4096, 0);
    int opts[] = {5, 6};
    void *vals[] = {err.data(), reinterpret_cast<void *>(uintptr_t(err.size()))};
    status = cuModuleLoadDataEx(&mod, text.c_str(), 2, opts, vals);
    log = err.data();
  }
  ~Ptx() {
    if (mod)
      cuModuleUnload(mod);
  }
  /// Launches `name` over grid x block with 8-byte parameters.
  int run(const char *name, unsigned grid, unsigned block,
          std::vector<unsigned long long> args, unsigned smem = 0) {
    void *f = nullptr;
    REQUIRE(cuModuleGetFunction(&f, mod, name) == 0);
    std::vector<void *> ptrs;
    for (auto &a : args)
      ptrs.push_back(&a);
    attnc_emu_clear_report();
    // Launches are queued: a kernel's fault comes back when it is waited for.
    int r = cuLaunchKernel(f, grid, 1, 1, block, 1, 1, smem, nullptr, ptrs.data(), nullptr);
    return r ? r : cuCtxSynchronize();
  }
};

/// Device memory holding `bytes` bytes (or a copy of `init`).
struct Buf {
  unsigned long long p = 0;
  size_t n;
  explicit Buf(size_t bytes) : n(bytes) { REQUIRE(cuMemAlloc_v2(&p, bytes) == 0); }
  template <typename T> explicit Buf(const std::vector<T> &init) : Buf(init.size() * sizeof(T)) {
    REQUIRE(cuMemcpyHtoD_v2(p, init.data(), n) == 0);
  }
  ~Buf() { cuMemFree_v2(p); }
  template <typename T> std::vector<T> get() const {
    std::vector<T> out(n / sizeof(T));
    REQUIRE(cuMemcpyDtoH_v2(out.data(), p, n) == 0);
    return out;
  }
};

struct Quiet {
  Quiet() { setenv("ATTNC_EMU_QUIET", "1", 1); }
  ~Quiet() { unsetenv("ATTNC_EMU_QUIET"); }
};

std::string report() { return attnc_emu_last_report(); }

const char *kHeader = ".version 8.0\n.target sm_80\n.address_size 64\n";

// ---- mma.sync + ldmatrix --------------------------------------------------

/// D = C + A * B for A 16x16 (row-major), B 16x8 given as B^T (8x16,
/// row-major: ldmatrix without .trans) or as B (16x8 row-major: .trans),
/// C and D 16x8 f32 row-major. One warp.
std::string mmaKernel(const std::string &half, bool trans) {
  std::string bAddr =
      trans ? "  and.b32 %r16, %r1, 15;\n"
              "  mul.wide.u32 %rd18, %r16, 16;\n"
            : "  and.b32 %r16, %r1, 7;\n"
              "  shr.u32 %r17, %r1, 3;\n"
              "  and.b32 %r17, %r17, 1;\n"
              "  mul.wide.u32 %rd16, %r16, 32;\n"
              "  mul.wide.u32 %rd17, %r17, 16;\n"
              "  add.s64 %rd18, %rd16, %rd17;\n";
  return std::string(kHeader) +
         ".visible .entry mma(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pd)\n"
         "{\n"
         "  .reg .b32 %r<40>;\n  .reg .b64 %rd<40>;\n  .reg .f32 %f<16>;\n  .reg .pred %p<4>;\n"
         "  .shared .align 16 .b8 sa[512];\n  .shared .align 16 .b8 sb[256];\n"
         "  ld.param.u64 %rd1, [pa];\n  ld.param.u64 %rd2, [pb];\n"
         "  ld.param.u64 %rd3, [pc];\n  ld.param.u64 %rd4, [pd];\n"
         "  mov.u32 %r1, %tid.x;\n"
         "  mul.wide.u32 %rd5, %r1, 16;\n"
         "  add.s64 %rd6, %rd1, %rd5;\n"
         "  ld.global.v4.b32 {%r2, %r3, %r4, %r5}, [%rd6];\n"
         "  mov.u64 %rd7, sa;\n  add.s64 %rd8, %rd7, %rd5;\n"
         "  st.shared.v4.b32 [%rd8], {%r2, %r3, %r4, %r5};\n"
         "  setp.lt.u32 %p1, %r1, 16;\n"
         "  @!%p1 bra SKIPB;\n"
         "  add.s64 %rd9, %rd2, %rd5;\n"
         "  ld.global.v4.b32 {%r6, %r7, %r8, %r9}, [%rd9];\n"
         "  mov.u64 %rd10, sb;\n  add.s64 %rd11, %rd10, %rd5;\n"
         "  st.shared.v4.b32 [%rd11], {%r6, %r7, %r8, %r9};\n"
         "SKIPB:\n"
         "  bar.sync 0;\n"
         "  and.b32 %r10, %r1, 15;\n  shr.u32 %r11, %r1, 4;\n"
         "  mul.wide.u32 %rd12, %r10, 32;\n  mul.wide.u32 %rd13, %r11, 16;\n"
         "  add.s64 %rd14, %rd12, %rd13;\n  add.s64 %rd15, %rd7, %rd14;\n"
         "  ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r12, %r13, %r14, %r15}, [%rd15];\n" +
         bAddr +
         "  mov.u64 %rd10, sb;\n  add.s64 %rd19, %rd10, %rd18;\n"
         "  ldmatrix.sync.aligned.m8n8.x2" + (trans ? ".trans" : "") +
         ".shared.b16 {%r18, %r19}, [%rd19];\n"
         "  shr.u32 %r20, %r1, 2;\n  and.b32 %r21, %r1, 3;\n"
         "  shl.b32 %r22, %r20, 3;\n  shl.b32 %r23, %r21, 1;\n  add.s32 %r24, %r22, %r23;\n"
         "  mul.wide.u32 %rd20, %r24, 4;\n  add.s64 %rd21, %rd3, %rd20;\n"
         "  ld.global.v2.f32 {%f1, %f2}, [%rd21];\n"
         "  ld.global.v2.f32 {%f3, %f4}, [%rd21+256];\n"
         "  mma.sync.aligned.m16n8k16.row.col.f32." + half + "." + half +
         ".f32\n    {%f5, %f6, %f7, %f8},\n    {%r12, %r13, %r14, %r15},\n"
         "    {%r18, %r19},\n    {%f1, %f2, %f3, %f4};\n"
         "  add.s64 %rd22, %rd4, %rd20;\n"
         "  st.global.v2.f32 [%rd22], {%f5, %f6};\n"
         "  st.global.v2.f32 [%rd22+256], {%f7, %f8};\n"
         "  ret;\n}\n";
}

void checkMma(bool bf, bool trans) {
  std::mt19937 rng(bf * 2 + trans + 7);
  std::uniform_real_distribution<float> dist(-2, 2);
  auto toHalf = [&](float f) { return bf ? floatToBf16(f) : floatToF16(f); };
  auto fromHalf = [&](uint16_t h) { return bf ? bf16ToFloat(h) : f16ToFloat(h); };
  std::vector<uint16_t> a(256), b(128); // b: B^T [8][16] or B [16][8]
  std::vector<float> c(128);
  for (auto &x : a) x = toHalf(dist(rng));
  for (auto &x : b) x = toHalf(dist(rng));
  for (auto &x : c) x = dist(rng);
  Buf da(a), db(b), dc(c), dd(c.size() * 4);
  Ptx m(mmaKernel(bf ? "bf16" : "f16", trans));
  REQUIRE(m.status == 0);
  REQUIRE(m.run("mma", 1, 32, {da.p, db.p, dc.p, dd.p}) == 0);
  std::vector<float> d = dd.get<float>();
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      double want = c[i * 8 + j];
      for (int k = 0; k < 16; ++k) {
        double bkj = trans ? fromHalf(b[k * 8 + j]) : fromHalf(b[j * 16 + k]);
        want += double(fromHalf(a[i * 16 + k])) * bkj;
      }
      INFO("D[" << i << "][" << j << "]");
      CHECK(d[i * 8 + j] == Approx(want).epsilon(1e-6).margin(1e-6));
    }
}

} // namespace

TEST_CASE("mma.sync m16n8k16 f16 and bf16 against a naive matmul", "[emucuda]") {
  SECTION("f16, B through ldmatrix") { checkMma(false, false); }
  SECTION("f16, B through ldmatrix.trans") { checkMma(false, true); }
  SECTION("bf16, B through ldmatrix") { checkMma(true, false); }
  SECTION("bf16, B through ldmatrix.trans") { checkMma(true, true); }
}

namespace {
// Every lane stores shfl results of its value (lane * 10 + 1) to
// out[mode * 32 + lane], and the predicate of the last one to out[160 + lane].
const char *kShfl = R"(
.visible .entry shfl(.param .u64 out)
{
  .reg .b32 %r<20>;
  .reg .b64 %rd<10>;
  .reg .pred %p<2>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  mad.lo.s32 %r2, %r1, 10, 1;
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  shfl.sync.bfly.b32 %r3, %r2, 5, 31, -1;
  st.global.b32 [%rd3], %r3;
  shfl.sync.up.b32 %r4, %r2, 3, 0, -1;
  st.global.b32 [%rd3+128], %r4;
  shfl.sync.down.b32 %r5, %r2, 3, 31, -1;
  st.global.b32 [%rd3+256], %r5;
  shfl.sync.idx.b32 %r6, %r2, 7, 6175, -1;
  st.global.b32 [%rd3+384], %r6;
  shfl.sync.down.b32 %r7|%p1, %r2, 3, 6175, 0xffffffff;
  st.global.b32 [%rd3+512], %r7;
  selp.u32 %r8, 1, 0, %p1;
  st.global.b32 [%rd3+640], %r8;
  ret;
}
)";
// redux.sync over lane values v = 7 * lane - 100 (s32: -100 ... 117):
// add, min and max as u32 and s32, and, or, xor, and umin over the odd lanes
// (mask 0xaaaaaaaa; the even lanes take no part and keep 0), to
// out[k * 32 + lane].
const char *kRedux = R"(
.visible .entry redux(.param .u64 out)
{
  .reg .b32 %r<20>;
  .reg .b64 %rd<10>;
  .reg .pred %p<2>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  mad.lo.s32 %r2, %r1, 7, -100;
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  redux.sync.add.s32 %r3, %r2, -1;
  st.global.b32 [%rd3], %r3;
  redux.sync.min.u32 %r4, %r2, -1;
  st.global.b32 [%rd3+128], %r4;
  redux.sync.min.s32 %r5, %r2, -1;
  st.global.b32 [%rd3+256], %r5;
  redux.sync.max.u32 %r6, %r2, -1;
  st.global.b32 [%rd3+384], %r6;
  redux.sync.max.s32 %r7, %r2, -1;
  st.global.b32 [%rd3+512], %r7;
  redux.sync.and.b32 %r8, %r2, -1;
  st.global.b32 [%rd3+640], %r8;
  redux.sync.or.b32 %r9, %r2, -1;
  st.global.b32 [%rd3+768], %r9;
  redux.sync.xor.b32 %r10, %r2, -1;
  st.global.b32 [%rd3+896], %r10;
  mov.u32 %r11, 0;
  and.b32 %r12, %r1, 1;
  setp.eq.u32 %p1, %r12, 0;
  @%p1 bra DONE;
  redux.sync.min.u32 %r11, %r1, 0xaaaaaaaa;
DONE:
  st.global.b32 [%rd3+1024], %r11;
  ret;
}
)";
} // namespace

TEST_CASE(
    "redux.sync: add, min, max (u32 and s32), and, or, xor, a member mask",
    "[emucuda]") {
  Buf out(9 * 32 * 4);
  Ptx m(std::string(kHeader) + kRedux);
  REQUIRE(m.status == 0);
  REQUIRE(m.run("redux", 1, 32, {out.p}) == 0);
  std::vector<uint32_t> o = out.get<uint32_t>();
  uint32_t sum = 0, umin = ~0u, umax = 0, band = ~0u, bor = 0, bxor = 0;
  int32_t smin = INT32_MAX, smax = INT32_MIN;
  for (int l = 0; l < 32; ++l) {
    int32_t v = 7 * l - 100;
    uint32_t u = uint32_t(v);
    sum += u;
    umin = std::min(umin, u);
    umax = std::max(umax, u);
    smin = std::min(smin, v);
    smax = std::max(smax, v);
    band &= u;
    bor |= u;
    bxor ^= u;
  }
  CHECK(smin == -100); // the unsigned minimum is not the signed one
  CHECK(umin == 5);
  for (int l = 0; l < 32; ++l) {
    INFO("lane " << l);
    CHECK(o[l] == sum);
    CHECK(o[32 + l] == umin);
    CHECK(o[64 + l] == uint32_t(smin));
    CHECK(o[96 + l] == umax);
    CHECK(o[128 + l] == uint32_t(smax));
    CHECK(o[160 + l] == band);
    CHECK(o[192 + l] == bor);
    CHECK(o[224 + l] == bxor);
    CHECK(o[256 + l] == (l % 2 ? 1u : 0u)); // the odd lanes' minimum lane
  }
}

TEST_CASE("shfl.sync: bfly, up, down, idx, segments and the predicate", "[emucuda]") {
  Buf out(6 * 32 * 4);
  Ptx m(std::string(kHeader) + kShfl);
  REQUIRE(m.status == 0);
  REQUIRE(m.run("shfl", 1, 32, {out.p}) == 0);
  std::vector<uint32_t> o = out.get<uint32_t>();
  auto v = [](int lane) { return uint32_t(lane * 10 + 1); };
  for (int l = 0; l < 32; ++l) {
    INFO("lane " << l);
    CHECK(o[l] == v(l ^ 5));                               // __shfl_xor(v, 5)
    CHECK(o[32 + l] == (l >= 3 ? v(l - 3) : v(l)));        // __shfl_up(v, 3)
    CHECK(o[64 + l] == (l + 3 < 32 ? v(l + 3) : v(l)));    // __shfl_down(v, 3)
    CHECK(o[96 + l] == v((l & ~7) | 7));                   // __shfl(v, 7, 8): c = 0x181f
    bool in = (l % 8) + 3 < 8;                             // __shfl_down(v, 3, 8)
    CHECK(o[128 + l] == (in ? v(l + 3) : v(l)));
    CHECK(o[160 + l] == uint32_t(in));
  }
}

TEST_CASE("bar.warp.sync: lanes reconverge after one lane's branch", "[emucuda]") {
  // Lane 0's block lies after the join, so the other lanes reach the join
  // first; bar.warp.sync holds them until lane 0 arrives, and activemask
  // after it sees the whole warp. (bar.warp.sync was once decoded as a CTA
  // barrier numbered -1, and no kernel with it loaded.)
  const std::string k = std::string(kHeader) + R"(
.visible .entry ws(.param .u64 out)
{
  .reg .b32 %r<8>;
  .reg .b64 %rd<8>;
  .reg .pred %p<2>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra JOIN;
  bra.uni LANE0;
JOIN:
  bar.warp.sync -1;
  activemask.b32 %r2;
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.b32 [%rd3], %r2;
  ret;
LANE0:
  mov.u32 %r3, 1;
  bra.uni JOIN;
}
)";
  Buf out(32 * 4);
  Ptx m(k);
  REQUIRE(m.status == 0);
  REQUIRE(m.run("ws", 1, 32, {out.p}) == 0);
  for (uint32_t mask : out.get<uint32_t>())
    CHECK(mask == 0xffffffffu);
}

namespace {
// Thread 0 copies 16 bytes with cp.async of which only 8 come from global
// (src-size 8): the other 8 are zero-filled.
const char *kCpAsync = R"(
.visible .entry cpa(.param .u64 in, .param .u64 out)
{
  .reg .b32 %r<10>;
  .reg .b64 %rd<10>;
  .shared .align 16 .b8 s[16];
  ld.param.u64 %rd1, [in];
  ld.param.u64 %rd2, [out];
  mov.u64 %rd3, s;
  mov.u32 %r9, 8;
  cp.async.ca.shared.global [%rd3], [%rd1], 16, %r9;
  cp.async.commit_group;
  cp.async.wait_group 0;
  ld.shared.v4.b32 {%r1, %r2, %r3, %r4}, [%rd3];
  st.global.v4.b32 [%rd2], {%r1, %r2, %r3, %r4};
  ret;
}
)";
} // namespace

TEST_CASE("cp.async zero-fills past src-size", "[emucuda]") {
  Buf in(std::vector<uint32_t>{11, 22, 33, 44}), out(16);
  Ptx m(std::string(kHeader) + kCpAsync);
  REQUIRE(m.status == 0);
  REQUIRE(m.run("cpa", 1, 1, {in.p, out.p}) == 0);
  CHECK(out.get<uint32_t>() == std::vector<uint32_t>{11, 22, 0, 0});
}

// ---- faults ----------------------------------------------------------------

namespace {
std::string kernel(const std::string &body, const std::string &decls = "") {
  return std::string(kHeader) +
         ".visible .entry k(.param .u64 p0, .param .u64 p1)\n{\n"
         "  .reg .b32 %r<20>;\n  .reg .b64 %rd<20>;\n  .reg .pred %p<4>;\n" +
         decls + "  ld.param.u64 %rd1, [p0];\n  ld.param.u64 %rd2, [p1];\n"
                 "  mov.u32 %r1, %tid.x;\n" +
         body + "  ret;\n}\n";
}
} // namespace

TEST_CASE("memcheck: out-of-bounds global accesses are reported", "[emucuda]") {
  Quiet q;
  Buf b(4096);
  // Thread 5 reads the 4 bytes just past the end.
  Ptx m(kernel("  setp.eq.u32 %p1, %r1, 5;\n"
               "  @!%p1 bra DONE;\n"
               "  ld.global.b32 %r2, [%rd1+4096];\n"
               "DONE:\n"));
  REQUIRE(m.status == 0);
  CHECK(m.run("k", 1, 32, {b.p, 0}) == 700);
  std::string r = report();
  CHECK_THAT(r, Catch::Contains("invalid global read of 4 bytes"));
  CHECK_THAT(r, Catch::Contains("0 bytes past the end of allocation"));
  CHECK_THAT(r, Catch::Contains("PTX line 14: ld.global.b32 %r2, [%rd1+4096];"));
  CHECK_THAT(r, Catch::Contains("thread (5, 0, 0)"));
  // A write through a null pointer.
  Ptx w(kernel("  st.global.b32 [%rd2], %r1;\n"));
  CHECK(w.run("k", 1, 1, {b.p, 0}) == 700);
  CHECK_THAT(report(), Catch::Contains("invalid global write of 4 bytes at 0x0"));
  // An access straddling the end.
  Ptx s(kernel("  ld.global.v2.b32 {%r2, %r3}, [%rd1+4092];\n"));
  CHECK(s.run("k", 1, 1, {b.p, 0}) == 716); // misaligned for 8 bytes first
  Ptx t(kernel("  ld.global.v4.b32 {%r2, %r3, %r4, %r5}, [%rd1+4088];\n"));
  CHECK(t.run("k", 1, 1, {b.p, 0}) == 716);
}

TEST_CASE("memcheck: out-of-bounds and uninitialized shared accesses", "[emucuda]") {
  Quiet q;
  const std::string decl = "  .shared .align 16 .b8 s[256];\n";
  Ptx oob(kernel("  mov.u64 %rd3, s;\n  st.shared.b32 [%rd3+256], %r1;\n", decl));
  CHECK(oob.run("k", 1, 1, {0, 0}) == 700);
  CHECK_THAT(report(), Catch::Contains("invalid shared write of 4 bytes at 0x100: the CTA has 256 bytes"));
  Ptx uninit(kernel("  mov.u64 %rd3, s;\n  ld.shared.b32 %r2, [%rd3+8];\n", decl));
  CHECK(uninit.run("k", 1, 1, {0, 0}) == 719);
  CHECK_THAT(report(), Catch::Contains("byte 0x8 was never written"));
  // Dynamic shared memory extends the CTA's.
  Ptx dyn(std::string(kHeader) +
          ".extern .shared .align 16 .b8 dyn[];\n"
          ".visible .entry k()\n{\n  .reg .b64 %rd<4>;\n  .reg .b32 %r<4>;\n"
          "  mov.u64 %rd1, dyn;\n  mov.u32 %r1, 7;\n  st.shared.b32 [%rd1+1020], %r1;\n  ret;\n}\n");
  REQUIRE(dyn.status == 0);
  CHECK(dyn.run("k", 1, 1, {}, 1024) == 0);
  CHECK(dyn.run("k", 1, 1, {}, 1020) == 700);
}

TEST_CASE("memcheck: cp.async alignment and a missing wait_group", "[emucuda]") {
  Quiet q;
  Buf g(64);
  const std::string decl = "  .shared .align 16 .b8 s[64];\n";
  Ptx mis(kernel("  mov.u64 %rd3, s;\n"
                 "  cp.async.cg.shared.global [%rd3+4], [%rd1], 16;\n"
                 "  cp.async.wait_all;\n", decl));
  REQUIRE(mis.status == 0);
  CHECK(mis.run("k", 1, 1, {g.p, 0}) == 716);
  CHECK_THAT(report(), Catch::Contains("misaligned shared cp.async write of 16 bytes at 0x4"));
  Ptx nowait(kernel("  mov.u64 %rd3, s;\n"
                    "  cp.async.cg.shared.global [%rd3], [%rd1], 16;\n"
                    "  cp.async.commit_group;\n"
                    "  ld.shared.b32 %r2, [%rd3];\n"
                    "  cp.async.wait_group 0;\n", decl));
  CHECK(nowait.run("k", 1, 1, {g.p, 0}) == 719);
  CHECK_THAT(report(), Catch::Contains("is the target of a cp.async not yet retired"));
  // wait_group 1 leaves the newest group in flight.
  Ptx partial(kernel("  mov.u64 %rd3, s;\n"
                     "  cp.async.cg.shared.global [%rd3], [%rd1], 16;\n"
                     "  cp.async.commit_group;\n"
                     "  cp.async.cg.shared.global [%rd3+16], [%rd1+16], 16;\n"
                     "  cp.async.commit_group;\n"
                     "  cp.async.wait_group 1;\n"
                     "  ld.shared.b32 %r2, [%rd3];\n"
                     "  ld.shared.b32 %r3, [%rd3+16];\n", decl));
  CHECK(partial.run("k", 1, 1, {g.p, 0}) == 719);
  CHECK_THAT(report(), Catch::Contains("PTX line 20: ld.shared.b32 %r3, [%rd3+16];"));
}

TEST_CASE("a barrier that not every thread reaches is a deadlock, not a hang", "[emucuda]") {
  Quiet q;
  // Threads 32..63 exit before the barrier.
  Ptx m(kernel("  setp.ge.u32 %p1, %r1, 32;\n"
               "  @%p1 bra DONE;\n"
               "  bar.sync 0;\n"
               "DONE:\n"));
  REQUIRE(m.status == 0);
  CHECK(m.run("k", 1, 64, {0, 0}) == 702);
  std::string r = report();
  CHECK_THAT(r, Catch::Contains("deadlock"));
  CHECK_THAT(r, Catch::Contains("threads 0-31 wait at the barrier on PTX line 14: bar.sync 0;"));
  CHECK_THAT(r, Catch::Contains("threads 32-63 exited"));
  // Divergence inside a warp around a shuffle: lanes 16..31 never arrive.
  Ptx w(kernel("  setp.ge.u32 %p1, %r1, 16;\n"
               "  @%p1 bra SPIN;\n"
               "  shfl.sync.bfly.b32 %r2, %r1, 1, 31, -1;\n"
               "  bra.uni DONE;\n"
               "SPIN:\n"
               "  bar.sync 0;\n"
               "DONE:\n"));
  CHECK(w.run("k", 1, 32, {0, 0}) == 702);
  CHECK_THAT(report(), Catch::Contains("threads 0-15 wait for their warp at PTX line 14"));
}

TEST_CASE("a barrier id in a register: read per warp, uniform, in range", "[emucuda]") {
  Quiet q;
  // Warp 0 waits on barrier %r2 = 3 (LLVM merges `bar.sync 3` and
  // `bar.sync 4` on two paths into one such instruction), warp 1 arrives
  // on 3: both pass. Warp 1 writes first, warp 0 reads after the barrier
  // (no race).
  const std::string decl = "  .shared .align 16 .b8 s[64];\n";
  Ptx m(kernel("  mov.u32 %r2, 3;\n"
               "  mov.u64 %rd3, s;\n"
               "  setp.lt.u32 %p1, %r1, 32;\n"
               "  @!%p1 bra ARRIVE;\n"
               "  bar.sync %r2, 64;\n"
               "  ld.shared.b32 %r3, [%rd3];\n"
               "  bra.uni DONE;\n"
               "ARRIVE:\n"
               "  st.shared.b32 [%rd3], %r1;\n"
               "  bar.arrive 3, 64;\n"
               "DONE:\n", decl));
  REQUIRE(m.status == 0);
  CHECK(m.run("k", 1, 64, {0, 0}) == 0);
  // Lanes that disagree on the id, and an id past 15, are faults.
  Ptx split(kernel("  and.b32 %r2, %r1, 1;\n"
                   "  bar.sync %r2, 32;\n"));
  REQUIRE(split.status == 0);
  CHECK(split.run("k", 1, 32, {0, 0}) == 715);
  CHECK_THAT(report(), Catch::Contains("the barrier id differs across the warp"));
  Ptx far(kernel("  mov.u32 %r2, 16;\n"
                 "  bar.sync %r2, 32;\n"));
  REQUIRE(far.status == 0);
  CHECK(far.run("k", 1, 32, {0, 0}) == 715);
  CHECK_THAT(report(), Catch::Contains("barrier number 16 out of range"));
}

TEST_CASE("racecheck: shared accesses of two warps with no barrier between", "[emucuda]") {
  Quiet q;
  const std::string decl = "  .shared .align 16 .b8 s[512];\n";
  // Warp 0 writes s[tid], warp 1 reads s[tid - 32]: needs a barrier.
  std::string body = "  mov.u64 %rd3, s;\n"
                     "  mul.wide.u32 %rd4, %r1, 4;\n"
                     "  setp.lt.u32 %p1, %r1, 32;\n"
                     "  @!%p1 bra READ;\n"
                     "  add.s64 %rd5, %rd3, %rd4;\n"
                     "  st.shared.b32 [%rd5], %r1;\n"
                     "  bra.uni SYNC;\n"
                     "READ:\n"
                     "SYNC:\n";
  std::string read = "  setp.lt.u32 %p1, %r1, 32;\n"
                     "  @%p1 bra DONE;\n"
                     "  add.s64 %rd6, %rd3, %rd4;\n"
                     "  ld.shared.b32 %r2, [%rd6+-128];\n"
                     "DONE:\n";
  Ptx racy(kernel(body + read, decl));
  REQUIRE(racy.status == 0);
  CHECK(racy.run("k", 1, 64, {0, 0}) == 719);
  CHECK_THAT(report(), Catch::Contains("shared memory race: read"));
  Ptx fine(kernel(body + "  bar.sync 0;\n" + read, decl));
  CHECK(fine.run("k", 1, 64, {0, 0}) == 0);
  // The other order: warp 1 reads first, then warp 0 overwrites.
  Ptx war(kernel("  mov.u64 %rd3, s;\n"
                 "  st.shared.b32 [%rd3], %r1;\n" // everyone writes: a race already
                 , decl));
  CHECK(war.run("k", 1, 64, {0, 0}) == 719);
  CHECK_THAT(report(), Catch::Contains("shared memory race: write"));
}

TEST_CASE("an endless loop stops at the step limit", "[emucuda]") {
  Quiet q;
  setenv("ATTNC_EMU_MAX_STEPS", "100000", 1);
  Ptx m(kernel("LOOP:\n  bra.uni LOOP;\n"));
  CHECK(m.run("k", 1, 32, {0, 0}) == 702);
  unsetenv("ATTNC_EMU_MAX_STEPS");
  CHECK_THAT(report(), Catch::Contains("more than 100000 warp instructions"));
}

TEST_CASE("a shuffle that reads a lane outside the shuffle is reported", "[emucuda]") {
  Quiet q;
  // Only lanes 0..15 shuffle (member mask 0xffff), and bfly 16 reads 16..31.
  Ptx m(kernel("  setp.lt.u32 %p1, %r1, 16;\n"
               "  @!%p1 bra DONE;\n"
               "  shfl.sync.bfly.b32 %r2, %r1, 16, 31, 0xffff;\n"
               "DONE:\n"));
  REQUIRE(m.status == 0);
  CHECK(m.run("k", 1, 32, {0, 0}) == 719);
  CHECK_THAT(report(), Catch::Contains("shfl.sync reads lane 16"));
}

TEST_CASE("load errors name the PTX line", "[emucuda]") {
  Ptx bad(kernel("  frobnicate.b32 %r2, %r1;\n"));
  CHECK(bad.status == 218);
  CHECK_THAT(bad.log, Catch::Contains("line 12: instruction 'frobnicate.b32' is not supported"));
  Ptx unknownReg(kernel("  add.s32 %r2, %q1, 1;\n"));
  CHECK(unknownReg.status == 218);
  CHECK_THAT(unknownReg.log, Catch::Contains("unknown register '%q1'"));
  Ptx generic(kernel("  ld.b32 %r2, [%rd1];\n"));
  CHECK_THAT(generic.log, Catch::Contains("generic addressing"));
  Ptx rz(kernel("  add.rz.f32 %r2, %r1, %r1;\n"));
  CHECK_THAT(rz.log, Catch::Contains("rounding mode .rz is not supported"));
  setenv("ATTNC_EMU_CC", "75", 1);
  Ptx newer(kernel("") );
  unsetenv("ATTNC_EMU_CC");
  CHECK(newer.status == 209);
  CHECK_THAT(newer.log, Catch::Contains("targets sm_80 but the device is sm_75"));
}

TEST_CASE("launch checks: threads per block and dynamic shared memory", "[emucuda]") {
  Quiet q;
  Ptx m(std::string(kHeader) +
        ".visible .entry k()\n.maxntid 64, 1, 1\n{\n  ret;\n}\n");
  REQUIRE(m.status == 0);
  CHECK(m.run("k", 1, 64, {}) == 0);
  CHECK(m.run("k", 1, 65, {}) == 1);
  CHECK_THAT(report(), Catch::Contains("the kernel allows 64"));
  CHECK(m.run("k", 1, 32, {}, 64 * 1024) == 1);
  void *f = nullptr;
  REQUIRE(cuModuleGetFunction(&f, m.mod, "k") == 0);
  CHECK(cuFuncSetAttribute(f, 8, 64 * 1024) == 0);
  CHECK(m.run("k", 1, 32, {}, 64 * 1024) == 0);
  CHECK(cuFuncSetAttribute(f, 8, 1 << 20) == 1); // beyond the device's opt-in limit
}

TEST_CASE("setmaxnreg trades from the launch's .maxnreg", "[emucuda]") {
  Quiet q;
  setenv("ATTNC_EMU_CC", "90", 1);
  // 12 warps: warpgroups 0 and 1 raise their budget, warpgroup 2 (threads
  // 256-383) lowers its own first (to `producer`) or not at all (0);
  // everyone then meets at the CTA's barrier.
  auto ws = [](const std::string &directives, int producer) {
    return std::string(".version 8.0\n.target sm_90a\n.address_size 64\n") +
           ".visible .entry k()\n" + directives +
           "{\n  .reg .b32 %r<4>;\n  .reg .pred %p<2>;\n"
           "  mov.u32 %r1, %tid.x;\n"
           "  setp.ge.u32 %p1, %r1, 256;\n"
           "  @%p1 bra PRODUCER;\n"
           "  setmaxnreg.inc.sync.aligned.u32 232;\n"
           "  bra.uni DONE;\n"
           "PRODUCER:\n" +
           (producer ? "  setmaxnreg.dec.sync.aligned.u32 " + std::to_string(producer) + ";\n"
                     : std::string()) +
           "DONE:\n"
           "  bar.sync 0;\n"
           "  ret;\n}\n";
  };
  // The pool is the CTA's own, 168 x 384 = 64512 registers (PTX ISA: "a
  // pool of available registers is maintained per-CTA"), not the SM's
  // 65536: 40 x 128 + 232 x 256 = 64512 fits once the producer gave back.
  Ptx fits(ws(".maxnreg 168\n", 40));
  REQUIRE(fits.status == 0);
  CHECK(fits.run("k", 1, 384, {}) == 0);
  // 48 x 128 + 232 x 256 = 65536 does not: the register file would hold
  // it, the pool does not, and on an H200 (2026-11-27) two warps of each
  // consumer warpgroup waited in setmaxnreg.inc for good. The emulator
  // counted the register file then and passed this.
  Ptx over(ws(".maxnreg 168\n", 48));
  REQUIRE(over.status == 0);
  CHECK(over.run("k", 1, 384, {}) == 702);
  CHECK_THAT(report(), Catch::Contains("deadlock") && Catch::Contains("setmaxnreg.inc"));
  // The producer keeps the launch's 168: the consumers' .inc never finds
  // room, a deadlock (a warpgroup that had set nothing used to count no
  // registers, and this passed).
  Ptx greedy(ws(".maxnreg 168\n", 0));
  REQUIRE(greedy.status == 0);
  CHECK(greedy.run("k", 1, 384, {}) == 702);
  CHECK_THAT(report(), Catch::Contains("deadlock") && Catch::Contains("setmaxnreg.inc"));
  // setmaxnreg needs the launch's count (PTX ISA), and a block needs room
  // for it: 384 threads x 256 registers is more than the register file.
  Ptx none(ws("", 40));
  CHECK(none.status == 218);
  CHECK_THAT(none.log, Catch::Contains("uses setmaxnreg without .maxnreg"));
  Ptx big(ws(".maxnreg 256\n", 40));
  REQUIRE(big.status == 0);
  CHECK(big.run("k", 1, 384, {}) == 701);
  CHECK_THAT(report(), Catch::Contains("98304 registers, the register file holds 65536"));
  unsetenv("ATTNC_EMU_CC");
}

TEST_CASE("f16 and bf16 conversions round to nearest even", "[emucuda]") {
  CHECK(floatToF16(1.0f) == 0x3c00);
  CHECK(floatToF16(65504.0f) == 0x7bff);
  CHECK(floatToF16(65520.0f) == 0x7c00);                 // rounds to infinity
  CHECK(floatToF16(1.0f + 1.0f / 2048) == 0x3c00);       // tie to even (down)
  CHECK(floatToF16(1.0f + 3.0f / 2048) == 0x3c02);       // tie to even (up)
  CHECK(floatToF16(std::ldexp(1.0f, -24)) == 0x0001);    // smallest subnormal
  CHECK(floatToF16(std::ldexp(1.0f, -25)) == 0x0000);    // tie to even: 0
  CHECK(f16ToFloat(0x0001) == std::ldexp(1.0f, -24));
  CHECK(f16ToFloat(0xfc00) == -INFINITY);
  CHECK(std::isnan(f16ToFloat(floatToF16(NAN))));
  CHECK(floatToBf16(1.0f) == 0x3f80);
  CHECK(floatToBf16(bitsFloat(0x3f808000u)) == 0x3f80);  // tie to even (down)
  CHECK(floatToBf16(bitsFloat(0x3f818000u)) == 0x3f82);  // tie to even (up)
  CHECK(bf16ToFloat(0x4049) == bitsFloat(0x40490000u));
  for (uint32_t h = 0; h < 0x7c00; h += 7)               // round trips
    CHECK(floatToF16(f16ToFloat(uint16_t(h))) == h);
}

TEST_CASE("streams: work runs when waited for, in CUDA's order", "[emucuda]") {
  // k copies p0[0] to p1[0].
  Ptx m(kernel("  ld.global.b32 %r2, [%rd1];\n  st.global.b32 [%rd2], %r2;\n"));
  REQUIRE(m.status == 0);
  void *f = nullptr;
  REQUIRE(cuModuleGetFunction(&f, m.mod, "k") == 0);
  Buf src(std::vector<uint32_t>{1}), dst(std::vector<uint32_t>{0});
  unsigned long long a = src.p, b = dst.p;
  void *args[] = {&a, &b};
  uint32_t two = 2;
  // The null stream: a synchronous copy waits for the queued kernel first.
  REQUIRE(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr) == 0);
  REQUIRE(cuMemcpyHtoD_v2(src.p, &two, 4) == 0);
  CHECK(dst.get<uint32_t>()[0] == 1);
  // A non-blocking stream is not waited for by the synchronous copy: the
  // kernel sees the new value, as on a device it may.
  uint32_t one = 1;
  REQUIRE(cuMemcpyHtoD_v2(src.p, &one, 4) == 0);
  void *stream = nullptr;
  REQUIRE(cuStreamCreate(&stream, 1) == 0);
  REQUIRE(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, stream, args, nullptr) == 0);
  REQUIRE(cuMemcpyHtoD_v2(src.p, &two, 4) == 0);
  REQUIRE(cuStreamSynchronize(stream) == 0);
  CHECK(dst.get<uint32_t>()[0] == 2);
  REQUIRE(cuStreamDestroy_v2(stream) == 0);
}

TEST_CASE("streams: a queued kernel's fault is returned by the wait", "[emucuda]") {
  Quiet q;
  Ptx m(kernel("  st.global.b32 [%rd2], %r1;\n"));
  void *f = nullptr;
  REQUIRE(cuModuleGetFunction(&f, m.mod, "k") == 0);
  unsigned long long a = 0, b = 0;
  void *args[] = {&a, &b};
  CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr) == 0);
  CHECK(cuCtxSynchronize() == 700);
  CHECK(cuCtxSynchronize() == 0); // reported once
}

TEST_CASE("half-precision compares and min/max (LLVM narrows them)", "[emucuda]") {
  // out[0] = (1.5 < 2.0 as f16), out[1] = bits of max.f16(1.5, -3.0),
  // out[2] = (NaN unordered-or-greater than 0, as bf16), out[3] = abs(-2) bits.
  Ptx m(kernel("  .reg .b16 %h<8>;\n"
               "  mov.b16 %h1, 0x3E00;\n  mov.b16 %h2, 0x4000;\n  mov.b16 %h3, 0xC200;\n"
               "  setp.lt.f16 %p1, %h1, %h2;\n  selp.u32 %r2, 1, 0, %p1;\n"
               "  st.global.b32 [%rd1], %r2;\n"
               "  max.f16 %h4, %h1, %h3;\n  cvt.u32.u16 %r3, %h4;\n"
               "  st.global.b32 [%rd1+4], %r3;\n"
               "  mov.b16 %h5, 0x7FC0;\n  mov.b16 %h6, 0x0000;\n"
               "  setp.gtu.bf16 %p2, %h5, %h6;\n  selp.u32 %r4, 1, 0, %p2;\n"
               "  st.global.b32 [%rd1+8], %r4;\n"
               "  abs.f16 %h7, %h3;\n  cvt.u32.u16 %r5, %h7;\n  st.global.b32 [%rd1+12], %r5;\n"));
  INFO(m.log);
  REQUIRE(m.status == 0);
  Buf out(16);
  REQUIRE(m.run("k", 1, 1, {out.p, 0}) == 0);
  CHECK(out.get<uint32_t>() == std::vector<uint32_t>{1, 0x3E00, 1, 0x4200});
}

TEST_CASE("32-bit shared addresses wrap at 2^32 before the offset lands",
          "[emucuda]") {
  // [%r + imm] with a 32-bit register is 32-bit arithmetic: LLVM's short
  // shared pointers fold "base - x" into a negative register and add the
  // difference back as the immediate.
  Buf out(4);
  Ptx m(kernel("  mov.u32 %r2, buf;\n"
               "  st.shared.u32 [%r2+8], 77;\n"
               "  sub.s32 %r3, %r2, 4096;\n"
               "  ld.shared.u32 %r4, [%r3+4104];\n"
               "  st.global.u32 [%rd1], %r4;\n",
               "  .shared .align 4 .b8 buf[16];\n"));
  REQUIRE(m.status == 0);
  REQUIRE(m.run("k", 1, 1, {out.p, 0}) == 0);
  CHECK(out.get<uint32_t>() == std::vector<uint32_t>{77});
}

// ---- programmatic dependent launches (griddepcontrol) ---------------------

namespace {
/// cuda.h's CUlaunchAttribute and CUlaunchConfig.
struct LaunchAttribute {
  int id;
  char pad[4];
  union {
    char bytes[64];
    int allowed;
  } value;
};
struct LaunchConfig {
  unsigned grid[3], block[3], shared;
  void *stream;
  LaunchAttribute *attrs;
  unsigned numAttrs;
};

/// `write` stores each thread's index at p0[tid] after triggering its
/// dependents; `read` copies p0[tid] to p1[tid] after its own p1[tid]
/// (which `write` never touches) and, where `wait`, griddepcontrol.wait.
std::string gridDependencyKernels(bool wait) {
  std::string entry =
      ".visible .entry %s(.param .u64 p0, .param .u64 p1)\n{\n"
      "  .reg .b32 %r<8>;\n  .reg .b64 %rd<8>;\n"
      "  ld.param.u64 %rd1, [p0];\n  ld.param.u64 %rd2, [p1];\n"
      "  mov.u32 %r1, %tid.x;\n  mul.wide.u32 %rd3, %r1, 4;\n"
      "  add.s64 %rd4, %rd1, %rd3;\n  add.s64 %rd5, %rd2, %rd3;\n";
  auto named = [&](const char *n) {
    std::string e = entry;
    e.replace(e.find("%s"), 2, n);
    return e;
  };
  return ".version 8.0\n.target sm_90\n.address_size 64\n" + named("write") +
         "  griddepcontrol.launch_dependents;\n"
         "  st.global.b32 [%rd4], %r1;\n  ret;\n}\n" +
         named("read") + "  ld.global.b32 %r2, [%rd5];\n" +
         (wait ? "  griddepcontrol.wait;\n" : "") +
         "  ld.global.b32 %r3, [%rd4];\n  add.s32 %r3, %r3, %r2;\n"
         "  st.global.b32 [%rd5], %r3;\n  ret;\n}\n";
}

/// `write` into a, then `read` of a into b, the latter as a programmatic
/// dependent (cuLaunchKernelEx with the attribute) or not.
int writeThenRead(const Ptx &m, const Buf &a, const Buf &b, bool programmatic,
                  int attribute = 6) {
  void *w = nullptr, *r = nullptr;
  REQUIRE(cuModuleGetFunction(&w, m.mod, "write") == 0);
  REQUIRE(cuModuleGetFunction(&r, m.mod, "read") == 0);
  unsigned long long pa = a.p, pb = b.p;
  void *args[] = {&pa, &pb};
  attnc_emu_clear_report();
  REQUIRE(cuLaunchKernel(w, 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr) == 0);
  LaunchAttribute attr{};
  attr.id = attribute;
  attr.value.allowed = 1;
  LaunchConfig c{{1, 1, 1}, {32, 1, 1}, 0,
                 nullptr,   &attr,      programmatic ? 1u : 0u};
  if (int e = cuLaunchKernelEx(&c, r, args, nullptr))
    return e;
  return cuCtxSynchronize();
}
} // namespace

TEST_CASE("griddepcontrol: a programmatic dependent reads what the grid ahead "
          "wrote only after griddepcontrol.wait",
          "[emucuda]") {
  Quiet q;
  std::vector<uint32_t> ones(32, 1);
  SECTION("with the wait: the dependent sees every write") {
    Ptx m(gridDependencyKernels(true));
    REQUIRE(m.status == 0);
    Buf a(32 * 4), b(ones);
    REQUIRE(writeThenRead(m, a, b, true) == 0);
    std::vector<uint32_t> got = b.get<uint32_t>();
    for (uint32_t i = 0; i < 32; ++i)
      CHECK(got[i] == i + 1);
  }
  SECTION("without it: the read of the grid's output is reported") {
    Ptx m(gridDependencyKernels(false));
    REQUIRE(m.status == 0);
    Buf a(32 * 4), b(ones);
    CHECK(writeThenRead(m, a, b, true) == 700);
    std::string r = report();
    CHECK_THAT(r, Catch::Contains("global read of 4 bytes"));
    CHECK_THAT(r, Catch::Contains("before griddepcontrol.wait: write, the "
                                  "kernel this launch depends on"));
    CHECK_THAT(r, Catch::Contains("ld.global.b32 %r3, [%rd4];"));
    // Run as each launch is issued (ATTNC_EMU_SYNC): the same report.
    setenv("ATTNC_EMU_SYNC", "1", 1);
    int e = writeThenRead(m, a, b, true);
    unsetenv("ATTNC_EMU_SYNC");
    CHECK(e == 700);
    CHECK_THAT(report(), Catch::Contains("before griddepcontrol.wait"));
  }
  SECTION("without the attribute, stream order is enough") {
    Ptx m(gridDependencyKernels(false));
    Buf a(32 * 4), b(ones);
    REQUIRE(writeThenRead(m, a, b, false) == 0);
    CHECK(b.get<uint32_t>()[31] == 32);
  }
  SECTION("a stream created where a destroyed one was starts afresh") {
    // Under ATTNC_EMU_SYNC every launch's writes are kept for the launch
    // behind it; a new stream's first launch depends on nothing.
    Ptx m(gridDependencyKernels(false));
    Buf a(32 * 4), b(ones);
    void *w = nullptr, *r = nullptr;
    REQUIRE(cuModuleGetFunction(&w, m.mod, "write") == 0);
    REQUIRE(cuModuleGetFunction(&r, m.mod, "read") == 0);
    unsigned long long pa = a.p, pb = b.p;
    void *args[] = {&pa, &pb};
    setenv("ATTNC_EMU_SYNC", "1", 1);
    void *s1 = nullptr, *s2 = nullptr;
    REQUIRE(cuStreamCreate(&s1, 1) == 0);
    REQUIRE(cuLaunchKernel(w, 1, 1, 1, 32, 1, 1, 0, s1, args, nullptr) == 0);
    REQUIRE(cuStreamDestroy_v2(s1) == 0);
    REQUIRE(cuStreamCreate(&s2, 1) == 0);
    LaunchAttribute attr{};
    attr.id = 6;
    attr.value.allowed = 1;
    LaunchConfig c{{1, 1, 1}, {32, 1, 1}, 0, s2, &attr, 1};
    int e = cuLaunchKernelEx(&c, r, args, nullptr);
    int sync = cuStreamSynchronize(s2);
    unsetenv("ATTNC_EMU_SYNC");
    CHECK(e == 0);
    CHECK(sync == 0);
    REQUIRE(cuStreamDestroy_v2(s2) == 0);
  }
  SECTION("other launch attributes are refused by name") {
    Ptx m(gridDependencyKernels(true));
    Buf a(32 * 4), b(ones);
    CHECK(writeThenRead(m, a, b, true, 4) == 801);
    CHECK_THAT(report(),
               Catch::Contains("launch attribute 4 is not supported"));
  }
  SECTION("griddepcontrol needs sm_90") {
    std::string text = gridDependencyKernels(true);
    text.replace(text.find("sm_90"), 5, "sm_80");
    Ptx m(text);
    CHECK(m.status != 0);
    CHECK_THAT(m.log, Catch::Contains("griddepcontrol needs .target sm_90"));
  }
}
