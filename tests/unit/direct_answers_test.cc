// Group-by's direct answers (server/engine/grouping/direct_answers.h): the
// arrays each op reads, and the answers from only those arrays, with and
// without a NaN or an infinity in some group.
#include "server/engine/grouping/direct_answers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace tally::grouping {
namespace {

OpSpec Op(OpKind k) { return OpSpec{.kind = k}; }

TEST(ArraysFor, EachOpReadsItsOwnArray) {
  const KeyedArrays sum = ArraysFor({Op(OpKind::kSum)});
  EXPECT_TRUE(sum.sum);
  EXPECT_FALSE(sum.count || sum.min || sum.max || sum.mean);
  const KeyedArrays some = ArraysFor({Op(OpKind::kNanMean), Op(OpKind::kMax), Op(OpKind::kNanCount)});
  EXPECT_TRUE(some.mean && some.max && some.count);
  EXPECT_FALSE(some.sum || some.min);
  const KeyedArrays all = ArraysFor({Op(OpKind::kNanSum), Op(OpKind::kCount), Op(OpKind::kNanMin),
                                     Op(OpKind::kMax), Op(OpKind::kMean)});
  EXPECT_TRUE(all.sum && all.count && all.min && all.max && all.mean);
}

// Three groups as a pass gives them: only the arrays `arrays` names, plus
// (`special`) the NaN and infinity counts, counts and sums.
KeyedSums Groups(const KeyedArrays& arrays, bool special) {
  KeyedSums k;
  k.groups = 3;
  k.starts = {0, 2, 5, 6};
  if (arrays.count || special) k.count = {2, 3, 1};
  if (arrays.sum || special) k.sum = {3.0, -1.5, 7.0};
  if (arrays.min) k.min = {1.0, -2.0, 7.0};
  if (arrays.max) k.max = {2.0, 0.5, 7.0};
  if (arrays.mean) k.mean = {1.5, -0.5, 7.0};
  if (special) {
    k.nan = {0, 1, 0};         // group 1 holds a NaN
    k.infinities = {0, 0, 1};  // group 2 a +inf
  }
  return k;
}

TEST(DirectAnswers, AnswerFromTheArraysTheirOpsRead) {
  const std::vector<OpSpec> ops = {Op(OpKind::kMean), Op(OpKind::kMax)};
  std::optional<std::vector<OpValues>> clean = DirectAnswers(ops, DType::kFloat32, Groups(ArraysFor(ops), false));
  ASSERT_TRUE(clean.has_value());
  EXPECT_EQ(std::get<std::vector<double>>((*clean)[0]), (std::vector<double>{1.5, -0.5, 7.0}));
  EXPECT_EQ(std::get<std::vector<double>>((*clean)[1]), (std::vector<double>{2.0, 0.5, 7.0}));
  // With a NaN and an infinity the answers are made group by group from
  // the counts and sums, which then come too.
  const std::vector<OpSpec> nan_ops = {Op(OpKind::kNanMean), Op(OpKind::kMean), Op(OpKind::kMax)};
  std::optional<std::vector<OpValues>> special =
      DirectAnswers(nan_ops, DType::kFloat32, Groups(ArraysFor(nan_ops), true));
  ASSERT_TRUE(special.has_value());
  const auto& nanmean = std::get<std::vector<double>>((*special)[0]);
  const auto& mean = std::get<std::vector<double>>((*special)[1]);
  EXPECT_EQ(nanmean[0], 1.5);
  EXPECT_EQ(nanmean[1], -1.5 / 2.0);  // two numbers and a NaN
  EXPECT_EQ(nanmean[2], std::numeric_limits<double>::infinity());
  EXPECT_EQ(mean[0], 1.5);
  EXPECT_TRUE(std::isnan(mean[1]));
  EXPECT_EQ(mean[2], std::numeric_limits<double>::infinity());
  const auto& max = std::get<std::vector<double>>((*special)[2]);
  EXPECT_EQ(max[0], 2.0);
  EXPECT_TRUE(std::isnan(max[1]));  // numpy's max propagates the NaN
  EXPECT_EQ(max[2], 7.0);
}

}  // namespace
}  // namespace tally::grouping
