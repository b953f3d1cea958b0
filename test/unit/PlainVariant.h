// The modifier program of a variant with no score_mod and no mask, for
// runtime tests that need no compiler (VariantInfo::parse's text form).
#ifndef ATTNC_TEST_PLAINVARIANT_H
#define ATTNC_TEST_PLAINVARIANT_H

inline const char *kPlainVariant = R"(variant plain
mask-kind none
mask-uses
score
  yield %score
mask
  %0 = const.i1 1
  yield %0
end
)";

#endif
