// Initialisers: each draws from the distribution its formula says (moments and bounds
// checked on large samples), per-parameter streams are independent of other parameters,
// and callables receive the parameter's shape.
#include <gtest/gtest.h>

#include <cmath>

#include "nn/init.h"

namespace {

using tg::detail::fill_init;

struct Moments {
  double mean = 0, std = 0, min = 1e300, max = -1e300;
};

Moments moments(const tg::Init& init, const tg::Shape& shape, uint64_t seed = 1) {
  std::vector<float> v(static_cast<size_t>(tg::numel(shape)));
  fill_init(init, v, shape, seed, "w");
  Moments m;
  for (float x : v) {
    m.mean += x / static_cast<double>(v.size());
    m.min = std::min(m.min, static_cast<double>(x));
    m.max = std::max(m.max, static_cast<double>(x));
  }
  for (float x : v) m.std += (x - m.mean) * (x - m.mean) / static_cast<double>(v.size());
  m.std = std::sqrt(m.std);
  return m;
}

TEST(Init, DistributionsFollowTheirFormulas) {
  const tg::Shape shape{400, 250};  // fan_in 250, fan_out 400; 100k samples
  Moments n = moments(tg::init::normal(0.5, 2.0), shape);
  EXPECT_NEAR(n.mean, 2.0, 0.01);
  EXPECT_NEAR(n.std, 0.5, 0.005);

  Moments u = moments(tg::init::uniform(-3, 1), shape);
  EXPECT_GE(u.min, -3.0);
  EXPECT_LT(u.max, 1.0);
  EXPECT_NEAR(u.std, 4 / std::sqrt(12.0), 0.01);

  Moments kn = moments(tg::init::kaiming_normal(), shape);
  EXPECT_NEAR(kn.std, std::sqrt(2.0 / 250), 0.001);
  Moments ku = moments(tg::init::kaiming_uniform(), shape);
  const double kbound = std::sqrt(2.0) * std::sqrt(3.0 / 250);
  EXPECT_LE(ku.max, kbound);
  EXPECT_GT(ku.max, 0.99 * kbound);
  EXPECT_NEAR(ku.std, kbound / std::sqrt(3.0), 0.001);

  Moments xn = moments(tg::init::xavier_normal(), shape);
  EXPECT_NEAR(xn.std, std::sqrt(2.0 / 650), 0.001);
  Moments xu = moments(tg::init::xavier_uniform(2.0), shape);
  EXPECT_NEAR(xu.max, 2.0 * std::sqrt(6.0 / 650), 0.002);

  Moments c = moments(tg::init::constant(0.25), {7});
  EXPECT_EQ(c.min, 0.25);
  EXPECT_EQ(c.max, 0.25);
}

TEST(Init, StreamsAreSeededPerParameter) {
  std::vector<float> a(16), b(16), c(16), d(16);
  fill_init(tg::init::normal(), a, {16}, 3, "l1.weight");
  fill_init(tg::init::normal(), b, {16}, 3, "l1.weight");
  fill_init(tg::init::normal(), c, {16}, 3, "l2.weight");
  fill_init(tg::init::normal(), d, {16}, 4, "l1.weight");
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
}

TEST(Init, CallableReceivesShapeAndFills) {
  tg::Shape seen;
  std::vector<float> v(6);
  fill_init(tg::init::callable([&](std::span<float> out, const tg::Shape& s, uint64_t) {
              seen = s;
              for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(i);
            }),
            v, {2, 3}, 0, "p");
  EXPECT_EQ(seen, (tg::Shape{2, 3}));
  EXPECT_EQ(v[5], 5.0f);
}

}  // namespace
