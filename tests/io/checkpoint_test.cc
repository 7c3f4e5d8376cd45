// Training checkpoints (save_checkpoint / load_checkpoint): 2N steps in one run against N
// steps, a checkpoint, and N more steps in a fresh process (this test binary started again
// for its disabled child test), for every optimizer, a warmup + cosine schedule with
// clipping, and a GPT with dropout: losses and parameters must be bit-identical. Then the
// errors: another optimizer, another model, a parameters-only file, reserved metadata.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <tensorgrad/tensorgrad.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <sstream>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "test_util.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using tg::testing::message_of;

constexpr int kHalf = 4;  // N: steps before and after the checkpoint

struct Mlp : tg::Module {
  tg::nn::Linear l1{*this, "l1", 4, 16};
  tg::nn::Linear l2{*this, "l2", 16, 1};
};

struct Case {
  const char* name;
  std::function<std::unique_ptr<tg::Module>()> make;
  std::function<tg::Program(tg::Module&, tg::Device)> compile;
  std::function<tg::Feeds(int step, std::vector<float>&, std::vector<int32_t>&, std::vector<int32_t>&)> batch;
};

tg::Program compile_mlp(tg::Module& m, tg::Device d, tg::Optimizer opt, tg::Schedule schedule = {},
                        std::optional<double> clip = {}) {
  auto& mlp = static_cast<Mlp&>(m);
  return tg::compile_train(
      m,
      [&mlp](tg::Tensor x, tg::Tensor y) { return tg::mean(tg::pow(mlp.l2(tg::relu(mlp.l1(x))) - y, 2.0)); },
      {.inputs = {{"x", {8, 4}}, {"y", {8, 1}}},
       .optimizer = std::move(opt),
       .schedule = std::move(schedule),
       .clip_grad_norm = clip,
       .device = d});
}

tg::Feeds mlp_batch(int step, std::vector<float>& x, std::vector<int32_t>&, std::vector<int32_t>&) {
  x.assign(8 * 4 + 8, 0.0f);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(step));
  return {{"x", std::span<const float>(x.data(), 32)}, {"y", std::span<const float>(x.data() + 32, 8)}};
}

const tg::nn::GptConfig kGpt{
    .vocab = 16, .seq_len = 8, .layers = 2, .d_model = 32, .heads = 4, .dropout = 0.1};

std::vector<Case> cases() {
  auto mlp = [] { return std::unique_ptr<tg::Module>(new Mlp); };
  return {
      {"sgd_momentum", mlp,
       [](tg::Module& m, tg::Device d) {
         return compile_mlp(m, d,
                            tg::SGD{.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-3});
       },
       mlp_batch},
      {"sgd_nesterov", mlp,
       [](tg::Module& m, tg::Device d) {
         return compile_mlp(m, d, tg::SGD{.lr = 0.05, .momentum = 0.9, .nesterov = true});
       },
       mlp_batch},
      {"adam", mlp, [](tg::Module& m, tg::Device d) { return compile_mlp(m, d, tg::Adam{.lr = 1e-2}); },
       mlp_batch},
      {"adamw_warmup_cosine_clip", mlp,
       [](tg::Module& m, tg::Device d) {
         return compile_mlp(m, d, tg::AdamW{.lr = 1e-2, .weight_decay = 0.1},
                            tg::lr::warmup(3, tg::lr::cosine(2 * kHalf, 0.1)), 0.5);
       },
       mlp_batch},
      {"gpt_dropout", [] { return std::unique_ptr<tg::Module>(new tg::nn::Gpt(kGpt)); },
       [](tg::Module& m, tg::Device d) {
         auto& gpt = static_cast<tg::nn::Gpt&>(m);
         return tg::compile_train(
             m, [&gpt](tg::Tensor ids, tg::Tensor targets) { return gpt.loss(ids, targets); },
             {.inputs = {{"ids", {4, 8}, tg::DType::kI32}, {"targets", {4, 8}, tg::DType::kI32}},
              .optimizer = tg::AdamW{.lr = 3e-3},
              .clip_grad_norm = 1.0,
              .device = d});
       },
       [](int step, std::vector<float>&, std::vector<int32_t>& ids, std::vector<int32_t>& targets) {
         ids.resize(32);
         targets.resize(32);
         for (int i = 0; i < 32; ++i) {
           ids[static_cast<size_t>(i)] = (i * 7 + step * 3) % 16;
           targets[static_cast<size_t>(i)] = (i * 5 + step) % 16;
         }
         return tg::Feeds{{"ids", ids}, {"targets", targets}};
       }},
  };
}

const Case& case_named(const std::string& name) {
  static const std::vector<Case> all = cases();
  for (const Case& c : all)
    if (name == c.name) return c;
  throw std::runtime_error("no case " + name);
}

/// Steps [from, to) of a case; the losses and final parameters.
std::map<std::string, tg::HostTensor> steps(const Case& c, tg::Program& p, int from, int to) {
  std::vector<float> x;
  std::vector<int32_t> ids, targets;
  std::vector<float> losses;
  for (int s = from; s < to; ++s) losses.push_back(p.step(c.batch(s, x, ids, targets)));
  std::map<std::string, tg::HostTensor> out = p.download_params();
  out.emplace("__losses", tg::HostTensor::f32(losses, {static_cast<int64_t>(losses.size())}));
  return out;
}

tg::Device device_named(const std::string& d) { return d == "cuda" ? tg::Device::cuda() : tg::Device::cpu(); }

// The second half, in a process of its own: TG_CHECKPOINT_CHILD = "<case> <device> <ckpt> <out>".
TEST(Checkpoint, DISABLED_ResumeChild) {
  const char* spec = std::getenv("TG_CHECKPOINT_CHILD");
  ASSERT_NE(spec, nullptr) << "run by Checkpoint.ResumeIsBitIdentical";
  std::istringstream in(spec);
  std::string name, device, ckpt, out;
  in >> name >> device >> ckpt >> out;
  const Case& c = case_named(name);
  std::unique_ptr<tg::Module> m = c.make();
  tg::Program p = c.compile(*m, device_named(device));
  p.init_params(99);  // overwritten by the checkpoint
  const auto meta = tg::load_checkpoint(ckpt, p);
  ASSERT_EQ(meta.at("next_step"), std::to_string(kHalf));
  tg::save_safetensors(out, steps(c, p, kHalf, 2 * kHalf));
}

void run_child(const std::string& spec) {
  const std::string filter = "--gtest_filter=Checkpoint.DISABLED_ResumeChild";
  const std::string also = "--gtest_also_run_disabled_tests";
  std::string self = fs::read_symlink("/proc/self/exe").string();
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  env_strings.push_back("TG_CHECKPOINT_CHILD=" + spec);
  std::vector<char*> envp,
      argv{self.data(), const_cast<char*>(filter.c_str()), const_cast<char*>(also.c_str()), nullptr};
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  ASSERT_EQ(::posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), envp.data()), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the resumed half failed (status " << status << ")";
}

class Resume : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(Resume, IsBitIdenticalInAFreshProcess) {
  const auto& [name, device] = GetParam();
  if (device == "cuda")
    if (const std::string why = tg::testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const Case& c = case_named(name);
  const fs::path dir =
      fs::temp_directory_path() / ("tg_ckpt_" + std::to_string(::getpid()) + "_" + name + device);
  fs::create_directories(dir);
  // 2N steps without stopping.
  std::unique_ptr<tg::Module> m1 = c.make();
  tg::Program p1 = c.compile(*m1, device_named(device));
  p1.init_params(5);
  const auto whole = steps(c, p1, 0, 2 * kHalf);
  // N steps and a checkpoint; N more in a fresh process.
  std::unique_ptr<tg::Module> m2 = c.make();
  tg::Program p2 = c.compile(*m2, device_named(device));
  p2.init_params(5);
  const auto first = steps(c, p2, 0, kHalf);
  const std::string ckpt = (dir / "run.ckpt").string(), out = (dir / "second.safetensors").string();
  tg::save_checkpoint(ckpt, p2, {{"next_step", std::to_string(kHalf)}});
  run_child(name + " " + device + " " + ckpt + " " + out);
  const auto second = tg::read_safetensors(out);
  ASSERT_EQ(second.size(), whole.size());
  const auto losses = whole.at("__losses").f32();
  for (int s = 0; s < 2 * kHalf; ++s) {
    const float got = s < kHalf ? first.at("__losses").f32()[static_cast<size_t>(s)]
                                : second.at("__losses").f32()[static_cast<size_t>(s - kHalf)];
    EXPECT_EQ(std::memcmp(&got, &losses[static_cast<size_t>(s)], 4), 0)
        << "step " << s << ": " << got << " vs " << losses[static_cast<size_t>(s)];
  }
  for (const auto& [param, value] : whole) {
    if (param == "__losses") continue;
    const auto a = value.f32(), b = second.at(param).f32();
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size_bytes()), 0) << param;
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, Resume,
                         ::testing::Combine(::testing::Values("sgd_momentum", "sgd_nesterov", "adam",
                                                              "adamw_warmup_cosine_clip", "gpt_dropout"),
                                            ::testing::Values("cpu", "cuda")),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param);
                         });

TEST(Checkpoint, MismatchesAreCheckpointErrorsThatChangeNothing) {
  const fs::path dir = fs::temp_directory_path() / ("tg_ckpt_err_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string ckpt = (dir / "a.ckpt").string(), params_only = (dir / "p.safetensors").string();
  Mlp m;
  tg::Program adam = compile_mlp(m, tg::Device::cpu(), tg::Adam{.lr = 1e-2});
  steps(case_named("adam"), adam, 0, 2);
  tg::save_checkpoint(ckpt, adam, {{"epoch", "7"}});
  tg::save_safetensors(params_only, adam);

  auto expect_error = [&](tg::Program& p, const std::string& path, const std::string& needle) {
    const auto before = p.download_params();
    const tg::TrainingState state_before = p.training_state();
    const std::string msg = message_of<tg::CheckpointError>([&] { tg::load_checkpoint(path, p); });
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << "names the file: " << msg;
    const auto after = p.download_params();
    for (const auto& [name, t] : before)
      EXPECT_EQ(std::memcmp(t.data(), after.at(name).data(), static_cast<size_t>(t.numel() * 4)), 0) << name;
    EXPECT_EQ(p.training_state().steps, state_before.steps);
  };
  Mlp m2;
  tg::Program sgd = compile_mlp(m2, tg::Device::cpu(), tg::SGD{.lr = 0.1, .momentum = 0.9});
  expect_error(sgd, ckpt, "the state is of optimizer Adam(beta1=0.90000000000000002");
  Mlp m3;
  tg::Program other_beta = compile_mlp(m3, tg::Device::cpu(), tg::Adam{.lr = 1e-2, .beta2 = 0.99});
  expect_error(other_beta, ckpt, "beta2=0.98999999999999999");
  Mlp m4;
  tg::Program fresh = compile_mlp(m4, tg::Device::cpu(), tg::Adam{.lr = 1e-2});
  expect_error(fresh, params_only, "not a training checkpoint");
  struct Wider : tg::Module {
    tg::nn::Linear l1{*this, "l1", 4, 32};
    tg::nn::Linear l2{*this, "l2", 32, 1};
  } wide;
  tg::Program wide_p = tg::compile_train(
      wide, [&](tg::Tensor x, tg::Tensor y) { return tg::mean(tg::pow(wide.l2(wide.l1(x)) - y, 2.0)); },
      {.inputs = {{"x", {8, 4}}, {"y", {8, 1}}},
       .optimizer = tg::Adam{.lr = 1e-2},
       .device = tg::Device::cpu()});
  expect_error(wide_p, ckpt, "tensor 'l1.bias' is f32[16], the model's parameter is f32[32]");

  // The same optimizer with another lr loads, and the saved lr comes back with the moments.
  Mlp m5;
  tg::Program ok = compile_mlp(m5, tg::Device::cpu(), tg::Adam{.lr = 0.5});
  const auto meta = tg::load_checkpoint(ckpt, ok);
  EXPECT_EQ(meta, (std::map<std::string, std::string>{{"epoch", "7"}}));
  EXPECT_EQ(ok.lr(), 1e-2);
  EXPECT_EQ(ok.steps(), 2);
  // An inference program takes a training checkpoint's parameters and skips the rest.
  tg::Program predict = tg::compile_forward(m5, [&](tg::Tensor x) { return m5.l2(m5.l1(x)); },
                                            {.inputs = {{"x", {1, 4}}}, .device = tg::Device::cpu()});
  EXPECT_NO_THROW(tg::load_safetensors(ckpt, predict));
  // Reserved metadata keys.
  EXPECT_NE(message_of<tg::InputError>([&] {
              tg::save_checkpoint(ckpt, adam, {{"__tg.steps", "1"}});
            }).find("reserved"),
            std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
