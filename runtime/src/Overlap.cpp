//===- Overlap.cpp - Whether strided views share memory -------------------===//
//
// A kernel writes its outputs while it reads its inputs, in tiles and in
// parallel: an output that shares a byte with an input (out=k, a slice
// overlapping q) or with itself (a broadcast out) gives a wrong answer, so
// calls refuse it. Two views share memory when some element of one and some
// element of the other cover a common byte:
//
//   baseA + sum_k i_k a_k + x  ==  baseB + sum_k j_k b_k + y,
//   0 <= i_k < nA_k, 0 <= j_k < nB_k, 0 <= x < esA, 0 <= y < esB
//
// (strides in bytes). That is one linear equation with bounded integer
// unknowns; a depth-first search over the coefficients from the largest
// down, pruned by what the remaining terms can still reach, decides it
// exactly for the layouts arrays have (each stride nests the ones below it,
// so there is one candidate per level). Beyond a node budget it answers
// "shares", which refuses a call rather than risking a race.
//
//===----------------------------------------------------------------------===//
#include "attnc/runtime/TensorView.h"

#include <fmt/format.h>

#include <algorithm>

namespace attnc::rt {

namespace {

using Wide = __int128;

/// c * r for r in [lo, hi]: one unknown of the equation.
struct Term {
  Wide c, lo, hi;
};

Wide floorDiv(Wide a, Wide b) {
  Wide q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
Wide ceilDiv(Wide a, Wide b) { return -floorDiv(-a, b); }

/// Whether sum_k terms[k].c * r_k == target has a solution with every r_k
/// in its range; terms sorted by c descending, c > 0. `budget` bounds the
/// search (an exhausted budget answers true).
bool solvable(const std::vector<Term> &terms, const std::vector<Wide> &restLo,
              const std::vector<Wide> &restHi, size_t k, Wide target,
              int64_t &budget) {
  if (k == terms.size())
    return target == 0;
  if (--budget < 0)
    return true;
  const Term &t = terms[k];
  // target - c*r must stay within what terms k+1.. can reach.
  Wide lo = std::max(t.lo, ceilDiv(target - restHi[k + 1], t.c));
  Wide hi = std::min(t.hi, floorDiv(target - restLo[k + 1], t.c));
  for (Wide r = lo; r <= hi; ++r)
    if (solvable(terms, restLo, restHi, k + 1, target - t.c * r, budget))
      return true;
  return false;
}

bool isEmpty(const TensorView &t) {
  for (int64_t n : t.shape)
    if (n == 0)
      return true;
  return false;
}

/// Adds view `t`'s index terms, with sign `sign` (+1 for A, -1 for B).
void addTerms(const TensorView &t, int sign, std::vector<Term> &terms) {
  Wide es = dtypeSize(t.dtype);
  for (size_t d = 0; d < t.shape.size(); ++d) {
    if (t.shape[d] <= 1 || t.strides[d] == 0)
      continue;
    Wide c = Wide(t.strides[d]) * es;
    Wide top = t.shape[d] - 1;
    if (c < 0) {
      c = -c;
      terms.push_back(sign > 0 ? Term{c, -top, 0} : Term{c, 0, top});
    } else {
      terms.push_back(sign > 0 ? Term{c, 0, top} : Term{c, -top, 0});
    }
  }
}

/// The bytes [first, last] a view's elements span (strides of any sign).
std::pair<Wide, Wide> byteExtent(const TensorView &t) {
  Wide es = dtypeSize(t.dtype), lo = 0, hi = 0;
  for (size_t d = 0; d < t.shape.size(); ++d) {
    Wide reach = Wide(t.shape[d] - 1) * t.strides[d] * es;
    (reach < 0 ? lo : hi) += reach;
  }
  Wide base = Wide(reinterpret_cast<intptr_t>(t.data));
  return {base + lo, base + hi + es - 1};
}

/// Whether sum terms == target is solvable, exactly up to the budget.
bool anySolution(std::vector<Term> terms, Wide target) {
  std::sort(terms.begin(), terms.end(),
            [](const Term &a, const Term &b) { return a.c > b.c; });
  // Equal coefficients are one unknown over the summed range.
  std::vector<Term> merged;
  for (const Term &t : terms) {
    if (!merged.empty() && merged.back().c == t.c) {
      merged.back().lo += t.lo;
      merged.back().hi += t.hi;
    } else {
      merged.push_back(t);
    }
  }
  std::vector<Wide> restLo(merged.size() + 1, 0), restHi(merged.size() + 1, 0);
  for (size_t k = merged.size(); k-- > 0;) {
    restLo[k] = restLo[k + 1] + merged[k].c * merged[k].lo;
    restHi[k] = restHi[k + 1] + merged[k].c * merged[k].hi;
  }
  if (target < restLo[0] || target > restHi[0])
    return false;
  int64_t budget = 100000;
  return solvable(merged, restLo, restHi, 0, target, budget);
}

} // namespace

bool sharesMemory(const TensorView &a, const TensorView &b) {
  if (!a.data || !b.data || isEmpty(a) || isEmpty(b))
    return false;
  // Disjoint spans (separate arrays: every call's common case) decide it
  // without the search.
  auto [aFirst, aLast] = byteExtent(a);
  auto [bFirst, bLast] = byteExtent(b);
  if (aLast < bFirst || bLast < aFirst)
    return false;
  // A's index terms and byte offset x, minus B's and y, equal baseB - baseA.
  std::vector<Term> terms;
  addTerms(a, +1, terms);
  addTerms(b, -1, terms);
  terms.push_back(Term{1, -(Wide(dtypeSize(b.dtype)) - 1),
                       Wide(dtypeSize(a.dtype)) - 1});
  Wide target = Wide(reinterpret_cast<intptr_t>(b.data)) -
                Wide(reinterpret_cast<intptr_t>(a.data));
  return anySolution(std::move(terms), target);
}

bool hasInternalOverlap(const TensorView &t) {
  if (!t.data || isEmpty(t))
    return false;
  // Two distinct indices i != j at one byte: sum (i_k - j_k) s_k + x - y
  // == 0 with some i_k != j_k. Nested strides (each at least the extent of
  // the smaller ones) cannot; anything else, a zero stride included, is
  // refused (a written view must be a plain layout).
  std::vector<std::pair<int64_t, int64_t>> dims; // (stride, size)
  for (size_t d = 0; d < t.shape.size(); ++d)
    if (t.shape[d] > 1)
      dims.emplace_back(t.strides[d] < 0 ? -t.strides[d] : t.strides[d],
                        t.shape[d]);
  std::sort(dims.begin(), dims.end());
  Wide extent = 1; // elements spanned by the dimensions so far
  for (auto [stride, size] : dims) {
    if (Wide(stride) < extent)
      return true;
    extent = Wide(stride) * (size - 1) + extent;
  }
  return false;
}

Status checkWritesDisjoint(
    const std::vector<std::pair<const TensorView *, std::string>> &written,
    const std::vector<std::pair<const TensorView *, std::string>> &read) {
  for (size_t i = 0; i < written.size(); ++i) {
    const auto &[w, wn] = written[i];
    if (hasInternalOverlap(*w))
      return Status::invalidArgument(fmt::format(
          "'{}' has elements that share memory (shape {}, strides {}): an "
          "output must not be a broadcast or overlapping view",
          wn, TensorView::formatDims(w->shape),
          TensorView::formatDims(w->strides)));
    for (size_t j = 0; j < i; ++j)
      if (sharesMemory(*w, *written[j].first))
        return Status::invalidArgument(fmt::format(
            "'{}' shares memory with '{}': outputs must not overlap", wn,
            written[j].second));
    for (const auto &[r, rn] : read)
      if (sharesMemory(*w, *r))
        return Status::invalidArgument(fmt::format(
            "'{}' shares memory with the input '{}': an output must not "
            "overlap any input (the kernel reads its inputs while it writes)",
            wn, rn));
  }
  return Status::ok();
}

} // namespace attnc::rt
