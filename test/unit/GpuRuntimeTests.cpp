// Packages and the CUDA launcher without a GPU: packages round-trip and
// refuse what does not match, and GpuKernel validates, loads and launches
// against the emulator (emulator/), whose device memory is host memory
// and whose launch log keeps the parameters each launch received. The
// kernels here are stubs (`ret`): what they compute is tested where the
// compiler builds real ones (GpuCompileTests.cpp, ctest gpu-parity).
#include "attnc/runtime/KernelABI.h"
#include "attnc/runtime/Package.h"
#include "attnc/runtime/cuda/GpuKernel.h"

#include <catch2/catch.hpp>
#include <dlfcn.h>

#include <cstdlib>
#include <string>

using namespace attnc::rt;
using namespace attnc::rt::cuda;

namespace {

const char *kDocMask = R"(variant docs
param doc tensor i32 B KV
mask-kind data
mask-uses b
score
  yield %score
mask
  %0 = gather doc %b %q
  %1 = gather doc %b %kv
  %2 = arith.cmpi eq %0 %1
  yield %2
end
)";

const char *kCausal = R"(variant causal
mask-kind closed
mask-uses
score
  yield %score
mask
  %0 = arith.cmpi sge %q %kv
  yield %0
end
)";

/// PTX with entries of n eight-byte parameters each that do nothing.
std::string stubPtx(const std::vector<std::pair<std::string, int>> &entries,
                    const std::string &target = "sm_80") {
  std::string s = ".version 8.0\n.target " + target + "\n.address_size 64\n";
  for (auto &[name, n] : entries) {
    s += ".visible .entry " + name + "(\n";
    for (int i = 0; i < n; ++i)
      s += "\t.param .u64 " + std::string(i < 2 ? ".ptr .align 1 " : "") +
           name + "_param_" + std::to_string(i) + (i + 1 < n ? ",\n" : "\n");
    s += ")\n{\n\tret;\n}\n";
  }
  return s;
}

PackageVariant makeVariant(const char *text, const std::string &target = "sm_80",
                           int captures = 0, KernelSpec options = {}) {
  PackageVariant v;
  REQUIRE(VariantInfo::parse(text, v.info).isOk());
  GpuKernelImage k;
  k.target = target;
  k.spec.dtype = DType::F16;
  k.spec.dropout = options.dropout;
  k.spec.keyOffsets = options.keyOffsets;
  k.threads = 64;
  k.sharedBytes = 32768;
  k.kernel = "attnc_" + v.info.name + "_f16_d64v64_" +
             kernelOptionTags(k.spec) + "m64n64w2s1";
  k.kernelParams.assign(5 * (8 + captures) + 1, 8);
  k.merge = k.kernel + "_merge";
  k.mergeParams.assign(5 * 5 + 1, 8);
  std::vector<std::pair<std::string, int>> entries = {
      {k.kernel, int(k.kernelParams.size())},
      {k.merge, int(k.mergeParams.size())}};
  if (v.info.maskKind == MaskKind::Data) {
    k.maskBuilder = k.kernel + "_block_mask";
    k.maskBuilderParams.assign(5 * (3 + captures) + 1, 8);
    entries.push_back({k.maskBuilder, int(k.maskBuilderParams.size())});
  }
  k.ptx = stubPtx(entries, target);
  v.kernels.push_back(k);
  return v;
}

/// The emulator's launch log.
struct Launches {
  void *h = dlopen(ATTNC_EMUCUDA_PATH, RTLD_NOW | RTLD_LOCAL);
  int (*count)() = reinterpret_cast<int (*)()>(dlsym(h, "attnc_emu_launch_count"));
  void (*clear)() = reinterpret_cast<void (*)()>(dlsym(h, "attnc_emu_clear_launches"));
  int (*get)(int, const char **, unsigned *, unsigned *, unsigned long long *,
             int) = reinterpret_cast<int (*)(int, const char **, unsigned *,
                                             unsigned *, unsigned long long *,
                                             int)>(dlsym(h, "attnc_emu_launch"));
  int (*live)() = reinterpret_cast<int (*)()>(dlsym(h, "attnc_emu_live_allocations"));
  ~Launches() { dlclose(h); }
  struct L {
    std::string name;
    unsigned grid = 0, block = 0;
    std::vector<unsigned long long> params;
  };
  L at(int i) {
    L l;
    const char *n = nullptr;
    l.params.resize(512);
    int np = get(i, &n, &l.grid, &l.block, l.params.data(), 512);
    l.params.resize(np);
    l.name = n;
    return l;
  }
  /// Memref operand m's aligned pointer and size (5 words per operand).
  static const int64_t *ip(const L &l) {
    return reinterpret_cast<const int64_t *>(l.params[5 * 5 + 1]);
  }
};

std::unique_ptr<Context> emuContext() {
  std::unique_ptr<Context> c;
  REQUIRE(Context::open(c, 0, ATTNC_EMUCUDA_PATH).isOk());
  return c;
}

/// Device-side views (emulated device memory) for B, Hq, Hkv, Lq, Lkv, D=64.
struct DeviceArgs {
  std::vector<DeviceBuffer> bufs;
  AttentionArgs a;
  DeviceArgs(const Context &ctx, int64_t B, int64_t Hq, int64_t Hkv,
             int64_t Lq, int64_t Lkv) {
    auto make = [&](std::vector<int64_t> shape, DType dt) {
      int64_t n = 1;
      for (int64_t d : shape)
        n *= d;
      DeviceBuffer b;
      REQUIRE(DeviceBuffer::allocate(ctx, n * dtypeSize(dt), b).isOk());
      TensorView t = TensorView::contiguous(b.data(), dt, shape);
      bufs.push_back(std::move(b));
      return t;
    };
    a.q = make({B, Hq, Lq, 64}, DType::F16);
    a.k = make({B, Hkv, Lkv, 64}, DType::F16);
    a.v = make({B, Hkv, Lkv, 64}, DType::F16);
    a.out = make({B, Hq, Lq, 64}, DType::F16);
  }
};

} // namespace

TEST_CASE("a package round-trips through its JSON form", "[package]") {
  Package p;
  p.compiler = "attnc test";
  p.source = "docs.attn";
  p.variants.push_back(makeVariant(kDocMask, "sm_80", 1));
  p.variants.push_back(makeVariant(kCausal, "sm_90"));
  // The generator's tile work (for the static SASS model) is kept.
  p.variants[1].kernels[0].tileWork = {64, 4, 2};
  p.variants[1].kernels[0].persistent = true;
  Package q;
  REQUIRE(Package::parse(p.serialize(), "mem", q).isOk());
  REQUIRE(q.variants.size() == 2);
  CHECK(q.compiler == "attnc test");
  CHECK(q.source == "docs.attn");
  const PackageVariant *d = q.find("docs");
  REQUIRE(d);
  CHECK(d->info.maskKind == MaskKind::Data);
  CHECK(d->info.params.size() == 1);
  const GpuKernelImage &k = d->kernels.at(0);
  const GpuKernelImage &o = p.variants[0].kernels[0];
  CHECK(k.target == "sm_80");
  CHECK(k.spec.dtype == DType::F16);
  CHECK(k.kernel == o.kernel);
  CHECK(k.maskBuilder == o.maskBuilder);
  CHECK(k.kernelParams == o.kernelParams);
  CHECK(k.maskBuilderParams == o.maskBuilderParams);
  CHECK(k.ptx == o.ptx);
  CHECK(k.threads == 64);
  CHECK(k.sharedBytes == 32768);
  CHECK(q.find("causal")->kernels.at(0).maskBuilder.empty());
  const TileWork &w = q.find("causal")->kernels.at(0).tileWork;
  CHECK((w.mma == 64 && w.asyncCopies == 4 && w.atomics == 2));
  CHECK(d->kernels.at(0).tileWork.mma == 0); // not stated: none written
  CHECK(q.find("causal")->kernels.at(0).persistent);
  CHECK_FALSE(d->kernels.at(0).persistent); // absent: one block per item
  CHECK(q.find("nope") == nullptr);

  // Written atomically and read back.
  std::string path = "attnc-test-package.json";
  REQUIRE(p.write(path).isOk());
  Package r;
  REQUIRE(Package::read(path, r).isOk());
  CHECK(r.variants.size() == 2);
  std::remove(path.c_str());
  CHECK(Package::read("/nonexistent/x.json", r).message() ==
        "cannot read package '/nonexistent/x.json'");
}

TEST_CASE("a package that does not hold together is refused", "[package]") {
  Package p, q;
  p.variants.push_back(makeVariant(kCausal));
  auto error = [&](std::string text) {
    return Package::parse(text, "p.json", q).message();
  };
  CHECK(error("{") == "'p.json' is not a valid attnc package: it is not JSON");
  CHECK(error("{\"format\": \"zip\"}") ==
        "'p.json' is not a valid attnc package: no \"format\": "
        "\"attnc-package\"");
  std::string text = p.serialize();
  std::string v2 = text;
  v2.replace(v2.find("\"version\": 8"), 12, "\"version\": 1");
  CHECK(error(v2) == "'p.json' is not a valid attnc package: version 8 "
                     "expected, found 1");
  // The manifest's parameter count must be the PTX's.
  Package wrong = p;
  wrong.variants[0].kernels[0].kernelParams.pop_back();
  CHECK(error(wrong.serialize()) ==
        "'p.json' is not a valid attnc package: the manifest gives "
        "'attnc_causal_f16_d64v64_m64n64w2s1' 40 parameters, its PTX "
        "declares 41");
  Package noEntry = p;
  noEntry.variants[0].kernels[0].kernel = "other";
  CHECK(error(noEntry.serialize()) ==
        "'p.json' is not a valid attnc package: kernel 'other' does not match "
        "its manifest (expected a name 'attnc_causal_f16_d64v64_m64n64w2s<stages>')");
  // The entry the name promises must be in the PTX.
  Package renamed = p;
  GpuKernelImage &rk = renamed.variants[0].kernels[0];
  rk.ptx.replace(rk.ptx.find(rk.kernel + "("), rk.kernel.size(), "elsewhere_entry_x");
  CHECK(error(renamed.serialize()) ==
        "'p.json' is not a valid attnc package: the PTX has no entry "
        "'attnc_causal_f16_d64v64_m64n64w2s1'");
  // Every kernel has its split-KV merge, named after it, in the PTX.
  Package merge = p;
  merge.variants[0].kernels[0].merge = "attnc_causal_merge";
  CHECK(error(merge.serialize()) ==
        "'p.json' is not a valid attnc package: kernel "
        "'attnc_causal_f16_d64v64_m64n64w2s1' names the merge entry "
        "'attnc_causal_merge'");
  merge = p;
  merge.variants[0].kernels[0].mergeParams.pop_back();
  CHECK(error(merge.serialize()) ==
        "'p.json' is not a valid attnc package: the manifest gives "
        "'attnc_causal_f16_d64v64_m64n64w2s1_merge' 25 parameters, its PTX "
        "declares 26");
  // A merge launched as the kernel's dependent must wait for it
  // (griddepcontrol.wait in its own body, sm_90 and later).
  Package pdl;
  pdl.variants.push_back(makeVariant(kCausal, "sm_90"));
  GpuKernelImage &pk = pdl.variants[0].kernels[0];
  pk.mergeGridDependency = true;
  CHECK(error(pdl.serialize()) ==
        "'p.json' is not a valid attnc package: kernel "
        "'attnc_causal_f16_d64v64_m64n64w2s1' says its merge waits for the "
        "kernel's grid, but 'attnc_causal_f16_d64v64_m64n64w2s1_merge' has no "
        "griddepcontrol.wait");
  // (in the kernel's body, not the merge's, it does not count)
  size_t kernelBody = pk.ptx.find("{\n\tret;");
  pk.ptx.insert(kernelBody + 2, "\tgriddepcontrol.wait;\n");
  CHECK(error(pdl.serialize()).find("has no griddepcontrol.wait") !=
        std::string::npos);
  size_t mergeBody = pk.ptx.find("{\n\tret;", pk.ptx.find(pk.merge + "("));
  pk.ptx.insert(mergeBody + 2, "\tgriddepcontrol.wait;\n");
  REQUIRE(Package::parse(pdl.serialize(), "p.json", q).isOk());
  CHECK(q.variants[0].kernels[0].mergeGridDependency);
  Package pdl80 = p;
  pdl80.variants[0].kernels[0].mergeGridDependency = true;
  CHECK(error(pdl80.serialize()) ==
        "'p.json' is not a valid attnc package: kernel "
        "'attnc_causal_f16_d64v64_m64n64w2s1' says its merge waits for the "
        "kernel's grid, but its target sm_80 has no griddepcontrol (sm_90+)");
  // A data-dependent mask needs its builder.
  Package docs;
  docs.variants.push_back(makeVariant(kDocMask, "sm_80", 1));
  docs.variants[0].kernels[0].maskBuilder.clear();
  CHECK(error(docs.serialize()).find("lacks the block-mask builder") !=
        std::string::npos);
  std::string missing = text;
  missing.replace(missing.find("\"threads\""), 9, "\"thread\"");
  CHECK(error(missing) == "'p.json' is not a valid attnc package: "
                          "\"threads\" must be an integer in [32, 1024]");
}

TEST_CASE("hostile packages are refused, never trusted", "[package]") {
  Package p, q;
  p.variants.push_back(makeVariant(kCausal));
  const std::string text = p.serialize();
  auto edit = [&](const std::string &from, const std::string &to) {
    std::string t = text;
    size_t at = t.find(from);
    REQUIRE(at != std::string::npos);
    return t.replace(at, from.size(), to);
  };
  auto error = [&](const std::string &t) {
    Status s = Package::parse(t, "p.json", q);
    CHECK(!s.isOk());
    return s.message();
  };
  // Fields of the wrong JSON type: an error, never an exception.
  CHECK_THAT(error("{\"format\": 7}"), Catch::Contains("no \"format\""));
  CHECK_THAT(error("[1, 2]"), Catch::Contains("no \"format\""));
  CHECK_THAT(error(edit("\"compiler\": \"\"", "\"compiler\": 12")),
             Catch::Contains("\"compiler\" must be a string"));
  CHECK_THAT(error(edit("\"head_dim\": 64", "\"head_dim\": \"64\"")),
             Catch::Contains("\"head_dim\" must be an integer in [8, 256]"));
  CHECK_THAT(error(edit("\"variants\": [", "\"variants\": 3, \"x\": [")),
             Catch::Contains("\"variants\" must be an array"));
  CHECK_THAT(error(edit("\"kernel_params\": [", "\"kernel_params\": [\"8\", ")),
             Catch::Contains("not a parameter size"));
  // Out of range, never truncated.
  CHECK_THAT(error(edit("\"version\": 8", "\"version\": 4294967297")),
             Catch::Contains("version 8 expected, found 4294967297"));
  // Shared memory no device has.
  CHECK_THAT(error(edit("\"dynamic_shared_bytes\": 0",
                        "\"dynamic_shared_bytes\": 232000")),
             Catch::Contains("no device has more than 232448"));
  CHECK_THAT(error(edit("\"head_dim\": 64", "\"head_dim\": 9223372036854775807")),
             Catch::Contains("\"head_dim\" must be an integer in [8, 256]"));
  CHECK_THAT(error(edit("\"threads\": 64", "\"threads\": 18446744073709551615")),
             Catch::Contains("\"threads\" must be an integer"));
  CHECK_THAT(error(edit("\"shared_bytes\": 32768", "\"shared_bytes\": 1000000000")),
             Catch::Contains("\"shared_bytes\" must be an integer in [0, 232448]"));
  CHECK_THAT(error(edit("\"target\": \"sm_80\"", "\"target\": \"sm_4294967376\"")),
             Catch::Contains("has target 'sm_4294967376' (expected sm_NN)"));
  // The optional tile work: an object of bounded integers.
  CHECK_THAT(error(edit("\"ptx\":", "\"tile_work\": 3, \"ptx\":")),
             Catch::Contains("\"tile_work\" must be an object"));
  CHECK_THAT(error(edit("\"ptx\":", "\"tile_work\": {\"mma\": -1, \"async_copies\": 0}, \"ptx\":")),
             Catch::Contains("\"tile_work\": \"mma\" must be an integer in [0, 1048576]"));
  CHECK_THAT(error(edit("\"ptx\":", "\"tile_work\": {\"mma\": 8, \"async_copies\": 0, \"atomics\": \"x\"}, \"ptx\":")),
             Catch::Contains("\"atomics\" must be an integer"));
  CHECK_THAT(error(edit("\"ptx\":", "\"tile_work\": {\"mma\": 8, \"async_copies\": 0, \"mbarrier_waits\": -1}, \"ptx\":")),
             Catch::Contains("\"mbarrier_waits\" must be an integer in [0, 1048576]"));
  // The sums' MMAs are some of the tile's.
  CHECK_THAT(
      error(edit("\"ptx\":", "\"tile_work\": {\"mma\": 8, \"async_copies\": 0, "
                             "\"sum_mma\": 9}, \"ptx\":")),
      Catch::Contains("\"sum_mma\" must be an integer in [0, 8], found 9"));
  // The manifest must agree with the entry's name and the PTX.
  CHECK_THAT(error(edit("\"block_n\": 64", "\"block_n\": 128")),
             Catch::Contains("does not match its manifest"));
  CHECK_THAT(error(edit("\"threads\": 64", "\"threads\": 128")),
             Catch::Contains("does not match its manifest"));
  CHECK_THAT(error(edit("\"kernel\": \"attnc_causal_f16_d64v64_m64n64w2s1\"", "\"kernel\": \"\"")),
             Catch::Contains("does not match its manifest"));
  CHECK_THAT(error(edit("\"target\": \"sm_80\"", "\"target\": \"sm_90\"")),
             Catch::Contains("is not for its target sm_90"));
  // Modifier programs whose ops lack operands, or mix types.
  auto program = [&](const std::string &body) {
    Package b;
    b.variants.push_back(makeVariant(kCausal));
    std::string t = b.serialize();
    std::string from = "arith.cmpi sge %q %kv";
    size_t at = t.find(from);
    REQUIRE(at != std::string::npos);
    return error(t.replace(at, from.size(), body));
  };
  CHECK_THAT(program("arith.cmpi sge %q"), Catch::Contains("wrong number or types of operands"));
  CHECK_THAT(program("arith.cmpi sge"), Catch::Contains("wrong number or types of operands"));
  CHECK_THAT(program("arith.addf %q %kv"), Catch::Contains("wrong number or types of operands"));
  CHECK_THAT(program("arith.cmpi sge %q %score"), Catch::Contains("used before it is defined"));
  CHECK_THAT(program("arith.cmpi sge %q %99"), Catch::Contains("used before it is defined"));
  CHECK_THAT(program("arith.cmpi sge %q %-3"), Catch::Contains("bad operand"));
  CHECK_THAT(program("arith.addi %q %kv"), Catch::Contains("must yield an i1"));
  // Two kernels of one name for a target; two for one (target, dtype,
  // head dims) unless the package holds tile candidates.
  Package twice = p;
  twice.variants[0].kernels.push_back(twice.variants[0].kernels[0]);
  CHECK_THAT(error(twice.serialize()), Catch::Contains("has two kernels named "
                                                       "'attnc_causal_f16_d64v64"));
  twice.tileCandidates = true;
  CHECK_THAT(error(twice.serialize()), Catch::Contains("has two kernels named"));
  GpuKernelImage &other = twice.variants[0].kernels.back();
  std::string oldName = other.kernel;
  // Another tile configuration: block_n 32 (the name carries it).
  other.spec.blockN = 32;
  other.kernel = oldName;
  other.kernel.replace(other.kernel.find("n64w"), 4, "n32w");
  for (std::string suffix : {"", "_merge"}) {
    size_t at = other.ptx.find(".entry " + oldName + suffix + "(");
    REQUIRE(at != std::string::npos);
    other.ptx.replace(at + 7, oldName.size(), other.kernel);
  }
  other.merge = other.kernel + "_merge";
  Package back;
  CHECK(Package::parse(twice.serialize(), "p.json", back).isOk());
  CHECK(back.tileCandidates);
  twice.tileCandidates = false;
  CHECK_THAT(error(twice.serialize()), Catch::Contains("has two kernels for sm_80 f16 D=64/64"));
}

TEST_CASE("PTX entry parameters are read with their sizes", "[package]") {
  std::string ptx = ".visible .entry k(\n\t.param .u64 .ptr .align 1 k_0,\n"
                    "\t.param .u32 k_1,\n\t.param .f32 k_2,\n"
                    "\t.param .align 8 .b8 k_3[24]\n)\n{\n}\n"
                    ".visible .entry kk(\n)\n{\n}\n";
  std::vector<int> sizes;
  REQUIRE(ptxEntryParams(ptx, "k", sizes).isOk());
  CHECK(sizes == std::vector<int>{8, 4, 4, 24});
  REQUIRE(ptxEntryParams(ptx, "kk", sizes).isOk());
  CHECK(sizes.empty());
  CHECK(ptxEntryParams(ptx, "x", sizes).message() ==
        "the PTX has no entry 'x'");
}

TEST_CASE("the kernel for a device is the highest target not above it",
          "[package]") {
  PackageVariant v = makeVariant(kCausal, "sm_80");
  v.kernels.push_back(makeVariant(kCausal, "sm_90").kernels[0]);
  const GpuKernelImage *k = nullptr;
  REQUIRE(selectKernel(v, 90, DType::F16, 64, 64, k).isOk());
  CHECK(k->target == "sm_90");
  REQUIRE(selectKernel(v, 89, DType::F16, 64, 64, k).isOk());
  CHECK(k->target == "sm_80");
  CHECK(selectKernel(v, 75, DType::F16, 64, 64, k).message() ==
        "the package has no kernel of variant 'causal' for sm_75 f16 Dqk=64 "
        "Dv=64 (it has: sm_80 f16 D=64/64, sm_90 f16 D=64/64)");
  CHECK(selectKernel(v, 90, DType::BF16, 64, 64, k).code() ==
        StatusCode::NotFound);
}

TEST_CASE("a package holds kernels with and without options, and a call "
          "gets the one with what it needs and nothing more", "[package]") {
  KernelSpec offsets, dropout, both;
  offsets.keyOffsets = true;
  dropout.dropout = true;
  both.dropout = both.keyOffsets = true;
  Package p;
  p.variants.push_back(makeVariant(kCausal, "sm_90", 0, offsets));
  for (const KernelSpec &o : {KernelSpec{}, both, dropout})
    p.variants[0].kernels.push_back(makeVariant(kCausal, "sm_90", 0, o).kernels[0]);
  // The names carry the options' tags, and the package loads.
  CHECK(p.variants[0].kernels[0].kernel ==
        "attnc_causal_f16_d64v64_kvoff_m64n64w2s1");
  CHECK(p.variants[0].kernels[2].kernel ==
        "attnc_causal_f16_d64v64_dropout_kvoff_m64n64w2s1");
  Package q;
  REQUIRE(Package::parse(p.serialize(), "mem", q).isOk());
  const PackageVariant &v = q.variants[0];
  auto pick = [&](KernelNeeds needs, int cc = 90) {
    const GpuKernelImage *k = nullptr;
    Status s = selectKernel(v, cc, DType::F16, 64, 64, k, needs);
    return s ? k->kernel : s.message();
  };
  CHECK(pick({}) == "attnc_causal_f16_d64v64_m64n64w2s1");
  CHECK(pick({true, false}) == "attnc_causal_f16_d64v64_kvoff_m64n64w2s1");
  CHECK(pick({false, true}) == "attnc_causal_f16_d64v64_dropout_m64n64w2s1");
  CHECK(pick({true, true}) ==
        "attnc_causal_f16_d64v64_dropout_kvoff_m64n64w2s1");
  // A higher target wins over fewer options; an option never needed is
  // taken when nothing else fits.
  PackageVariant w = makeVariant(kCausal, "sm_80");
  w.kernels.push_back(makeVariant(kCausal, "sm_90", 0, offsets).kernels[0]);
  const GpuKernelImage *k = nullptr;
  REQUIRE(selectKernel(w, 90, DType::F16, 64, 64, k).isOk());
  CHECK(k->kernel == "attnc_causal_f16_d64v64_kvoff_m64n64w2s1");
  CHECK(selectKernel(w, 89, DType::F16, 64, 64, k, {true, false}).message() ==
        "the package has no kernel of variant 'causal' for sm_89 f16 Dqk=64 "
        "Dv=64 key offsets (it has: sm_80 f16 D=64/64, sm_90 f16 D=64/64 key "
        "offsets)");
  // Two kernels with the same options for one target are refused.
  GpuKernelImage twin = p.variants[0].kernels[0];
  twin.kernel = "attnc_causal_f16_d64v64_kvoff_m64n64w2s2";
  twin.merge = twin.kernel + "_merge";
  twin.ptx = stubPtx({{twin.kernel, int(twin.kernelParams.size())},
                      {twin.merge, int(twin.mergeParams.size())}},
                     "sm_90");
  p.variants[0].kernels.push_back(twin);
  CHECK(Package::parse(p.serialize(), "mem", q).message().find(
            "has two kernels for sm_90 f16 D=64/64 key offsets") !=
        std::string::npos);
}

TEST_CASE("loading a kernel reports the JIT log, the target and the ABI",
          "[cuda][gpukernel]") {
  auto ctx = emuContext();
  PackageVariant v = makeVariant(kCausal);
  std::unique_ptr<GpuKernel> k;
  REQUIRE(GpuKernel::load(*ctx, v.info, v.kernels[0], k).isOk());
  CHECK(k->image().kernel == "attnc_causal_f16_d64v64_m64n64w2s1");

  GpuKernelImage bad = v.kernels[0];
  bad.ptx.replace(bad.ptx.find("\tret;"), 5, "\tfrob;");
  Status s = GpuKernel::load(*ctx, v.info, bad, k);
  CHECK(s.message().rfind(
            "cannot load kernel 'attnc_causal_f16_d64v64_m64n64w2s1' (sm_80): "
            "cuModuleLoadDataEx failed: CUDA_ERROR_INVALID_PTX (a PTX JIT "
            "compilation failed)\nJIT log:\nemucuda: line ",
            0) == 0);
  CHECK(s.message().find("instruction 'frob' is not supported") != std::string::npos);

  GpuKernelImage newer = v.kernels[0];
  newer.target = "sm_90";
  setenv("ATTNC_EMU_CC", "86", 1);
  auto ctx86 = emuContext();
  unsetenv("ATTNC_EMU_CC");
  CHECK(GpuKernel::load(*ctx86, v.info, newer, k).message() ==
        "kernel 'attnc_causal_f16_d64v64_m64n64w2s1' is compiled for sm_90, "
        "but attnc-emucuda is sm_86");

  GpuKernelImage abi = v.kernels[0];
  abi.kernelParams.push_back(8);
  CHECK(GpuKernel::load(*ctx, v.info, abi, k).message() ==
        "kernel 'attnc_causal_f16_d64v64_m64n64w2s1' has 42 parameters, but "
        "this runtime passes 41 (8 bytes each): the package and the runtime "
        "disagree on the ABI");

  GpuKernelImage big = v.kernels[0];
  big.sharedBytes = 64 * 1024;
  CHECK(GpuKernel::load(*ctx, v.info, big, k).message().find(
            "65536 bytes of static shared memory") != std::string::npos);

  // Dynamic shared memory beyond what the device lets a block opt in to.
  GpuKernelImage huge = v.kernels[0];
  huge.sharedBytes = 0;
  huge.dynamicSharedBytes = 300000;
  CHECK_THAT(GpuKernel::load(*ctx, v.info, huge, k).message(),
             Catch::Contains("needs 300000 bytes of shared memory per block, "
                             "but attnc-emucuda"));
}

TEST_CASE("a launch gets one block per work item and the ABI's parameters",
          "[cuda][gpukernel]") {
  Launches log;
  REQUIRE(log.count);
  auto ctx = emuContext();
  PackageVariant v = makeVariant(kCausal);
  std::unique_ptr<GpuKernel> k;
  REQUIRE(GpuKernel::load(*ctx, v.info, v.kernels[0], k).isOk());

  SECTION("prefill") {
    DeviceArgs d(*ctx, 2, 8, 2, 130, 130);
    log.clear();
    REQUIRE(k->run(d.a).isOk());
    REQUIRE(ctx->synchronize().isOk()); // run() queues; the arrays land on sync
    REQUIRE(log.count() == 1);
    auto l = log.at(0);
    CHECK(l.name == "attnc_causal_f16_d64v64_m64n64w2s1");
    CHECK(l.grid == 2 * 8 * 3); // ceil(130 / 64) Q tiles
    CHECK(l.block == 64);
    REQUIRE(l.params.size() == 41);
    CHECK(l.params[0] == reinterpret_cast<uintptr_t>(d.a.q.data));
    CHECK(l.params[1] == reinterpret_cast<uintptr_t>(d.a.q.data));
    CHECK(l.params[3] == uint64_t(2 * 8 * 130 * 64)); // q's extent
    CHECK(l.params[15] == reinterpret_cast<uintptr_t>(d.a.out.data));
    CHECK(l.params[40] == 0); // first work item
    const int64_t *ip = Launches::ip(l);
    CHECK(ip[abi::kB] == 2);
    CHECK(ip[abi::kHq] == 8);
    CHECK(ip[abi::kHkv] == 2);
    CHECK(ip[abi::kLq] == 130);
    CHECK(ip[abi::kNumQTiles] == 3);
    CHECK(ip[abi::kPackHeads] == 1);
    CHECK(ip[abi::kQStride + 2] == 64);
    abi::Layout L = abi::computeLayout(v.info);
    CHECK(ip[L.seqBase] == 130);
    CHECK(ip[L.seqBase + 2] == 0); // q pos0 of sequence 0
    const float *fp = reinterpret_cast<const float *>(l.params[31]);
    CHECK(fp[0] == Approx(0.125f)); // 1 / sqrt(64)
  }
  SECTION("decode packs the query heads of a KV group") {
    DeviceArgs d(*ctx, 3, 8, 2, 1, 100);
    log.clear();
    REQUIRE(k->run(d.a).isOk());
    REQUIRE(ctx->synchronize().isOk()); // run() queues; the arrays land on sync
    auto l = log.at(0);
    CHECK(l.grid == 3 * 2); // 4 heads per item, one Q tile
    CHECK(Launches::ip(l)[abi::kPackHeads] == 4);
    // q pos0 of sequence 0 (after the 3 KV lengths): 100 - 1.
    CHECK(Launches::ip(l)[abi::computeLayout(v.info).seqBase + 3] == 99);
  }
  SECTION("a persistent kernel gets at most one block per SM") {
    // The warp-specialized sm_90a form's blocks take items a grid apart
    // (LaunchFacts::persistent): the grid is the device's SMs, from item 0,
    // or one block per item where there are fewer items or ATTNC_GRID=items.
    setenv("ATTNC_EMU_SMS", "5", 1);
    auto small = emuContext();
    unsetenv("ATTNC_EMU_SMS");
    CHECK(small->device().multiprocessors() == 5);
    PackageVariant pv = makeVariant(kCausal);
    pv.kernels[0].persistent = true;
    std::unique_ptr<GpuKernel> pk, perItem;
    REQUIRE(GpuKernel::load(*small, pv.info, pv.kernels[0], pk).isOk());
    // ATTNC_GRID is read when a kernel is loaded, not per launch.
    setenv("ATTNC_GRID", "items", 1);
    REQUIRE(GpuKernel::load(*small, pv.info, pv.kernels[0], perItem).isOk());
    unsetenv("ATTNC_GRID");
    auto grid = [&](int64_t B, int64_t Lq, GpuKernel *k = nullptr) {
      DeviceArgs d(*small, B, 8, 2, Lq, Lq);
      log.clear();
      REQUIRE((k ? k : pk.get())->run(d.a).isOk());
      REQUIRE(small->synchronize().isOk());
      REQUIRE(log.count() == 1);
      auto l = log.at(0);
      CHECK(l.params[40] == 0); // first work item
      return l.grid;
    };
    CHECK(grid(2, 130) == 5); // 48 items
    CHECK(grid(1, 16) == 2);  // 2 items (4 heads packed per item): 2 blocks
    CHECK(grid(2, 130, perItem.get()) == 2 * 8 * 3);
    CHECK(grid(2, 130) == 5); // the first kernel keeps its grid
  }
  SECTION("bad input is refused before anything is enqueued") {
    DeviceArgs d(*ctx, 2, 8, 3, 16, 16);
    log.clear();
    CHECK(k->run(d.a).message() == "the number of query heads (8) must be a "
                                   "multiple of the number of KV heads (3)");
    DeviceArgs f(*ctx, 1, 2, 2, 16, 16);
    f.a.q.dtype = DType::BF16;
    CHECK(k->run(f.a).message().find("'q' has dtype bf16, expected f16") !=
          std::string::npos);
    CHECK(log.count() == 0);
  }
}

TEST_CASE("a data-dependent mask is built on the device before the kernel",
          "[cuda][gpukernel]") {
  Launches log;
  auto ctx = emuContext();
  PackageVariant v = makeVariant(kDocMask, "sm_80", 1);
  std::unique_ptr<GpuKernel> k;
  REQUIRE(GpuKernel::load(*ctx, v.info, v.kernels[0], k).isOk());
  DeviceArgs d(*ctx, 2, 4, 4, 100, 100);
  DeviceBuffer doc;
  REQUIRE(DeviceBuffer::allocate(*ctx, 2 * 100 * 4, doc).isOk());
  d.a.tensors = {{"doc", TensorView::contiguous(doc.data(), DType::I32, {2, 100})}};
  log.clear();
  REQUIRE(k->run(d.a).isOk());
  REQUIRE(ctx->synchronize().isOk()); // run() queues; the arrays land on sync
  REQUIRE(log.count() == 2);
  auto builder = log.at(0), kernel = log.at(1);
  CHECK(builder.name == "attnc_docs_f16_d64v64_m64n64w2s1_block_mask");
  CHECK(builder.grid == 2 * 1 * 2); // the mask reads b only: heads share it
  CHECK(builder.params.size() == 5 * 4 + 1);
  CHECK(kernel.grid == 2 * 4 * 2);
  // The builder writes the classes the kernel reads; the capture follows.
  CHECK(builder.params[11] == kernel.params[36]); // classes
  CHECK(builder.params[16] == reinterpret_cast<uintptr_t>(doc.data()));
  CHECK(kernel.params[41] == reinterpret_cast<uintptr_t>(doc.data()));
  const int64_t *ip = reinterpret_cast<const int64_t *>(kernel.params[26]);
  CHECK(ip[abi::kHasBlockMask] == 1);
  CHECK(ip[abi::kBMStrideH] == 0);

  // A caller's block mask is checked against the inputs and uploaded.
  BlockMask bm;
  REQUIRE(k->buildBlockMask(d.a, bm).isOk());
  CHECK(bm.numQTiles == 2);
  CHECK(bm.numKTiles == 2);
  log.clear();
  d.a.blockMask = &bm;
  REQUIRE(k->run(d.a).isOk());
  REQUIRE(ctx->synchronize().isOk()); // run() queues; the arrays land on sync
  CHECK(log.count() == 1);
  d.a.qOffsets = {0, 5};
  CHECK(k->run(d.a).message().find("'blockMask' was built for different") == 0);
}

TEST_CASE("runFromHost mirrors host views and frees what it allocated",
          "[cuda][gpukernel]") {
  Launches log;
  auto ctx = emuContext();
  PackageVariant v = makeVariant(kCausal);
  std::unique_ptr<GpuKernel> k;
  REQUIRE(GpuKernel::load(*ctx, v.info, v.kernels[0], k).isOk());
  std::vector<uint16_t> q(1 * 2 * 10 * 64), kv(q.size()), out(q.size(), 7);
  AttentionArgs a;
  a.q = TensorView::contiguous(q.data(), DType::F16, {1, 2, 10, 64});
  a.k = TensorView::contiguous(kv.data(), DType::F16, {1, 2, 10, 64});
  a.v = a.k;
  a.out = TensorView::contiguous(out.data(), DType::F16, {1, 2, 10, 64});
  int before = log.live();
  float ms = -1;
  setenv("ATTNC_EMU_EVENT_MS", "0.5", 1);
  REQUIRE(runFromHost(*ctx, *k, a, &ms).isOk());
  unsetenv("ATTNC_EMU_EVENT_MS");
  CHECK(ms == 0.5f);
  CHECK(out[0] == 7); // the stub kernel writes nothing: out comes back as it went
  CHECK(log.live() == before + 1); // only the kernel's parameter scratch
  setenv("ATTNC_EMU_ALLOC_FAIL", "1", 1);
  Status s = runFromHost(*ctx, *k, a);
  unsetenv("ATTNC_EMU_ALLOC_FAIL");
  CHECK(s.message() == "cannot allocate 2560 bytes on the device: "
                       "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of "
                       "memory)");
}
