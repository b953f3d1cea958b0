// A package's backward section (format 5) is input: every launch fact in
// it is checked against the tiles its entry names encode and against the
// block size its PTX declares, so that a relabelled manifest is refused
// when read, never launched over the wrong grid or block.
#include "attnc/Driver/Session.h"
#include "attnc/runtime/Package.h"

#include <catch2/catch.hpp>

using namespace attnc;
using namespace attnc::rt;

namespace {

/// A one-variant package with a forward and a backward kernel of causal
/// for sm_80 in `dtype` (bf16: tensor cores; f32: SIMT).
std::string causalPackage(DType dtype) {
  std::string diags;
  std::unique_ptr<Session> s;
  REQUIRE(Session::loadSource(
              "t.attn", "variant causal() { mask_mod(b, h, q, kv) = q >= kv }",
              diags, s)
              .isOk());
  s->setKernelCache(nullptr);
  KernelSpec spec;
  spec.dtype = dtype;
  PackageVariant pv;
  REQUIRE(s->info("causal", pv.info).isOk());
  GpuKernelImage fwd;
  REQUIRE(s->compileGpu("causal", spec, "sm_80", fwd).isOk());
  GpuBackwardImage bwd;
  REQUIRE(s->compileGpuBackward("causal", spec, "sm_80", bwd).isOk());
  pv.kernels.push_back(fwd);
  pv.backward.push_back(bwd);
  Package p;
  p.compiler = Session::compilerId();
  p.variants.push_back(pv);
  return p.serialize();
}

std::string parseError(const std::string &text) {
  Package p;
  Status s = Package::parse(text, "p.json", p);
  return s.isOk() ? "(accepted)" : s.message();
}

/// `text` with the first `from` (after `after`) replaced by `to`.
std::string edit(std::string text, const std::string &from,
                 const std::string &to, const std::string &after = "") {
  size_t start = after.empty() ? 0 : text.find(after);
  REQUIRE(start != std::string::npos);
  size_t at = text.find(from, start);
  INFO("looking for " << from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

} // namespace

TEST_CASE("a relabelled backward manifest is refused when read",
          "[package][backward]") {
  const std::string bf16 = causalPackage(DType::BF16);
  Package ok;
  REQUIRE(Package::parse(bf16, "p.json", ok).isOk());
  REQUIRE(ok.variants[0].backward.size() == 1);
  const GpuBackwardImage &b = ok.variants[0].backward[0];
  REQUIRE(b.spec.warps == 4);
  REQUIRE(b.queryThreads == 128);
  const std::string bwd = "\"backward\":"; // the backward section

  // Each launch fact alone, and a consistent relabel of all of them.
  CHECK_THAT(parseError(edit(bf16, "\"block_m\": 64", "\"block_m\": 128", bwd)),
             Catch::Contains("names tiles 'm64n64w4s2', its manifest gives "
                             "'m128n64w4s2'"));
  CHECK_THAT(parseError(edit(bf16, "\"block_n\": 64", "\"block_n\": 32", bwd)),
             Catch::Contains("names tiles 'm64n64w4s2'"));
  CHECK_THAT(parseError(edit(bf16, "\"warps\": 4", "\"warps\": 2", bwd)),
             Catch::Contains("names tiles 'm64n64w4s2'"));
  CHECK_THAT(parseError(edit(bf16, "\"query_threads\": 128",
                             "\"query_threads\": 64", bwd)),
             Catch::Contains("launches 64 and 128 threads"));
  CHECK_THAT(parseError(edit(bf16, "\"key_value_threads\": 128",
                             "\"key_value_threads\": 256", bwd)),
             Catch::Contains("launches 128 and 256 threads"));
  std::string relabel = bf16;
  for (auto [from, to] : {std::pair<std::string, std::string>{
                              "\"block_m\": 64", "\"block_m\": 32"},
                          {"\"warps\": 4", "\"warps\": 2"},
                          {"\"query_threads\": 128", "\"query_threads\": 64"},
                          {"\"key_value_threads\": 128",
                           "\"key_value_threads\": 64"}})
    relabel = edit(relabel, from, to, bwd);
  CHECK_THAT(parseError(relabel), Catch::Contains("names tiles 'm64n64w4s2'"));
  // The PTX's declared block size is the last word on threads.
  CHECK_THAT(parseError(edit(bf16, ".maxntid 128, 1, 1", ".maxntid 64, 1, 1",
                             "_bwd_kv(")),
             Catch::Contains("launches 'attnc_causal_bf16_d64v64_m64n64w4s2_"
                             "bwd_kv' with 128 threads, its PTX declares 64"));

  // SIMT (f32): a thread per query row and per key row.
  const std::string f32 = causalPackage(DType::F32);
  REQUIRE(parseError(f32) == "(accepted)");
  CHECK_THAT(parseError(edit(f32, "\"query_threads\": 32",
                             "\"query_threads\": 64", bwd)),
             Catch::Contains("names tiles 'm32n32w1s1', its manifest gives "
                             "'m32n32w2s1'"));
  CHECK_THAT(parseError(edit(f32, "\"key_value_threads\": 32",
                             "\"key_value_threads\": 16", bwd)),
             Catch::Contains("launches 32 and 16 threads"));
}

TEST_CASE("a forward manifest must launch the block size its PTX declares",
          "[package]") {
  const std::string bf16 = causalPackage(DType::BF16);
  Package ok;
  REQUIRE(Package::parse(bf16, "p.json", ok).isOk());
  const GpuKernelImage &k = ok.variants[0].kernels[0];
  std::string declared = ".maxntid " + std::to_string(k.threads) + ", 1, 1";
  CHECK_THAT(parseError(edit(bf16, declared, ".maxntid 64, 1, 1")),
             Catch::Contains("its PTX declares 64 (.maxntid)"));
  // What is wrong, said plainly: an empty PTX, one parameter's size.
  Package empty = ok;
  empty.variants[0].kernels[0].ptx = "\n";
  CHECK(parseError(empty.serialize()) ==
        "'p.json' is not a valid attnc package: the PTX of '" + k.kernel +
            "' is empty");
  Package sizes = ok;
  sizes.variants[0].kernels[0].kernelParams[1] = 4;
  CHECK(parseError(sizes.serialize()) ==
        "'p.json' is not a valid attnc package: the manifest gives parameter "
        "1 of '" + k.kernel + "' 4 bytes, its PTX declares 8");
}
