// tg::state() / tg::assign(): tensors that keep their value between calls, shared by name
// between the programs of one model on one device (a prefill and a decode program share a KV
// cache), on every backend this machine has; and the errors for misuse.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

using namespace tg;

struct NoParams : Module {};

std::vector<Device> devices() { return tg::testing::all_devices(); }

class State : public ::testing::TestWithParam<Device> {};

TEST_P(State, AccumulatesAcrossCallsAndResets) {
  NoParams m;
  Program p =
      compile_forward(m,
                      [](Tensor x) {
                        Tensor acc = state("acc", {3});
                        assign(acc, acc + x);
                        return acc * 10.0;  // the old value: the assignment lands after the call's reads
                      },
                      {.inputs = {{"x", {3}}}, .device = GetParam()});
  const std::vector<float> x{1, 2, 3};
  EXPECT_EQ(p.run({{"x", x}}).f32(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(p.run({{"x", x}}).f32(), (std::vector<float>{10, 20, 30}));
  EXPECT_EQ(p.read_state("acc").f32(), (std::vector<float>{2, 4, 6}));
  p.reset_state();
  EXPECT_EQ(p.read_state("acc").f32(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(p.run({{"x", x}}).f32(), (std::vector<float>{0, 0, 0}));
}

TEST_P(State, SharedByTheProgramsOfOneModel) {
  NoParams m;
  // A "prefill" writes rows [pos, pos + 2) of a cache, a "decode" one row at pos; both read it.
  auto writer = [&](int64_t rows) {
    return compile_forward(m,
                           [](Tensor x, Tensor pos) {
                             Tensor cache = state("cache", {2, 5});
                             Tensor next = update_slice(cache, x, pos, 1);
                             assign(cache, next);
                             return next;
                           },
                           {.inputs = {{"x", {2, rows}}, {"pos", {2}, DType::kI32}}, .device = GetParam()});
  };
  Program prefill = writer(2), decode = writer(1);
  prefill.run({{"x", std::vector<float>{1, 2, 3, 4}}, {"pos", std::vector<int32_t>{0, 1}}});
  const std::vector<float> after =
      decode.run({{"x", std::vector<float>{7, 8}}, {"pos", std::vector<int32_t>{2, 3}}}).f32();
  EXPECT_EQ(after, (std::vector<float>{1, 2, 7, 0, 0, 0, 3, 4, 8, 0}));
  EXPECT_EQ(prefill.read_state("cache").f32(), after);
  // Another model has its own.
  NoParams other;
  Program fresh = compile_forward(other,
                                  [](Tensor x) {
                                    return state("cache", {2, 5}) + x;
                                  },
                                  {.inputs = {{"x", {2, 5}}}, .device = GetParam()});
  EXPECT_EQ(fresh.run({{"x", std::vector<float>(10, 0.5f)}}).f32(), std::vector<float>(10, 0.5f));
}

TEST_P(State, AnOffsetPastTheCacheIsAnInputError) {
  NoParams m;
  Program p = compile_forward(m,
                              [](Tensor x, Tensor pos) {
                                Tensor cache = state("cache", {1, 4});
                                assign(cache, update_slice(cache, x, pos, 1));
                                return sum(cache);
                              },
                              {.inputs = {{"x", {1, 2}}, {"pos", {}, DType::kI32}}, .device = GetParam()});
  EXPECT_NO_THROW(p.run({{"x", std::vector<float>{1, 2}}, {"pos", std::vector<int32_t>{2}}}));
  const std::string msg = tg::testing::message_of<InputError>([&] {
    p.run({{"x", std::vector<float>{1, 2}}, {"pos", std::vector<int32_t>{3}}});
  });
  EXPECT_NE(msg.find("update_slice"), std::string::npos) << msg;
}

INSTANTIATE_TEST_SUITE_P(Devices, State, ::testing::ValuesIn(devices()),
                         [](const auto& info) { return tg::testing::device_test_name(info.param); });

TEST(StateErrors, MisuseIsReportedWhereItHappens) {
  NoParams m;
  auto compile = [&](std::function<Tensor(Tensor)> fn) {
    return compile_forward(m, fn, {.inputs = {{"x", {3}}}, .device = Device::cpu()});
  };
  auto message = [&](std::function<Tensor(Tensor)> fn) {
    return tg::testing::message_of<ShapeError>([&] { compile(fn); });
  };
  EXPECT_NE(message([](Tensor x) {
              assign(x, x);
              return x;
            }).find("not a tensor made by tg::state()"),
            std::string::npos);
  EXPECT_NE(message([](Tensor x) {
              Tensor s = state("s", {3});
              assign(s, x);
              assign(s, x + 1.0);
              return x;
            }).find("assigned twice"),
            std::string::npos);
  EXPECT_NE(message([](Tensor x) {
              Tensor s = state("s", {3});
              assign(s, sum(x));
              return x;
            }).find("'s' is [3]"),
            std::string::npos);
  EXPECT_NE(message([](Tensor x) {
              state("s", {3});
              return state("s", {4}) + x;
            }).find("declared as [3]"),
            std::string::npos);
  // The same name in another program of the model must keep its shape.
  compile([](Tensor x) { return state("kept", {3}) + x; });
  const std::string msg = tg::testing::message_of<InputError>([&] {
    compile_forward(m, [](Tensor x) { return sum(state("kept", {2})) + x; },
                    {.inputs = {{"x", {3}}}, .device = Device::cpu()});
  });
  EXPECT_NE(msg.find("'kept' is [3]"), std::string::npos) << msg;
}

}  // namespace
