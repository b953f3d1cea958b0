//===- Package.cpp - Reading and writing kernel packages (JSON) ----------===//
#include "attnc/runtime/Package.h"
#include "attnc/runtime/FileIO.h"
#include "attnc/runtime/Parse.h"

#include "PackageFields.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <climits>
#include <cstdio>
#include <fstream>
#include <cstring>
#include <sstream>
#include <unistd.h>

namespace attnc::rt {

using nlohmann::json;

int targetNumber(const std::string &t, bool *archSpecific) {
  int64_t n = 0;
  bool arch = !t.empty() && t.back() == 'a';
  std::string digits = t.size() > 3 ? t.substr(3, t.size() - 3 - (arch ? 1 : 0)) : "";
  if (t.rfind("sm_", 0) != 0 || !parseInt(digits, 50, 999, n))
    return 0;
  if (archSpecific)
    *archSpecific = arch;
  return static_cast<int>(n);
}

TileConfig tileConfigOf(const GpuKernelImage &k) {
  TileConfig c;
  c.blockM = k.spec.blockM;
  c.blockN = k.spec.blockN;
  c.warps = (k.threads + 31) / 32;
  // The name ends in s<stages> (checked when the package was read).
  size_t s = k.kernel.find_last_of('s');
  int64_t stages = 1;
  if (s != std::string::npos && parseInt(k.kernel.substr(s + 1), 1, 8, stages))
    c.stages = stages;
  else
    c.stages = 1;
  return c;
}

const PackageVariant *Package::find(const std::string &variant) const {
  for (const PackageVariant &v : variants)
    if (v.info.name == variant)
      return &v;
  return nullptr;
}

std::string Package::serialize() const {
  json j;
  j["format"] = "attnc-package";
  j["version"] = kVersion;
  j["compiler"] = compiler;
  j["source"] = source;
  if (tileCandidates)
    j["tile_candidates"] = true;
  j["grid"] = "x: one block per work item (b, query-head group, Q tile, KV "
              "split), B * (Hq / pack_heads) * ceil(pack_heads * Lq / "
              "block_m) * splits, the first item in the last parameter "
              "(a persistent kernel: at most one block per SM from item 0, "
              "each taking items gridDim.x apart); "
              "block: threads. merge: one block of 64 threads per row, "
              "B * Hq * Lq";
  json vs = json::array();
  for (const PackageVariant &v : variants) {
    json jv;
    jv["name"] = v.info.name;
    jv["program"] = v.info.text;
    json ks = json::array();
    for (const GpuKernelImage &k : v.kernels) {
      json jk;
      jk["target"] = k.target;
      jk["dtype"] = std::string(dtypeName(k.spec.dtype));
      jk["head_dim"] = k.spec.headDim;
      jk["v_head_dim"] = k.spec.vHeadDim;
      jk["block_m"] = k.spec.blockM;
      jk["block_n"] = k.spec.blockN;
      if (k.spec.dropout)
        jk["dropout"] = true;
      if (k.spec.keyOffsets)
        jk["key_offsets"] = true;
      jk["threads"] = k.threads;
      jk["shared_bytes"] = k.sharedBytes;
      jk["dynamic_shared_bytes"] = k.dynamicSharedBytes;
      if (k.persistent)
        jk["persistent"] = true;
      jk["kernel"] = k.kernel;
      jk["kernel_params"] = k.kernelParams;
      jk["merge"] = k.merge;
      jk["merge_params"] = k.mergeParams;
      if (k.mergeGridDependency)
        jk["merge_grid_dependency"] = true;
      if (!k.maskBuilder.empty()) {
        jk["mask_builder"] = k.maskBuilder;
        jk["mask_builder_params"] = k.maskBuilderParams;
      }
      if (k.tileWork.mma)
        jk["tile_work"] = tileWorkToJson(k.tileWork);
      jk["ptx"] = k.ptx;
      ks.push_back(std::move(jk));
    }
    jv["kernels"] = std::move(ks);
    if (!v.backward.empty()) {
      json bs = json::array();
      for (const GpuBackwardImage &k : v.backward)
        bs.push_back(backwardToJson(k));
      jv["backward"] = std::move(bs);
    }
    vs.push_back(std::move(jv));
  }
  j["variants"] = std::move(vs);
  return j.dump(1) + "\n";
}

namespace {

Status bad(const std::string &origin, const std::string &what) {
  return Status::invalidArgument(
      fmt::format("'{}' is not a valid attnc package: {}", origin, what));
}

/// A kernel entry's name: attnc_<variant>_<dtype>_d<D>v<Dv>_<options>
/// m<M>n<N>w<W>s<S> (options: kernelOptionTags), checked against the
/// manifest's own fields.
bool checkKernelName(const GpuKernelImage &k, const std::string &variant,
                     std::string &why) {
  std::string want = fmt::format("attnc_{}_{}_d{}v{}_{}m{}n{}w{}s", variant,
                                 dtypeName(k.spec.dtype), k.spec.headDim,
                                 k.spec.vHeadDim, kernelOptionTags(k.spec),
                                 k.spec.blockM, k.spec.blockN, k.threads / 32);
  int64_t stages = 0;
  if (k.kernel.rfind(want, 0) != 0 ||
      !parseInt(k.kernel.substr(want.size()), 1, 8, stages)) {
    why = fmt::format("kernel '{}' does not match its manifest (expected a "
                      "name '{}<stages>')", k.kernel, want);
    return false;
  }
  return true;
}

bool parseKernel(const json &jk, const VariantInfo &info, GpuKernelImage &k,
                 std::string &why) {
  if (!jk.is_object()) {
    why = "a kernel must be an object";
    return false;
  }
  std::string dtype;
  int64_t threads = 0, shared = 0, dynShared = 0;
  if (!stringField(jk, "target", k.target, why) ||
      !stringField(jk, "dtype", dtype, why) ||
      !intField(jk, "head_dim", 8, 256, k.spec.headDim, why) ||
      !intField(jk, "v_head_dim", 8, 256, k.spec.vHeadDim, why) ||
      !intField(jk, "block_m", 1, 1024, k.spec.blockM, why) ||
      !intField(jk, "block_n", 8, 1024, k.spec.blockN, why) ||
      !optionalBoolField(jk, "dropout", k.spec.dropout, why) ||
      !optionalBoolField(jk, "key_offsets", k.spec.keyOffsets, why) ||
      !optionalBoolField(jk, "persistent", k.persistent, why) ||
      !intField(jk, "threads", 32, 1024, threads, why) ||
      !intField(jk, "shared_bytes", 0, kMaxSharedBytes, shared, why) ||
      !intField(jk, "dynamic_shared_bytes", 0, kMaxSharedBytes, dynShared,
                why) ||
      !stringField(jk, "kernel", k.kernel, why, 256) ||
      !paramSizes(jk, "kernel_params", k.kernelParams, why) ||
      !stringField(jk, "merge", k.merge, why, 256) ||
      !paramSizes(jk, "merge_params", k.mergeParams, why) ||
      !optionalBoolField(jk, "merge_grid_dependency", k.mergeGridDependency,
                         why) ||
      !tileWorkField(jk, "tile_work", k.tileWork, why) ||
      !stringField(jk, "ptx", k.ptx, why, kMaxPtxBytes))
    return false;

  k.threads = threads;
  k.sharedBytes = shared;
  k.dynamicSharedBytes = dynShared;
  if (shared + dynShared > kMaxSharedBytes) {
    why = fmt::format("kernel '{}' asks for {} bytes of shared memory; no "
                      "device has more than {}",
                      k.kernel, shared + dynShared, kMaxSharedBytes);
    return false;
  }
  int target = targetNumber(k.target);
  if (!target) {
    why = fmt::format("kernel '{}' has target '{}' (expected sm_NN)", k.kernel,
                      k.target);
    return false;
  }
  auto dt = parseDType(dtype);
  if (!dt || (*dt != DType::F32 && *dt != DType::F16 && *dt != DType::BF16)) {
    why = fmt::format("kernel '{}' has dtype '{}' (expected f32, f16 or bf16)",
                      k.kernel, dtype);
    return false;
  }
  k.spec.dtype = *dt;
  if (k.spec.headDim % 8 || k.spec.vHeadDim % 8 || k.spec.blockN % 8 ||
      k.threads % 32) {
    why = fmt::format("kernel '{}' has an invalid configuration", k.kernel);
    return false;
  }
  if (!maskBuilderFields(jk, info, "kernel '" + k.kernel + "'", k.kernel,
                         k.maskBuilder, k.maskBuilderParams, why))
    return false;
  if (!checkKernelName(k, info.name, why))
    return false;
  if (k.merge != k.kernel + "_merge") {
    why = fmt::format("kernel '{}' names the merge entry '{}'", k.kernel,
                      k.merge);
    return false;
  }
  // A merge launched as the kernel's dependent must wait for it.
  if (k.mergeGridDependency &&
      (target < 90 || !ptxEntryHas(k.ptx, k.merge, "griddepcontrol.wait"))) {
    why = fmt::format("kernel '{}' says its merge waits for the kernel's grid, "
                      "but {}",
                      k.kernel,
                      target < 90
                          ? "its target " + k.target +
                                " has no griddepcontrol (sm_90+)"
                          : "'" + k.merge + "' has no griddepcontrol.wait");
    return false;
  }
  // The PTX is for the manifest's target, and declares the entries with
  // the parameter sizes the launcher will pass and the block size.
  return checkPtx(k.ptx, k.target,
                  {{&k.kernel, &k.kernelParams},
                   {&k.maskBuilder, &k.maskBuilderParams},
                   {&k.merge, &k.mergeParams}},
                  why) &&
         entryThreadsMatch(k.ptx, k.kernel, k.threads, why);
}

} // namespace

Status Package::parse(const std::string &text, const std::string &origin,
                      Package &out) {
  out = Package();
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return bad(origin, "it is not JSON");
  // Every access below checks the field's type first: a package is input,
  // and nothing in it may throw, overflow or be truncated.
  try {
    if (!j.is_object() || !j.contains("format") || j["format"] != "attnc-package")
      return bad(origin, "no \"format\": \"attnc-package\"");
    if (!j.contains("version") || !j["version"].is_number_integer() ||
        j["version"] != kVersion)
      return bad(origin, fmt::format("version {} expected, found {}", kVersion,
                                     j.contains("version") ? j["version"].dump()
                                                           : "none"));
    std::string why;
    for (const char *key : {"compiler", "source"})
      if (j.contains(key) &&
          !stringField(j, key, key[0] == 'c' ? out.compiler : out.source, why))
        return bad(origin, why);
    if (j.contains("tile_candidates")) {
      if (!j["tile_candidates"].is_boolean())
        return bad(origin, "\"tile_candidates\" must be true or false");
      out.tileCandidates = j["tile_candidates"].get<bool>();
    }
    if (!j.contains("variants") || !j["variants"].is_array())
      return bad(origin, "\"variants\" must be an array");
    for (const json &jv : j["variants"]) {
      if (!jv.is_object())
        return bad(origin, "a variant must be an object");
      PackageVariant v;
      std::string name, program;
      if (!stringField(jv, "name", name, why, 256) ||
          !stringField(jv, "program", program, why, 16 << 20))
        return bad(origin, why);
      if (out.find(name))
        return bad(origin, "variant '" + name + "' appears twice");
      if (Status s = VariantInfo::parse(program, v.info); !s)
        return bad(origin, "variant '" + name + "': " + s.message());
      if (v.info.name != name)
        return bad(origin, "variant '" + name + "' holds the program of '" +
                               v.info.name + "'");
      if (!jv.contains("kernels") || !jv["kernels"].is_array())
        return bad(origin, "variant '" + name + "': \"kernels\" must be an array");
      for (const json &jk : jv["kernels"]) {
        GpuKernelImage k;
        if (!parseKernel(jk, v.info, k, why))
          return bad(origin, why);
        for (const GpuKernelImage &o : v.kernels) {
          if (o.kernel == k.kernel && o.target == k.target)
            return bad(origin, fmt::format("variant '{}' has two kernels "
                                           "named '{}'", name, k.kernel));
          if (!out.tileCandidates && o.target == k.target &&
              o.spec.dtype == k.spec.dtype &&
              o.spec.headDim == k.spec.headDim &&
              o.spec.vHeadDim == k.spec.vHeadDim &&
              o.spec.dropout == k.spec.dropout &&
              o.spec.keyOffsets == k.spec.keyOffsets)
            return bad(origin, fmt::format("variant '{}' has two kernels for "
                                           "{} {} D={}/{}{}", name, k.target,
                                           dtypeName(k.spec.dtype),
                                           k.spec.headDim, k.spec.vHeadDim,
                                           describeOptions(k.spec)));
        }
        v.kernels.push_back(std::move(k));
      }
      if (jv.contains("backward")) {
        if (!jv["backward"].is_array())
          return bad(origin,
                     "variant '" + name + "': \"backward\" must be an array");
        for (const json &jb : jv["backward"]) {
          GpuBackwardImage k;
          if (!parseBackward(jb, v.info, k, why))
            return bad(origin, why);
          for (const GpuBackwardImage &o : v.backward)
            if (o.target == k.target && o.spec.dtype == k.spec.dtype &&
                o.spec.headDim == k.spec.headDim &&
                o.spec.vHeadDim == k.spec.vHeadDim &&
                o.spec.dropout == k.spec.dropout &&
                o.spec.keyOffsets == k.spec.keyOffsets)
              return bad(origin, fmt::format(
                                     "variant '{}' has two backward kernels "
                                     "for {} {} D={}/{}{}", name, k.target,
                                     dtypeName(k.spec.dtype), k.spec.headDim,
                                     k.spec.vHeadDim, describeOptions(k.spec)));
          v.backward.push_back(std::move(k));
        }
      }
      out.variants.push_back(std::move(v));
    }
  } catch (const json::exception &e) {
    // Not expected (every field's type is checked), but never an abort.
    return bad(origin, std::string("unreadable field (") + e.what() + ")");
  }
  return Status::ok();
}

Status Package::read(const std::string &path, Package &out) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return Status::notFound("cannot read package '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), path, out);
}

Status Package::write(const std::string &path) const {
  return writeFileAtomic(path, serialize());
}

Status selectKernel(const PackageVariant &v, int cc, DType dtype,
                    int64_t headDim, int64_t vHeadDim,
                    const GpuKernelImage *&out, KernelNeeds needs) {
  std::string have;
  out = selectImage(v.kernels, cc, dtype, headDim, vHeadDim, needs, have);
  if (out)
    return Status::ok();
  KernelSpec asked;
  asked.dropout = needs.dropout;
  asked.keyOffsets = needs.keyOffsets;
  return Status::notFound(fmt::format(
      "the package has no kernel of variant '{}' for sm_{} {} Dqk={} Dv={}{} "
      "(it has: {})",
      v.info.name, cc, dtypeName(dtype), headDim, vHeadDim,
      describeOptions(asked), have.empty() ? "none" : have));
}

namespace {

/// Where `.entry <entry>(` starts its parameter list (`open`, just past
/// the parenthesis) and where the list closes (`close`, at ')').
Status findEntryParams(const std::string &ptx, const std::string &entry,
                       size_t &open, size_t &close) {
  std::string head = ".entry " + entry + "(";
  size_t at = ptx.find(head);
  if (at == std::string::npos)
    return Status::notFound("the PTX has no entry '" + entry + "'");
  close = ptx.find(')', at);
  if (close == std::string::npos)
    return Status::invalidArgument("the PTX entry '" + entry +
                                   "' is not closed");
  open = at + head.size();
  return Status::ok();
}

} // namespace

Status ptxEntryParams(const std::string &ptx, const std::string &entry,
                      std::vector<int> &sizes) {
  sizes.clear();
  size_t open = 0, end = 0;
  if (Status s = findEntryParams(ptx, entry, open, end); !s)
    return s;
  std::istringstream params(ptx.substr(open, end - open));
  std::string decl;
  while (std::getline(params, decl, ',')) {
    size_t p = decl.find(".param");
    if (p == std::string::npos)
      continue;
    // ".param .u64 [.ptr .align 1] name" or ".param .align 8 .b8 name[16]"
    size_t bracket = decl.find('[');
    if (bracket != std::string::npos) {
      size_t close = decl.find(']', bracket);
      int64_t n = 0;
      if (close == std::string::npos ||
          !parseInt(decl.substr(bracket + 1, close - bracket - 1), 1, 1 << 16, n))
        return Status::invalidArgument("cannot read the PTX parameter '" +
                                       decl + "' of '" + entry + "'");
      sizes.push_back(static_cast<int>(n));
      continue;
    }
    int64_t bits = 0;
    for (const char *t : {".u", ".s", ".b", ".f"}) {
      size_t q = decl.find(t, p + 6);
      if (q == std::string::npos)
        continue;
      size_t e = q + 2;
      while (e < decl.size() && std::isdigit(static_cast<unsigned char>(decl[e])))
        ++e;
      if (parseInt(decl.substr(q + 2, e - q - 2), 8, 64, bits))
        break;
    }
    if (bits <= 0 || bits % 8)
      return Status::invalidArgument("cannot read the PTX parameter '" +
                                     decl + "' of '" + entry + "'");
    sizes.push_back(bits / 8);
  }
  return Status::ok();
}

bool ptxEntryHas(const std::string &ptx, const std::string &entry,
                 const std::string &instruction) {
  size_t open = 0, close = 0;
  if (!findEntryParams(ptx, entry, open, close))
    return false;
  size_t body = ptx.find('{', close);
  if (body == std::string::npos)
    return false;
  // The body ends at the first closing brace at the start of a line (the
  // braces of nested scopes are indented).
  size_t end = ptx.find("\n}", body);
  return ptx.substr(body, end == std::string::npos ? end : end - body)
             .find(instruction) != std::string::npos;
}

int64_t ptxEntryMaxThreads(const std::string &ptx, const std::string &entry) {
  size_t open = 0, close = 0;
  if (!findEntryParams(ptx, entry, open, close))
    return 0;
  size_t body = ptx.find('{', close);
  if (body == std::string::npos)
    return 0;
  // Directives sit between the parameter list and the body.
  std::string between = ptx.substr(close + 1, body - close - 1);
  for (const char *d : {".reqntid", ".maxntid"}) {
    size_t p = between.find(d);
    if (p == std::string::npos)
      continue;
    std::istringstream in(between.substr(p + std::strlen(d)));
    int64_t x = 0, y = 1, z = 1;
    char comma = 0;
    in >> x;
    if (in >> comma && comma == ',') {
      in >> y;
      if (in >> comma && comma == ',')
        in >> z;
    }
    if (x > 0 && y > 0 && z > 0 && x <= 1024 && y <= 1024 && z <= 64)
      return x * y * z;
    return -1;
  }
  return 0;
}

} // namespace attnc::rt
