// Optimizer trajectories against PyTorch: every optimizer, weight-decay rule, lr schedule,
// clipping, set_lr and reset_optimizer case of tests/data/optim_golden.txt (written by
// gen_optim_golden.py) is replayed for 5 steps on each device, checking the loss and every
// parameter after every step.
#include <gtest/gtest.h>
#include <tensorgrad/tensorgrad.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>
#include "test_util.h"

namespace {

constexpr int kSteps = 5;
constexpr int64_t kBatch = 5;
// |got - want| must stay below kRelTol·|want|, or below kAbsFloor for values near zero.
constexpr double kRelTol = 1e-4;
constexpr double kAbsFloor = 1e-6;

// ---- the golden file -----------------------------------------------------------------

struct Values {
  tg::Shape shape;
  std::vector<double> v;
};

struct GoldenStep {
  double loss = 0;
  std::map<std::string, Values> params;
};

struct Golden {
  Values x, y;
  std::map<std::string, Values> init;
  std::map<std::string, std::vector<GoldenStep>> cases;
};

Values read_values(std::istringstream& in, const std::string& line) {
  Values out;
  int64_t rank = -1;
  in >> rank;
  for (int64_t i = 0; i < rank; ++i) {
    int64_t d = -1;
    in >> d;
    out.shape.push_back(d);
  }
  if (!in || rank < 0) throw std::runtime_error("bad shape in: " + line.substr(0, 80));
  out.v.resize(static_cast<size_t>(tg::numel(out.shape)));
  for (double& v : out.v) in >> v;
  std::string extra;
  if (!in || (in >> extra)) throw std::runtime_error("wrong number of values in: " + line.substr(0, 80));
  return out;
}

Golden parse_golden(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw std::runtime_error("cannot open " + path + " (run tests/optim/gen_optim_golden.py)");
  Golden g;
  std::vector<GoldenStep>* current = nullptr;
  std::string line;
  while (std::getline(file, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::string kind, name;
    in >> kind;
    if (kind == "tensor" || kind == "init" || kind == "param" || kind == "case") in >> name;
    if (kind == "tensor") {
      (name == "x" ? g.x : g.y) = read_values(in, line);
    } else if (kind == "init") {
      g.init[name] = read_values(in, line);
    } else if (kind == "case") {
      if (g.cases.count(name) != 0) throw std::runtime_error("case " + name + " appears twice");
      current = &g.cases[name];
    } else if (kind == "step") {
      int step = 0;
      std::string word;
      GoldenStep s;
      in >> step >> word >> s.loss;
      if (current == nullptr || !in || word != "loss" || step != static_cast<int>(current->size()) + 1)
        throw std::runtime_error("bad step line: " + line);
      current->push_back(std::move(s));
    } else if (kind == "param") {
      if (current == nullptr || current->empty())
        throw std::runtime_error("param outside a step: " + line.substr(0, 80));
      current->back().params[name] = read_values(in, line);
    } else if (kind == "end") {
      current = nullptr;
    } else {
      throw std::runtime_error("unknown record: " + line.substr(0, 80));
    }
  }
  return g;
}

// Parsed once; a parse error fails every test that needs the file, with the reason.
const Golden& golden() {
  static const std::pair<Golden, std::string> loaded = [] {
    try {
      return std::make_pair(parse_golden(std::string(TG_TEST_DATA_DIR) + "/optim_golden.txt"), std::string());
    } catch (const std::exception& e) {
      return std::make_pair(Golden{}, std::string(e.what()));
    }
  }();
  if (!loaded.second.empty()) throw std::runtime_error(loaded.second);
  return loaded.first;
}

std::vector<float> to_f32(const std::vector<double>& v) { return {v.begin(), v.end()}; }

std::map<std::string, tg::HostTensor> to_host(const std::map<std::string, Values>& params) {
  std::map<std::string, tg::HostTensor> out;
  for (const auto& [name, p] : params) out.emplace(name, tg::HostTensor::f32(to_f32(p.v), p.shape));
  return out;
}

// ---- the model and the cases -----------------------------------------------------------

struct Net : tg::Module {
  tg::nn::Linear l1{*this, "l1", 3, 4}, l2{*this, "l2", 4, 2};
  tg::Tensor operator()(const tg::Tensor& x) const { return l2(tg::tanh(l1(x))); }
};

tg::Program compile(Net& model, const tg::Optimizer& optimizer, const tg::Schedule& schedule,
                    std::optional<double> clip, const tg::Device& device) {
  return tg::compile_train(model,
                           [&](tg::Tensor x, tg::Tensor y) {
                             tg::Tensor d = model(x) - y;
                             return tg::mean(d * d);
                           },
                           {.inputs = {{"x", {kBatch, 3}}, {"y", {kBatch, 2}}},
                            .optimizer = optimizer,
                            .schedule = schedule,
                            .clip_grad_norm = clip,
                            .device = device});
}

// Built field by field: a designated initializer that leaves out decay_filter (no default
// member initializer in optim.h) trips -Wmissing-field-initializers.
tg::AdamW adamw(double lr, double weight_decay) {
  tg::AdamW o;
  o.lr = lr;
  o.weight_decay = weight_decay;
  return o;
}

// Mirrors gen_optim_golden.py's CASES entry of the same name.
struct CaseConfig {
  std::string name;
  tg::Optimizer optimizer;
  tg::Schedule schedule;
  std::optional<double> clip;
  std::optional<std::pair<int, double>> set_lr;  // after this many steps, set_lr(this lr)
  std::optional<int> reset_after;                // after this many steps, reset_optimizer()
};

const std::vector<CaseConfig>& case_configs() {
  static const std::vector<CaseConfig> cases = [] {
    std::vector<CaseConfig> c;
    c.push_back({"sgd_plain", tg::SGD{.lr = 0.1}, {}, {}, {}, {}});
    c.push_back({"sgd_momentum", tg::SGD{.lr = 0.1, .momentum = 0.9}, {}, {}, {}, {}});
    c.push_back(
        {"sgd_momentum_dampening", tg::SGD{.lr = 0.1, .momentum = 0.9, .dampening = 0.1}, {}, {}, {}, {}});
    c.push_back({"sgd_nesterov", tg::SGD{.lr = 0.1, .momentum = 0.9, .nesterov = true}, {}, {}, {}, {}});
    c.push_back(
        {"sgd_weight_decay", tg::SGD{.lr = 0.1, .momentum = 0.5, .weight_decay = 0.2}, {}, {}, {}, {}});
    c.push_back({"adam_default", tg::Adam{}, {}, {}, {}, {}});
    c.push_back({"adam_weight_decay", tg::Adam{.lr = 0.01, .weight_decay = 0.1}, {}, {}, {}, {}});
    c.push_back(
        {"adam_betas_eps", tg::Adam{.lr = 0.02, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-3}, {}, {}, {}, {}});
    c.push_back({"adamw_weight_decay", adamw(0.01, 0.1), {}, {}, {}, {}});
    // The filter overrides the rank rule: l1.weight is rank 2 but not decayed.
    c.push_back({"adamw_decay_filter",
                 tg::AdamW{.lr = 0.01,
                           .weight_decay = 0.5,
                           .decay_filter = [](std::string_view name) { return name == "l2.weight"; }},
                 {},
                 {},
                 {},
                 {}});
    c.push_back({"adamw_clip", adamw(0.01, 0.1), {}, 0.5, {}, {}});
    c.push_back({"adam_linear", tg::Adam{.lr = 0.02}, tg::lr::linear(0.25, 1.0, 3), {}, {}, {}});
    c.push_back(
        {"sgd_momentum_cosine", tg::SGD{.lr = 0.1, .momentum = 0.9}, tg::lr::cosine(4, 0.1), {}, {}, {}});
    c.push_back({"adamw_warmup_cosine_clip",
                 adamw(0.02, 0.05),
                 tg::lr::warmup(2, tg::lr::cosine(3, 0.2)),
                 1.0,
                 {},
                 {}});
    c.push_back({"adam_step", tg::Adam{.lr = 0.02}, tg::lr::step(2, 0.5), {}, {}, {}});
    c.push_back({"sgd_multi_step", tg::SGD{.lr = 0.1}, tg::lr::multi_step({1, 3}, 0.5), {}, {}, {}});
    c.push_back({"adam_lambda",
                 tg::Adam{.lr = 0.02},
                 [](int64_t t) { return 1.0 / (1.0 + 0.5 * static_cast<double>(t)); },
                 {},
                 {},
                 {}});
    c.push_back({"adam_set_lr", tg::Adam{.lr = 0.02}, {}, {}, std::make_pair(2, 0.005), {}});
    c.push_back(
        {"sgd_momentum_set_lr", tg::SGD{.lr = 0.1, .momentum = 0.9}, {}, {}, std::make_pair(2, 0.03), {}});
    c.push_back({"adam_reset", tg::Adam{.lr = 0.02}, {}, {}, {}, 3});
    c.push_back({"sgd_momentum_reset", tg::SGD{.lr = 0.1, .momentum = 0.9}, {}, {}, {}, 2});
    return c;
  }();
  return cases;
}

// ---- comparison ------------------------------------------------------------------------

// Worst normalized error per device over the whole run, printed at exit.
std::map<std::string, double>& worst_by_device() {
  static std::map<std::string, double> worst;
  return worst;
}

class Summary : public ::testing::Environment {
 public:
  void TearDown() override {
    for (const auto& [device, err] : worst_by_device())
      std::printf("[ golden   ] %s: max relative error %.3g (limit %.0e, abs floor %.0e)\n", device.c_str(),
                  err, kRelTol, kAbsFloor);
  }
};
[[maybe_unused]] ::testing::Environment* const summary_env = ::testing::AddGlobalTestEnvironment(new Summary);

// Compares values, reports the first mismatches with their position, tracks the worst error.
class Checker {
 public:
  void check(double got, double want, const std::string& where) {
    // Relative error with the absolute floor folded in: < kRelTol iff within tolerance.
    const double err = std::abs(got - want) / std::max(std::abs(want), kAbsFloor / kRelTol);
    worst_ = std::max(worst_, std::isnan(err) ? INFINITY : err);
    if (!(err < kRelTol) && ++failures_ <= 20)
      ADD_FAILURE() << where << ": got " << got << ", PyTorch " << want << " (normalized error " << err
                    << ")";
  }
  void check_params(const std::map<std::string, tg::HostTensor>& got,
                    const std::map<std::string, Values>& want, const std::string& where) {
    ASSERT_EQ(got.size(), want.size()) << where;
    for (const auto& [name, w] : want) {
      auto it = got.find(name);
      ASSERT_NE(it, got.end()) << where << ": no parameter " << name;
      ASSERT_EQ(it->second.shape(), w.shape) << where << ": " << name;
      std::span<const float> g = it->second.f32();
      for (size_t i = 0; i < w.v.size(); ++i)
        check(g[i], w.v[i], where + " " + name + "[" + std::to_string(i) + "]");
    }
  }
  double worst() const { return worst_; }

 private:
  double worst_ = 0;
  int failures_ = 0;
};

// ---- replaying the cases ---------------------------------------------------------------

struct GoldenParam {
  std::string case_name;
  tg::Device device;
  friend std::ostream& operator<<(std::ostream& os, const GoldenParam& p) {
    return os << p.case_name << " on " << p.device.str();
  }
};

std::vector<GoldenParam> golden_params() {
  std::vector<GoldenParam> out;
  for (const tg::Device& d : {tg::Device::cpu(), tg::Device::ref(), tg::Device::cuda()})
    for (const CaseConfig& c : case_configs()) out.push_back({c.name, d});
  return out;
}

class OptimizerGolden : public ::testing::TestWithParam<GoldenParam> {};

TEST_P(OptimizerGolden, MatchesPyTorch) {
  const GoldenParam& param = GetParam();
  if (param.device.kind == tg::Device::Kind::kCuda)
    if (const std::string why = tg::testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const Golden& g = golden();
  const CaseConfig& c = *std::find_if(case_configs().begin(), case_configs().end(),
                                      [&](const CaseConfig& k) { return k.name == param.case_name; });
  auto expected = g.cases.find(c.name);
  ASSERT_NE(expected, g.cases.end()) << "case " << c.name
                                     << " is missing from the golden file; regenerate it";
  ASSERT_EQ(expected->second.size(), static_cast<size_t>(kSteps));

  Net model;  // fresh parameter storage per case and device
  tg::Program train = compile(model, c.optimizer, c.schedule, c.clip, param.device);
  train.upload_params(to_host(g.init));
  const std::string ir = train.ir();
  const std::vector<float> x = to_f32(g.x.v), y = to_f32(g.y.v);
  Checker checker;
  for (int k = 1; k <= kSteps; ++k) {
    const GoldenStep& want = expected->second[static_cast<size_t>(k - 1)];
    const std::string where = c.name + " on " + param.device.str() + ", step " + std::to_string(k);
    checker.check(train.step({{"x", x}, {"y", y}}), want.loss, where + " loss");
    checker.check_params(train.download_params(), want.params, where);
    if (c.set_lr && c.set_lr->first == k) {
      train.set_lr(c.set_lr->second);
      EXPECT_EQ(train.lr(), c.set_lr->second);
    }
    if (c.reset_after == k) {
      train.reset_optimizer();
      EXPECT_EQ(train.steps(), 0);
    }
  }
  EXPECT_EQ(train.ir(), ir) << "the program changed while stepping";  // set_lr/reset never recompile
  std::printf("[ golden   ] %s on %s: max relative error %.3g\n", c.name.c_str(), param.device.str().c_str(),
              checker.worst());
  double& worst = worst_by_device()[param.device.str()];
  worst = std::max(worst, checker.worst());
}

INSTANTIATE_TEST_SUITE_P(Cases, OptimizerGolden, ::testing::ValuesIn(golden_params()),
                         [](const ::testing::TestParamInfo<GoldenParam>& info) {
                           return info.param.case_name + "_" +
                                  tg::testing::device_test_name(info.param.device);
                         });

TEST(OptimizerGoldenFile, EveryCaseIsReplayed) {
  const Golden& g = golden();
  EXPECT_EQ(g.init.size(), 4u);
  EXPECT_EQ(g.x.shape, (tg::Shape{kBatch, 3}));
  EXPECT_EQ(g.y.shape, (tg::Shape{kBatch, 2}));
  for (const auto& [name, steps] : g.cases)
    EXPECT_TRUE(std::any_of(case_configs().begin(), case_configs().end(),
                            [&](const CaseConfig& c) { return c.name == name; }))
        << "golden case " << name << " has no configuration in this test";
  EXPECT_EQ(g.cases.size(), case_configs().size());
}

// reset_optimizer against a second program: after a reset, the next step is exactly a fresh
// program's first step from the same parameters (moments zero, bias corrections and the
// schedule back at step 0).
class ResetOptimizer : public ::testing::TestWithParam<tg::Device> {};

TEST_P(ResetOptimizer, NextStepEqualsFreshFirstStep) {
  const Golden& g = golden();
  const tg::Optimizer optimizer = adamw(0.02, 0.1);
  const tg::Schedule schedule = tg::lr::warmup(3);
  const std::vector<float> x = to_f32(g.x.v), y = to_f32(g.y.v);

  Net used_model;
  tg::Program used = compile(used_model, optimizer, schedule, {}, GetParam());
  used.upload_params(to_host(g.init));
  for (int k = 0; k < 3; ++k) used.step({{"x", x}, {"y", y}});
  used.reset_optimizer();
  EXPECT_EQ(used.steps(), 0);

  Net fresh_model;
  tg::Program fresh = compile(fresh_model, optimizer, schedule, {}, GetParam());
  fresh.upload_params(used.download_params());

  Checker checker;
  for (int k = 1; k <= 2; ++k) {
    const std::string where = GetParam().str() + ", step " + std::to_string(k) + " after the reset";
    const float used_loss = used.step({{"x", x}, {"y", y}});
    checker.check(used_loss, fresh.step({{"x", x}, {"y", y}}), where + " loss");
    std::map<std::string, Values> want;
    for (auto& [name, t] : fresh.download_params())
      want[name] = {t.shape(), {t.f32().begin(), t.f32().end()}};
    checker.check_params(used.download_params(), want, where);
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, ResetOptimizer, ::testing::Values(tg::Device::cpu(), tg::Device::ref()),
                         [](const ::testing::TestParamInfo<tg::Device>& info) { return info.param.str(); });

}  // namespace
