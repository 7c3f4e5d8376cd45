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

#include "autograd/grad.h"
#include "backend/backend.h"
#include "distributed/communicator.h"
#include "ir/api_util.h"
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

constexpr int64_t kBatch = 32;  // the global batch of the Mlp tests

/// The Mlp's mean squared error on `rows` rows, trained with `options` (its inputs set here).
tg::Program compile_mse(Mlp& m, int64_t rows, tg::TrainOptions options) {
  options.inputs = {{"x", {rows, 6}}, {"y", {rows, 3}}};
  return tg::compile_train(
      m,
      [&m](tg::Tensor x, tg::Tensor y) {
        const tg::Tensor d = m.net(x) - y;
        return tg::mean(d * d);
      },
      std::move(options));
}

/// `steps` steps of `one` over the whole batch and of `dp` over this rank's rows of it, on the
/// same data each step: their losses agree to `rel`.
void expect_same_losses(tg::Program& one, tg::Program& dp, int steps, double rel, const std::string& where) {
  for (int step = 0; step < steps; ++step) {
    const auto x = tg::testing::uniform_values(kBatch * 6, 100 + step),
               y = tg::testing::uniform_values(kBatch * 3, 200 + step);
    const float l1 = one.step({{"x", x}, {"y", y}});
    const float l2 = dp.step({{"x", my_rows(x, 6)}, {"y", my_rows(y, 3)}});
    EXPECT_NEAR(l2, l1, rel * std::fabs(l1)) << where << " step " << step;
  }
}

// 20 AdamW steps with clipping (whose norm must be the global one): the two-rank run equals the
// whole batch in one process, and with two micro-batches per rank too.
TEST_P(DataParallel, TwoRanksEqualTheWholeBatch) {
  const int64_t local = kBatch / tg::distributed::world().size;
  for (const int64_t micro : {1, 2}) {
    Mlp whole, shared;
    auto compile = [&](Mlp& m, int64_t rows, bool dp) {
      return compile_mse(m, rows,
                         {.optimizer = tg::AdamW{.lr = 1e-2},
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
    expect_same_losses(one, dp, 20, 1e-5, "micro " + std::to_string(micro));
    EXPECT_LT(tg::testing::param_difference(dp, one), 1e-5) << "micro " << micro;
    EXPECT_TRUE(same_on_every_rank(dp)) << "micro " << micro;
  }
}

// f16 mixed precision with its default loss scaling, plain and with ZeRO-1: each rank's
// gradients are unscaled after (or, sharded, before) the collectives, and the steps still
// equal the whole batch's. A rank's half-batch mean doubles each gradient entering a
// product, an exact power of two, so both runs round the same values to f16; what is left
// is f32 summation order, and the rare f16 rounding it flips: a looser bound than f32's.
TEST_P(DataParallel, F16WithLossScalingEqualsTheWholeBatch) {
  const int64_t local = kBatch / tg::distributed::world().size;
  for (const bool zero : {false, true}) {
    Mlp whole, shared;
    auto compile = [&](Mlp& m, int64_t rows, bool dp) {
      return compile_mse(m, rows,
                         {.optimizer = tg::AdamW{.lr = 1e-2},
                          .clip_grad_norm = 0.5,
                          .device = device(GetParam()),
                          .precision = tg::Precision::kF16,
                          .data_parallel = dp,
                          .shard_optimizer = dp && zero});
    };
    tg::Program one = compile(whole, kBatch, false), dp = compile(shared, local, true);
    expect_same_losses(one, dp, 10, 1e-4, zero ? "zero" : "plain");
    EXPECT_EQ(dp.loss_scale(), one.loss_scale()) << "zero " << zero;
    EXPECT_EQ(dp.skipped_steps(), one.skipped_steps()) << "zero " << zero;
    EXPECT_LT(tg::testing::param_difference(dp, one), 1e-4) << "zero " << zero;
    EXPECT_TRUE(same_on_every_rank(dp)) << "zero " << zero;
  }
}

// Overflowing steps under data parallelism, plain and ZeRO-1: a scale of 2^40 overflows f16
// (one rank's gradients are not the whole batch's, so no single-process run to compare with);
// every rank skips the same steps and backs off alike, and the parameters stay equal.
TEST_P(DataParallel, F16OverflowsAreSkippedOnEveryRank) {
  for (const bool zero : {false, true}) {
    Mlp shared;
    tg::Program dp = compile_mse(shared, kBatch / tg::distributed::world().size,
                                 {.optimizer = tg::AdamW{.lr = 1e-2},
                                  .device = device(GetParam()),
                                  .precision = tg::Precision::kF16,
                                  .loss_scaling = tg::LossScaling{.init_scale = 0x1p40},
                                  .data_parallel = true,
                                  .shard_optimizer = zero});
    for (int step = 0; step < 30; ++step) {
      const auto x = tg::testing::uniform_values(kBatch * 6, 100 + step),
                 y = tg::testing::uniform_values(kBatch * 3, 200 + step);
      (void)dp.step({{"x", my_rows(x, 6)}, {"y", my_rows(y, 3)}});
    }
    EXPECT_GT(dp.skipped_steps(), 0) << "zero " << zero;
    EXPECT_GT(dp.steps(), 0) << "zero " << zero;
    EXPECT_LT(dp.loss_scale(), 0x1p40) << "zero " << zero;
    EXPECT_TRUE(same_on_every_rank(dp)) << "zero " << zero;
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

/// The ops of a compiled program's graph with op `op`.
int64_t count_ops(const tg::Program& p, tg::ir::Op op) {
  const tg::ir::Graph& g = tg::detail::compiled_graph(p);
  return std::count_if(g.nodes().begin(), g.nodes().end(), [&](const tg::ir::Node& n) { return n.op == op; });
}

/// ZeRO-1 over the ranks against the whole batch in one process: 20 steps of `optimizer` with
/// clipping (its norm must be the global one over every rank's shards) on an Mlp whose weights
/// decay and whose biases do not; with the default buckets (one per weight-decay treatment)
/// and with small ones (several per treatment), one and two micro-batches per rank.
void expect_sharded_equals_whole(const tg::Device& dev, const tg::Optimizer& optimizer) {
  const int64_t local = kBatch / tg::distributed::world().size;
  for (const auto& [bucket_bytes, micro] : {std::pair<int64_t, int64_t>{int64_t{25} << 20, 1}, {1024, 2}}) {
    Mlp whole, shared;
    auto compile = [&](Mlp& m, int64_t rows, bool dp) {
      return compile_mse(m, rows,
                         {.optimizer = optimizer,
                          .clip_grad_norm = 0.05,  // below the gradients' norm: clipping acts every step
                          .device = device(dev),
                          .micro_batches = dp ? micro : 1,
                          .data_parallel = dp,
                          .bucket_bytes = bucket_bytes,
                          .shard_optimizer = dp});
    };
    tg::Program one = compile(whole, kBatch, false), dp = compile(shared, local, true);
    const std::string where = "bucket_bytes " + std::to_string(bucket_bytes);
    EXPECT_GE(count_ops(dp, tg::ir::Op::kReduceScatter), 2) << where;
    EXPECT_EQ(count_ops(dp, tg::ir::Op::kReduceScatter), count_ops(dp, tg::ir::Op::kAllGather)) << where;
    EXPECT_EQ(count_ops(dp, tg::ir::Op::kReduceScatter), count_ops(dp, tg::ir::Op::kRankShard)) << where;
    expect_same_losses(one, dp, 20, 1e-5, where);
    EXPECT_LT(tg::testing::param_difference(dp, one), 1e-5) << where;
    EXPECT_TRUE(same_on_every_rank(dp)) << where;
  }
}

TEST_P(DataParallel, ShardedAdamWEqualsTheWholeBatch) {
  expect_sharded_equals_whole(GetParam(), tg::AdamW{.lr = 1e-2, .weight_decay = 0.1});
}

TEST_P(DataParallel, ShardedSgdWithMomentumEqualsTheWholeBatch) {
  expect_sharded_equals_whole(GetParam(), tg::SGD{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01});
}

// The measure: ZeRO-1 divides the optimizer state per rank by the number of ranks, up to
// each bucket's padding to a multiple of it. With the default buckets there is one per
// weight-decay treatment: the weights' elements and the biases', each padded.
TEST_P(DataParallel, ShardedOptimizerStateIsOneOverTheRanks) {
  const int64_t ranks = tg::distributed::world().size;
  Mlp whole, shared;
  auto compile = [&](Mlp& m, bool dp) {
    return tg::compile_train(m, [&](tg::Tensor x) { return tg::mean(m.net(x)); },
                             {.inputs = {{"x", {4, 6}}},
                              .optimizer = tg::AdamW{},
                              .device = device(GetParam()),
                              .data_parallel = dp,
                              .shard_optimizer = dp});
  };
  const tg::MemoryReport full = compile(whole, false).memory_report(),
                         sharded = compile(shared, true).memory_report();
  int64_t decaying = 0, others = 0;
  for (const tg::Param* p : whole.root().parameters())
    (p->decay() ? decaying : others) += tg::numel(p->shape());
  ASSERT_GT(decaying, 0);
  ASSERT_GT(others, 0);
  const int64_t moments = 2;
  ASSERT_EQ(full.optimizer_state % (moments * (decaying + others)), 0);
  const int64_t element_bytes = full.optimizer_state / (moments * (decaying + others));  // 4, or 8 on ref
  auto shard = [&](int64_t n) { return (n + ranks - 1) / ranks; };
  EXPECT_EQ(sharded.optimizer_state, moments * element_bytes * (shard(decaying) + shard(others)));
  EXPECT_LE(sharded.optimizer_state * ranks, full.optimizer_state + 2 * moments * element_bytes * ranks);
  EXPECT_EQ(sharded.params, full.params);
}

// TrainOptions::frozen under data parallelism, plain and ZeRO-1: only the trained parameters'
// gradients are reduced and sharded; ten AdamW steps equal the whole batch in one process, the
// frozen layer stays bit-identical, and the sharded state covers the trained parameters only.
TEST_P(DataParallel, FrozenParamsAreNeitherReducedNorSharded) {
  const int64_t ranks = tg::distributed::world().size;
  for (const bool sharded : {false, true}) {
    Mlp whole, shared;
    auto compile = [&](Mlp& m, int64_t rows, bool dp) {
      return compile_mse(m, rows,
                         {.optimizer = tg::AdamW{.lr = 1e-2, .weight_decay = 0.1},
                          .device = device(GetParam()),
                          .frozen = {"net.layers.0", "net.layers.2.bias"},
                          .data_parallel = dp,
                          .shard_optimizer = dp && sharded});
    };
    tg::Program one = compile(whole, kBatch, false), dp = compile(shared, kBatch / ranks, true);
    const auto before = dp.download_params();
    const std::string where = sharded ? "sharded" : "plain";
    expect_same_losses(one, dp, 10, 1e-5, where);
    EXPECT_LT(tg::testing::param_difference(dp, one), 1e-5) << where;
    EXPECT_TRUE(same_on_every_rank(dp)) << where;
    const auto after = dp.download_params();
    for (const char* name : {"net.layers.0.weight", "net.layers.0.bias", "net.layers.2.bias"}) {
      const auto a = after.at(name).f32(), b = before.at(name).f32();
      EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end())) << where << " " << name;
    }
    // Trained: layers.1 (weight decays, bias not) and layers.2.weight (decays).
    const int64_t decaying = 32 * 32 + 3 * 32, others = 32;
    const int64_t element_bytes = one.memory_report().optimizer_state / (2 * (decaying + others));
    EXPECT_EQ(one.memory_report().optimizer_state, 2 * element_bytes * (decaying + others));
    auto shard = [&](int64_t n) { return sharded ? (n + ranks - 1) / ranks : n; };
    EXPECT_EQ(dp.memory_report().optimizer_state, 2 * element_bytes * (shard(decaying) + shard(others)))
        << where;
  }
}

// skip_nonfinite under ZeRO-1: a NaN reaches only the shard it falls in, yet every rank must
// skip the step (or their parameters would part). Two independent vectors of one bucket, one
// per rank's shard (two ranks): a NaN in the input of the last rank's loss poisons the
// gradient of `b` only.
TEST_P(DataParallel, ShardedStepsAreSkippedOnEveryRank) {
  struct Pair : tg::Module {
    tg::Param a{*this, "a", {8}, tg::init::ones()};
    tg::Param b{*this, "b", {8}, tg::init::ones()};
  } m;
  tg::Program p = tg::compile_train(
      m, [&](tg::Tensor x, tg::Tensor y) { return tg::sum(m.a * x * x) + tg::sum(m.b * y * y); },
      {.inputs = {{"x", {8}}, {"y", {8}}},
       .optimizer = tg::AdamW{.lr = 1e-2},
       .device = device(GetParam()),
       .skip_nonfinite = true,
       .data_parallel = true,
       .shard_optimizer = true});
  const auto before = p.download_params();
  std::vector<float> x = tg::testing::uniform_values(8, 7), y = tg::testing::uniform_values(8, 8);
  if (tg::distributed::world().rank == tg::distributed::world().size - 1) y[3] = std::nanf("");
  p.step({{"x", x}, {"y", y}});
  EXPECT_TRUE(p.last_step_skipped());
  EXPECT_EQ(p.steps(), 0);
  const auto after = p.download_params();
  for (const auto& [name, t] : before)
    EXPECT_EQ(std::memcmp(after.at(name).data(), t.data(), static_cast<size_t>(t.numel()) * sizeof(float)), 0)
        << name;
  p.step({{"x", x}, {"y", tg::testing::uniform_values(8, 9)}});
  EXPECT_FALSE(p.last_step_skipped());
  EXPECT_TRUE(same_on_every_rank(p));
}

INSTANTIATE_TEST_SUITE_P(Devices, DataParallel, ::testing::ValuesIn(rank_devices()), [](const auto& info) {
  return info.param.kind == tg::Device::Kind::kCuda ? std::string("cuda")
                                                    : tg::testing::device_test_name(info.param);
});

// The sharding ops on their own, and their adjoints: rank r feeds x_r[i] = 10·r + i (2·W
// elements, W ranks). reduce_scatter gives r the sum over the ranks of part r, all_gather every
// x_s in rank order, rank_shard part r of x_r. Gradients of the ranks' total loss
// L = Σ_r (Σ a·reduce_scatter(x_r) + Σ b·all_gather(x_r)), a and b the same on every rank:
// dL/dx = all_gather(a) + reduce_scatter(b) = a tiled W times + W·(part r of b).
TEST(ShardingOps, ValuesAndAdjointsOnRefAndCpu) {
  if (std::string(TG_DP_ENGINE) == "nccl") GTEST_SKIP() << "host backends (MPI) only";
  const int64_t w = tg::distributed::world().size, r = tg::distributed::world().rank, n = 2 * w;
  namespace ir = tg::ir;
  ir::Graph g;
  const tg::Loc loc = tg::Loc::current();
  const tg::Tensor x = ir::named_leaf(g, ir::Op::kInput, "x", {n}, tg::DType::kF32, loc);
  auto op = [&](ir::Op o, const tg::Tensor& t) {
    ir::Node node = ir::make_node(o, {t.id()}, loc);
    node.attrs.values = {static_cast<double>(w)};
    return ir::emit(g, std::move(node));
  };
  std::vector<double> a(2), b(static_cast<size_t>(n * w));
  for (size_t i = 0; i < a.size(); ++i) a[i] = 1.0 + static_cast<double>(i);
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.5 * static_cast<double>(i);
  const tg::Tensor scattered = op(ir::Op::kReduceScatter, x), gathered = op(ir::Op::kAllGather, x),
                   mine = op(ir::Op::kRankShard, x);
  const tg::Tensor loss = tg::sum(scattered * ir::constant_on(g, a, {2}, tg::DType::kF32, loc)) +
                          tg::sum(gathered * ir::constant_on(g, b, {n * w}, tg::DType::kF32, loc));
  const std::vector<int32_t> wrt{x.id()};
  const int32_t dx = tg::autograd::append_gradients(g, loss.id(), wrt)[0];
  g.outputs = {scattered.id(), gathered.id(), mine.id(), dx};
  std::vector<float> feed(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) feed[static_cast<size_t>(i)] = static_cast<float>(10 * r + i);
  std::vector<float> want_scattered(2), want_gathered, want_mine(2), want_dx(static_cast<size_t>(n));
  for (int64_t j = 0; j < 2; ++j) {
    for (int64_t s = 0; s < w; ++s)
      want_scattered[static_cast<size_t>(j)] += static_cast<float>(10 * s + 2 * r + j);
    want_mine[static_cast<size_t>(j)] = static_cast<float>(10 * r + 2 * r + j);
  }
  for (int64_t s = 0; s < w; ++s)
    for (int64_t i = 0; i < n; ++i) want_gathered.push_back(static_cast<float>(10 * s + i));
  for (int64_t i = 0; i < n; ++i)
    want_dx[static_cast<size_t>(i)] = static_cast<float>(
        a[static_cast<size_t>(i % 2)] + static_cast<double>(w) * b[static_cast<size_t>(r * n + i)]);
  for (auto make : {tg::backend::make_ref_backend, tg::backend::make_cpu_backend}) {
    const std::unique_ptr<tg::backend::Backend> be = make();
    tg::backend::PrepareOptions options;
    options.communicator = tg::dist::world();
    const std::unique_ptr<tg::backend::Executable> exe = be->prepare(g, {}, options);
    exe->set_input(x.id(), feed.data());
    exe->execute();
    auto read = [&](int32_t id) {
      std::vector<float> v(static_cast<size_t>(g.node(id).numel()));
      exe->read_output(id, v.data());
      return v;
    };
    EXPECT_EQ(read(scattered.id()), want_scattered) << be->name();
    EXPECT_EQ(read(gathered.id()), want_gathered) << be->name();
    EXPECT_EQ(read(mine.id()), want_mine) << be->name();
    EXPECT_EQ(read(dx), want_dx) << be->name();
  }
}

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

TEST(DataParallelErrors, ShardOptimizerNeedsDataParallelAndAnOptimizer) {
  Mlp m;
  auto compile = [&](bool dp, tg::Optimizer optimizer) {
    std::string what;
    try {
      tg::compile_train(m, [&](tg::Tensor x) { return tg::mean(m.net(x)); },
                        {.inputs = {{"x", {4, 6}}},
                         .optimizer = std::move(optimizer),
                         .device = device(rank_devices().back()),
                         .data_parallel = dp,
                         .shard_optimizer = true});
    } catch (const tg::InputError& e) {
      what = e.what();
    }
    return what;
  };
  std::string what = compile(false, tg::AdamW{});
  EXPECT_NE(what.find("shard_optimizer"), std::string::npos) << what;
  EXPECT_NE(what.find("needs data_parallel = true"), std::string::npos) << what;
  what = compile(true, tg::GradientsOnly{});
  EXPECT_NE(what.find("tg::GradientsOnly has none"), std::string::npos) << what;
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
