// Data-parallel training across real processes, built twice: `mpi_data_parallel` (ref and cpu
// ranks under `mpirun -np 2`, tests/CMakeLists.txt) and `nccl_data_parallel` (one GPU per rank,
// started by tests/distributed/run_nccl_test.sh). Each rank trains on its share of a global batch
// with TrainOptions::data_parallel and must match, step for step, one program that sees the
// whole batch in this same process; the ranks' parameters must stay bitwise equal. Every rank
// runs every test and makes the same collectives in the same order, so checks use EXPECT (an
// ASSERT would leave a rank behind in a collective).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "distributed/communicator.h"
#include "ir/graph.h"
#include "tensorgrad/distributed.h"
#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

/// Rows [r·rows/size, (r+1)·rows/size) of a row-major [rows, width] batch: this rank's share.
template <class T>
std::vector<T> my_rows(const std::vector<T>& all, int64_t width) {
  const tg::distributed::World& w = tg::distributed::world();
  const auto share = static_cast<int64_t>(all.size()) / width / w.size;
  const auto first = all.begin() + w.rank * share * width;
  return std::vector<T>(first, first + share * width);
}

/// Whether every rank holds exactly these parameters (a hash of their bytes, gathered).
bool same_on_every_rank(const tg::Program& p) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& [name, t] : p.download_params()) {
    const auto* bytes = static_cast<const uint8_t*>(t.data());
    for (size_t i = 0; i < static_cast<size_t>(t.numel()) * sizeof(float); ++i)
      h = (h ^ bytes[i]) * 1099511628211ull;
  }
  tg::dist::Communicator& comm = *tg::dist::world();
  std::vector<uint64_t> all(static_cast<size_t>(comm.size()));
  comm.all_gather_bytes(&h, all.data(), sizeof h);
  return std::all_of(all.begin(), all.end(), [&](uint64_t x) { return x == all[0]; });
}

#ifndef TG_DP_ENGINE
#error "define TG_DP_ENGINE as \"mpi\" or \"nccl\""
#endif

/// MPI sums host memory (ref and cpu programs); NCCL, this rank's GPU. The test parameters are
/// made before main() joins the ranks, so "this rank's GPU" is cuda:-1 until device() resolves it.
std::vector<tg::Device> rank_devices() {
  if (std::string(TG_DP_ENGINE) == "nccl") return {tg::Device::cuda(-1)};
  return {tg::Device::ref(), tg::Device::cpu()};
}
tg::Device device(tg::Device d) {
  if (d.kind == tg::Device::Kind::kCuda && d.index < 0) d.index = tg::distributed::world().local_rank;
  return d;
}

struct Mlp : tg::Module {
  tg::nn::Mlp net{*this, "net", {6, 32, 32, 3}};
};

class DataParallel : public ::testing::TestWithParam<tg::Device> {};

// 20 AdamW steps with clipping (whose norm must be the global one): the two-rank run equals the
// whole batch in one process, and with two micro-batches per rank too.
TEST_P(DataParallel, TwoRanksEqualTheWholeBatch) {
  constexpr int64_t kBatch = 32;
  const int64_t local = kBatch / tg::distributed::world().size;
  for (const int64_t micro : {1, 2}) {
    Mlp whole, shared;
    auto compile = [&](Mlp& m, int64_t rows, bool dp) {
      return tg::compile_train(m,
                               [&](tg::Tensor x, tg::Tensor y) {
                                 const tg::Tensor d = m.net(x) - y;
                                 return tg::mean(d * d);
                               },
                               {.inputs = {{"x", {rows, 6}}, {"y", {rows, 3}}},
                                .optimizer = tg::AdamW{.lr = 1e-2},
                                .clip_grad_norm = 0.5,
                                .device = device(GetParam()),
                                .micro_batches = dp ? micro : 1,
                                .data_parallel = dp});
    };
    tg::Program one = compile(whole, kBatch, false), dp = compile(shared, local, true);
    const tg::ir::Graph& g = tg::detail::compiled_graph(dp);
    const auto sums = std::count_if(g.nodes().begin(), g.nodes().end(),
                                    [](const tg::ir::Node& n) { return n.op == tg::ir::Op::kAllReduce; });
    EXPECT_GE(sums, 2) << "the loss and at least one bucket of gradients";
    for (int step = 0; step < 20; ++step) {
      const auto x = tg::testing::uniform_values(kBatch * 6, 100 + step),
                 y = tg::testing::uniform_values(kBatch * 3, 200 + step);
      const float l1 = one.step({{"x", x}, {"y", y}});
      const float l2 = dp.step({{"x", my_rows(x, 6)}, {"y", my_rows(y, 3)}});
      EXPECT_NEAR(l2, l1, 1e-5 * std::fabs(l1)) << "micro " << micro << " step " << step;
    }
    EXPECT_LT(tg::testing::param_difference(dp, one), 1e-5) << "micro " << micro;
    EXPECT_TRUE(same_on_every_rank(dp)) << "micro " << micro;
  }
}

// A transformer's gradients (GradientsOnly) after the all-reduce equal the whole batch's.
TEST_P(DataParallel, GptGradientsEqualTheWholeBatch) {
  const tg::nn::GptConfig config{.vocab = 11, .seq_len = 8, .layers = 2, .d_model = 16, .heads = 2};
  tg::nn::Gpt whole(config), shared(config);
  const int64_t local = 8 / tg::distributed::world().size;
  auto compile = [&](tg::nn::Gpt& m, int64_t rows, bool dp) {
    return tg::compile_train(
        m, [&](tg::Tensor ids, tg::Tensor t) { return m.loss(ids, t); },
        {.inputs = {{"ids", {rows, 8}, tg::DType::kI32}, {"t", {rows, 8}, tg::DType::kI32}},
         .optimizer = tg::GradientsOnly{},
         .device = device(GetParam()),
         .data_parallel = dp,
         .bucket_bytes = 4096});  // several buckets
  };
  tg::Program one = compile(whole, 8, false), dp = compile(shared, local, true);
  std::mt19937 rng(5);
  std::vector<int32_t> ids(64), targets(64);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>(rng() % 11);
    targets[i] = static_cast<int32_t>(rng() % 11);
  }
  tg::Captures g1, g2;
  const float l1 = one.step({{"ids", ids}, {"t", targets}}, {.captures = &g1});
  const float l2 = dp.step({{"ids", my_rows(ids, 8)}, {"t", my_rows(targets, 8)}}, {.captures = &g2});
  EXPECT_NEAR(l2, l1, 1e-5 * std::fabs(l1));
  for (const auto& [name, g] : g1)
    if (name.rfind("grad/", 0) == 0) {
      EXPECT_LT(tg::testing::rel_diff(g2.at(name).f32(), g.f32()), 1e-5) << name;
    }
}

INSTANTIATE_TEST_SUITE_P(Devices, DataParallel, ::testing::ValuesIn(rank_devices()), [](const auto& info) {
  return info.param.kind == tg::Device::Kind::kCuda ? std::string("cuda")
                                                    : tg::testing::device_test_name(info.param);
});

// Ranks that compile different programs would wait for each other forever in mismatched
// collectives: compile_train compares the graphs and names the rank that differs.
TEST(DataParallelErrors, RanksCompilingDifferentStepsAreNamed) {
  struct Net : tg::Module {
    explicit Net(int64_t hidden) : net(*this, "net", {4, hidden, 1}) {}
    tg::nn::Mlp net;
  };
  Net m(8 + tg::distributed::world().rank);
  std::string what;
  try {
    tg::compile_train(
        m, [&](tg::Tensor x) { return tg::mean(m.net(x)); },
        {.inputs = {{"x", {4, 4}}}, .device = device(rank_devices().back()), .data_parallel = true});
  } catch (const tg::DistributedError& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("rank 1 compiled a different training step than rank 0"), std::string::npos) << what;
}

TEST(DataParallelErrors, RanksCompileForTheirEngine) {
  Mlp m;
  const bool nccl = std::string(TG_DP_ENGINE) == "nccl";
  std::string what;
  try {
    tg::compile_train(m, [&](tg::Tensor x) { return tg::mean(m.net(x)); },
                      {.inputs = {{"x", {4, 6}}},
                       .device = nccl ? tg::Device::cpu() : tg::Device::cuda(0),
                       .data_parallel = true});
  } catch (const tg::Error& e) {
    what = e.what();
  }
  const char* expected = nccl ? "joined with NCCL on cuda:" : "joined with MPI, which sums host memory";
  EXPECT_NE(what.find(expected), std::string::npos) << what;
}

// TG_DIST_CHECK=1 compares the ranks' parameters after every step: silent while they agree,
// an error naming the rank once one of them has been changed behind the others' backs.
TEST(DataParallelCheck, RanksWhoseParametersDivergeAreNamed) {
  setenv("TG_DIST_CHECK", "1", 1);
  Mlp m;
  tg::Program p = tg::compile_train(m, [&](tg::Tensor x) { return tg::mean(m.net(x)); },
                                    {.inputs = {{"x", {4, 6}}},
                                     .optimizer = tg::SGD{.lr = 0.1},
                                     .device = device(rank_devices().back()),
                                     .data_parallel = true});
  const auto x = tg::testing::uniform_values(4 * 6, 3 + tg::distributed::world().rank);
  EXPECT_NO_THROW(p.step({{"x", x}}));
  if (tg::distributed::world().rank == 1) {
    auto params = p.download_params();
    params.at("net.layers.0.bias").f32()[0] += 1.0f;
    p.upload_params(params);
  }
  std::string what;
  try {
    p.step({{"x", x}});
  } catch (const tg::DistributedError& e) {
    what = e.what();
  }
  unsetenv("TG_DIST_CHECK");
  EXPECT_NE(what.find("after step 2 the parameters of rank 1 differ from rank 0's"), std::string::npos)
      << what;
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  tg::distributed::init({.engine = TG_DP_ENGINE});
  const int failed = RUN_ALL_TESTS();
  tg::distributed::finalize();
  return failed;
}
