//===- Package.cpp - Reading and writing kernel packages (JSON) ----------===//
#include "attnc/runtime/Package.h"
#include "attnc/runtime/FileIO.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace attnc::rt {

using nlohmann::json;

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
  j["grid"] = "x: one block per work item (b, query-head group, Q tile), "
              "B * (Hq / pack_heads) * ceil(pack_heads * Lq / block_m), the "
              "first item in the last parameter; block: threads";
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
      jk["threads"] = k.threads;
      jk["shared_bytes"] = k.sharedBytes;
      jk["kernel"] = k.kernel;
      jk["kernel_params"] = k.kernelParams;
      if (!k.maskBuilder.empty()) {
        jk["mask_builder"] = k.maskBuilder;
        jk["mask_builder_params"] = k.maskBuilderParams;
      }
      jk["ptx"] = k.ptx;
      ks.push_back(std::move(jk));
    }
    jv["kernels"] = std::move(ks);
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

} // namespace

Status Package::parse(const std::string &text, const std::string &origin,
                      Package &out) {
  out = Package();
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return bad(origin, "it is not JSON");
  if (!j.is_object() || j.value("format", "") != "attnc-package")
    return bad(origin, "no \"format\": \"attnc-package\"");
  if (!j.contains("version") || !j["version"].is_number_integer() ||
      j["version"].get<int>() != kVersion)
    return bad(origin, fmt::format("version {} expected, found {}", kVersion,
                                   j.contains("version") ? j["version"].dump()
                                                         : "none"));
  try {
    out.compiler = j.value("compiler", "");
    out.source = j.value("source", "");
    for (const json &jv : j.at("variants")) {
      PackageVariant v;
      std::string name = jv.at("name").get<std::string>();
      if (Status s = VariantInfo::parse(jv.at("program").get<std::string>(),
                                        v.info);
          !s)
        return bad(origin, "variant '" + name + "': " + s.message());
      if (v.info.name != name)
        return bad(origin, "variant '" + name + "' holds the program of '" +
                               v.info.name + "'");
      for (const json &jk : jv.at("kernels")) {
        GpuKernelImage k;
        k.target = jk.at("target").get<std::string>();
        auto dt = parseDType(jk.at("dtype").get<std::string>());
        if (!dt)
          return bad(origin, "unknown dtype " + jk.at("dtype").dump());
        k.spec.dtype = *dt;
        k.spec.headDim = jk.at("head_dim").get<int64_t>();
        k.spec.vHeadDim = jk.at("v_head_dim").get<int64_t>();
        k.spec.blockM = jk.at("block_m").get<int64_t>();
        k.spec.blockN = jk.at("block_n").get<int64_t>();
        k.threads = jk.at("threads").get<int64_t>();
        k.sharedBytes = jk.at("shared_bytes").get<int64_t>();
        k.kernel = jk.at("kernel").get<std::string>();
        k.kernelParams = jk.at("kernel_params").get<std::vector<int>>();
        if (jk.contains("mask_builder")) {
          k.maskBuilder = jk.at("mask_builder").get<std::string>();
          k.maskBuilderParams =
              jk.at("mask_builder_params").get<std::vector<int>>();
        }
        k.ptx = jk.at("ptx").get<std::string>();
        if (k.threads <= 0 || k.threads > 1024 || k.spec.blockM <= 0 ||
            k.spec.blockN <= 0 || k.sharedBytes < 0)
          return bad(origin, "kernel '" + k.kernel +
                                 "' has an invalid configuration");
        if ((v.info.maskKind == MaskKind::Data) == k.maskBuilder.empty())
          return bad(origin, "kernel '" + k.kernel + "' of variant '" + name +
                                 "' " +
                                 (k.maskBuilder.empty()
                                      ? "lacks the block-mask builder its "
                                        "data-dependent mask needs"
                                      : "has a block-mask builder but no "
                                        "data-dependent mask"));
        // The launcher trusts these sizes: they must be the PTX's own.
        for (auto [entry, sizes] :
             {std::pair{&k.kernel, &k.kernelParams},
              std::pair{&k.maskBuilder, &k.maskBuilderParams}}) {
          if (entry->empty())
            continue;
          std::vector<int> actual;
          if (Status s = ptxEntryParams(k.ptx, *entry, actual); !s)
            return bad(origin, s.message());
          if (actual != *sizes)
            return bad(origin,
                       fmt::format("the manifest gives '{}' {} parameters, "
                                   "its PTX declares {}",
                                   *entry, sizes->size(), actual.size()));
        }
        v.kernels.push_back(std::move(k));
      }
      out.variants.push_back(std::move(v));
    }
  } catch (const json::exception &e) {
    return bad(origin, std::string("missing or mistyped field (") + e.what() +
                           ")");
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
                    const GpuKernelImage *&out) {
  out = nullptr;
  int best = -1;
  std::string have;
  for (const GpuKernelImage &k : v.kernels) {
    have += fmt::format("{}{} {} D={}/{}", have.empty() ? "" : ", ", k.target,
                        dtypeName(k.spec.dtype), k.spec.headDim,
                        k.spec.vHeadDim);
    int t = std::atoi(k.target.c_str() + 3);
    if (k.spec.dtype != dtype || k.spec.headDim != headDim ||
        k.spec.vHeadDim != vHeadDim || t > cc || t <= best)
      continue;
    best = t;
    out = &k;
  }
  if (out)
    return Status::ok();
  return Status::notFound(fmt::format(
      "the package has no kernel of variant '{}' for sm_{} {} Dqk={} Dv={} "
      "(it has: {})",
      v.info.name, cc, dtypeName(dtype), headDim, vHeadDim,
      have.empty() ? "none" : have));
}

Status ptxEntryParams(const std::string &ptx, const std::string &entry,
                      std::vector<int> &sizes) {
  sizes.clear();
  std::string head = ".entry " + entry + "(";
  size_t at = ptx.find(head);
  if (at == std::string::npos)
    return Status::notFound("the PTX has no entry '" + entry + "'");
  size_t end = ptx.find(')', at);
  if (end == std::string::npos)
    return Status::invalidArgument("the PTX entry '" + entry +
                                   "' is not closed");
  std::istringstream params(ptx.substr(at + head.size(), end - at - head.size()));
  std::string decl;
  while (std::getline(params, decl, ',')) {
    size_t p = decl.find(".param");
    if (p == std::string::npos)
      continue;
    // ".param .u64 [.ptr .align 1] name" or ".param .align 8 .b8 name[16]"
    size_t bracket = decl.find('[');
    if (bracket != std::string::npos) {
      sizes.push_back(std::atoi(decl.c_str() + bracket + 1));
      continue;
    }
    int bits = 0;
    for (const char *t : {".u", ".s", ".b", ".f"}) {
      size_t q = decl.find(t, p + 6);
      if (q != std::string::npos && std::isdigit(static_cast<unsigned char>(decl[q + 2]))) {
        bits = std::atoi(decl.c_str() + q + 2);
        break;
      }
    }
    if (bits <= 0)
      return Status::invalidArgument("cannot read the PTX parameter '" +
                                     decl + "' of '" + entry + "'");
    sizes.push_back(bits / 8);
  }
  return Status::ok();
}

} // namespace attnc::rt
