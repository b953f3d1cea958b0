//===- BackwardCall.cpp - Validating a backward call ----------------------===//
#include "BackwardCall.h"

#include <fmt/format.h>

namespace attnc::rt::detail {

namespace {
Status checkGradView(const TensorView &t, const char *name,
                     const std::vector<int64_t> &shape, const DType *want) {
  if (want && t.dtype != *want)
    return Status::invalidArgument(fmt::format(
        "{}: expected dtype {} (the kernel's), got {}", name, dtypeName(*want),
        dtypeName(t.dtype)));
  if (!isFloatDType(t.dtype))
    return Status::invalidArgument(fmt::format(
        "{}: expected dtype f32, f16 or bf16, got {}", name, dtypeName(t.dtype)));
  if (!t.data)
    return Status::invalidArgument(fmt::format("{}: is null", name));
  return checkShape(t, name, shape);
}
} // namespace

Status checkBackwardCall(const VariantInfo &v, const KernelSpec &spec,
                         const BackwardArgs &a, Problem &p,
                         const DType *gradDType) {
  const AttentionArgs &f = a.forward;
  if (Status s = resolveProblem(v, &spec, f, p); !s)
    return s;
  if (!p.hasLse)
    return Status::invalidArgument(
        "lse: the backward needs the forward's LSE ([B, Hq, Lq] f32); pass "
        "an lse view to the forward call and then here");
  if (p.pages)
    return Status::invalidArgument(
        "backward: paged K/V (pages) is not supported; pass contiguous k "
        "and v");
  if (f.blockMask)
    return Status::invalidArgument(
        "backward: blockMask is not taken; the backward builds its own");
  if (!f.out.data)
    return Status::invalidArgument(
        "out: the backward needs the forward's O (rowsum(dO * O))");
  if (Status s = checkCaptureValues(v, p); !s)
    return s;
  if (Status s = checkTensor(a.dOut, "dOut", spec.dtype,
                             {p.B, p.Hq, p.Lq, p.Dv});
      !s)
    return s;
  if (!a.dOut.data)
    return Status::invalidArgument("dOut: is null");
  if (Status s = checkGradView(a.dq, "dq", f.q.shape, gradDType); !s)
    return s;
  if (Status s = checkGradView(a.dk, "dk", f.k.shape, gradDType); !s)
    return s;
  if (Status s = checkGradView(a.dv, "dv", f.v.shape, gradDType); !s)
    return s;
  if (a.dLse.data)
    if (Status s = checkTensor(a.dLse, "dLse", DType::F32, {p.B, p.Hq, p.Lq});
        !s)
      return s;
  std::vector<std::pair<const TensorView *, std::string>> read = {
      {&f.q, "q"},   {&f.k, "k"},   {&f.v, "v"},
      {&f.out, "out"}, {&f.lse, "lse"}, {&a.dOut, "dOut"}};
  if (a.dLse.data)
    read.emplace_back(&a.dLse, "dLse");
  for (const auto &[name, t] : f.tensors)
    read.emplace_back(&t, name);
  return checkWritesDisjoint({{&a.dq, "dq"}, {&a.dk, "dk"}, {&a.dv, "dv"}},
                             read);
}

int64_t paramGradientLayout(const ParamGradients &layout,
                            std::vector<int64_t> &base) {
  base.clear();
  int64_t n = 0;
  for (const std::vector<double> &g : layout) {
    base.push_back(n);
    n += static_cast<int64_t>(g.size());
  }
  return n;
}

} // namespace attnc::rt::detail
