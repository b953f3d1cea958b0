//===- Session.cpp - Parse, check, lower and compile a .attn file --------===//
#include "attnc/Driver/Session.h"

#include "attnc/Codegen/CpuBackend.h"
#include "attnc/Codegen/GpuBackend.h"
#include "attnc/Codegen/VariantInfo.h"
#include "attnc/Frontend/Sema.h"
#include "attnc/MLIRGen/MLIRGen.h"

#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

#include <fstream>
#include <iostream>
#include <sstream>

namespace attnc {

struct Session::Impl {
  mlir::MLIRContext ctx;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::vector<std::string> names;
  mlir::attn::VariantOp find(const std::string &n) {
    for (auto v : module->getOps<mlir::attn::VariantOp>())
      if (v.getSymName() == n)
        return v;
    return {};
  }
};

Session::~Session() = default;

rt::Status Session::load(const std::string &path, std::string &diagnostics,
                         std::unique_ptr<Session> &out) {
  std::string text;
  if (path == "-") {
    std::ostringstream ss;
    ss << std::cin.rdbuf();
    text = ss.str();
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in)
      return rt::Status::notFound("cannot read '" + path + "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  return loadSource(path == "-" ? "<stdin>" : path, std::move(text),
                    diagnostics, out);
}

rt::Status Session::loadSource(const std::string &name, std::string text,
                               std::string &diagnostics,
                               std::unique_ptr<Session> &out) {
  SourceFile file(name, std::move(text));
  DiagnosticEngine diag(file);
  Module ast;
  if (!parseAndCheck(file, diag, ast)) {
    std::ostringstream os;
    diag.print(os);
    diagnostics = os.str();
    return rt::Status::invalidArgument("'" + name + "' has errors");
  }
  auto s = std::unique_ptr<Session>(new Session());
  s->impl_ = std::make_unique<Impl>();
  s->impl_->module = emitAttn(s->impl_->ctx, ast, name);
  if (!s->impl_->module || mlir::failed(mlir::verify(*s->impl_->module)))
    return rt::Status::internal("the generated attn IR does not verify");
  mlir::PassManager pm(&s->impl_->ctx);
  pm.addPass(mlir::createCanonicalizerPass());
  pm.addPass(mlir::createCSEPass());
  if (mlir::failed(pm.run(*s->impl_->module)))
    return rt::Status::internal("canonicalization failed");
  for (const Variant &v : ast.variants)
    s->impl_->names.push_back(v.name);
  out = std::move(s);
  return rt::Status::ok();
}

const std::vector<std::string> &Session::variants() const {
  return impl_->names;
}

rt::Status Session::info(const std::string &variant,
                         rt::VariantInfo &out) const {
  auto v = impl_->find(variant);
  if (!v)
    return rt::Status::notFound("no variant named '" + variant + "'");
  return rt::VariantInfo::parse(printVariantInfo(v, analyzeMask(v)), out);
}

rt::Status Session::compileCpu(const std::string &variant,
                               const rt::KernelSpec &spec,
                               std::unique_ptr<rt::CpuKernel> &out) const {
  auto v = impl_->find(variant);
  if (!v)
    return rt::Status::notFound("no variant named '" + variant + "'");
  return compileForCpu(v, spec, out);
}

rt::Status Session::compileGpu(const std::string &variant,
                               const rt::KernelSpec &spec,
                               const std::string &target,
                               rt::GpuKernelImage &out) const {
  auto v = impl_->find(variant);
  if (!v)
    return rt::Status::notFound("no variant named '" + variant + "'");
  return compileForGpu(v, spec, target, out);
}

rt::Status Session::countTiles(const std::string &variant,
                               const rt::KernelSpec &spec, int64_t heads,
                               int64_t qLen, const std::vector<int32_t> &kvLen,
                               const std::vector<int32_t> &qPos0,
                               const std::map<std::string, int64_t> &scalars,
                               std::array<int64_t, 3> &counts) const {
  auto v = impl_->find(variant);
  if (!v)
    return rt::Status::notFound("no variant named '" + variant + "'");
  MaskAnalysis m = analyzeMask(v);
  if (m.kind == rt::MaskKind::Data)
    return rt::Status::invalidArgument(
        "variant '" + variant + "' has a data-dependent mask: count the "
        "tiles of its BlockMask instead");
  counts = {0, 0, 0};
  for (size_t b = 0; b < kvLen.size(); ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t qt = 0; qt * spec.blockM < qLen; ++qt) {
        int64_t qlo = qPos0[b] + qt * spec.blockM;
        int64_t qhi = qPos0[b] + std::min(qLen, (qt + 1) * spec.blockM) - 1;
        for (int64_t kt = 0; kt * spec.blockN < kvLen[b]; ++kt) {
          int64_t klo = kt * spec.blockN;
          int64_t khi = std::min<int64_t>(kvLen[b], klo + spec.blockN) - 1;
          counts[classifyTile(m, scalars, int64_t(b), h, qlo, qhi, klo, khi)]++;
        }
      }
  return rt::Status::ok();
}

} // namespace attnc
