// The stride arithmetic of ir/strides.h: which reshapes are views and with what strides.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "ir/strides.h"

namespace {

using tg::contiguous_strides;
using tg::is_contiguous_strides;
using tg::reshaped_strides;
using Strides = std::vector<int64_t>;

TEST(Strides, ContiguousAndTheDensityTest) {
  EXPECT_EQ(contiguous_strides({2, 3, 4}), (Strides{12, 4, 1}));
  EXPECT_EQ(contiguous_strides({}), Strides{});
  EXPECT_TRUE(is_contiguous_strides({12, 4, 1}, {2, 3, 4}));
  EXPECT_TRUE(is_contiguous_strides({99, 4, 1}, {1, 3, 4}));  // an extent-1 axis is never stepped
  EXPECT_FALSE(is_contiguous_strides({1, 2}, {2, 3}));
}

TEST(Strides, ReshapeSplitsAndMergesRunsLikeView) {
  EXPECT_EQ(reshaped_strides({2, 3, 4}, {12, 4, 1}, {6, 4}), (Strides{4, 1}));
  EXPECT_EQ(reshaped_strides({6, 4}, {4, 1}, {2, 3, 4}), (Strides{12, 4, 1}));
  // A column slice of a [6, 8] matrix: rows stay 8 apart, so the rows can be split but the
  // columns cannot merge with them.
  EXPECT_EQ(reshaped_strides({6, 4}, {8, 1}, {2, 3, 4}), (Strides{24, 8, 1}));
  EXPECT_EQ(reshaped_strides({6, 4}, {8, 1}, {24}), std::nullopt);
  // A transpose cannot be flattened.
  EXPECT_EQ(reshaped_strides({3, 2}, {1, 3}, {6}), std::nullopt);
  // A broadcast stays one (stride 0).
  EXPECT_EQ(reshaped_strides({4}, {0}, {2, 2}), (Strides{0, 0}));
}

TEST(Strides, ScalarsAndSingleElementsReshapeFreely) {
  // A loss (shape []) seen as [1, 1, 1] before a broadcast, and back: no copy.
  const auto up = reshaped_strides({}, {}, {1, 1, 1});
  ASSERT_TRUE(up.has_value());
  EXPECT_EQ(up->size(), 3u);
  EXPECT_EQ(reshaped_strides({1, 1}, {5, 7}, {}), Strides{});
  EXPECT_TRUE(reshaped_strides({1}, {3}, {1, 1}).has_value());
  // No elements: any layout.
  EXPECT_TRUE(reshaped_strides({0, 3}, {3, 1}, {3, 0}).has_value());
}

}  // namespace
