// Safetensors checkpoints: a trained program round-trips bit for bit; a file written by
// PyTorch-side code (tests/io/gen_safetensors_golden.py) loads into the equivalent model;
// every malformed or mismatched file ends in a CheckpointError naming the file and the
// tensor, with the model's parameters untouched; writes are atomic (a failed save leaves
// no temporary file and never a partial checkpoint). Set TG_WRITE_SAFETENSORS=<path> to
// leave files for the script's --check mode (see the script's docstring).
#include <gtest/gtest.h>

#include "test_util.h"
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <tensorgrad/tensorgrad.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/json.h"

namespace {

namespace fs = std::filesystem;

struct Net : tg::Module {
  tg::nn::Linear l1{*this, "l1", 3, 4};
  tg::nn::Linear l2{*this, "l2", 4, 2};
};

tg::Program make_forward(Net& m) {
  return tg::compile_forward(m, [&](tg::Tensor x) { return m.l2(tg::tanh(m.l1(x))); },
                             {.inputs = {{"x", {2, 3}}}, .device = tg::Device::cpu()});
}

const std::vector<float> kX{0.5f, -1.0f, 2.0f, -0.25f, 0.75f, 1.5f};  // [2, 3]

using tg::testing::message_of;

bool same_bits(const tg::HostTensor& a, const tg::HostTensor& b) {
  const auto bytes = static_cast<size_t>(a.numel() * tg::dtype_size(a.dtype()));
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (bytes == 0 || std::memcmp(a.data(), b.data(), bytes) == 0);
}

void expect_same_params(const std::map<std::string, tg::HostTensor>& a,
                        const std::map<std::string, tg::HostTensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) EXPECT_TRUE(same_bits(t, b.at(name))) << name;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
void write_file(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

/// An 8-byte little-endian length (the real one unless `declared` says otherwise), the
/// header and `data_bytes` zero bytes.
std::string file_bytes(const std::string& header, size_t data_bytes, std::optional<uint64_t> declared = {}) {
  const uint64_t n = declared.value_or(header.size());
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + std::string(data_bytes, '\0');
}

/// Correct header entries for Net (104 bytes of data), to be broken one at a time.
std::map<std::string, std::string> net_entries() {
  return {{"l1.bias", R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})"},
          {"l1.weight", R"({"dtype":"F32","shape":[4,3],"data_offsets":[16,64]})"},
          {"l2.bias", R"({"dtype":"F32","shape":[2],"data_offsets":[64,72]})"},
          {"l2.weight", R"({"dtype":"F32","shape":[2,4],"data_offsets":[72,104]})"}};
}
constexpr size_t kNetBytes = 104;

std::string header_from(const std::map<std::string, std::string>& entries) {
  std::string h = "{";
  for (const auto& [name, entry] : entries)
    h += (h.size() > 1 ? "," : "") + tg::io::json_quote(name) + ":" + entry;
  return h + "}";
}

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tg_safetensors_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  /// Writes `bytes` as a file, loads it into a fresh Net and returns the CheckpointError's
  /// message, after checking that it names the file and that no parameter changed.
  std::string load_error(const std::string& bytes, tg::LoadOptions options = {}) {
    const std::string p = path("bad.safetensors");
    write_file(p, bytes);
    Net m;
    tg::Program prog = make_forward(m);
    const auto before = prog.download_params();
    const std::string msg = message_of<tg::CheckpointError>([&] { tg::load_safetensors(p, prog, options); });
    EXPECT_NE(msg.find(p), std::string::npos) << "message does not name the file: " << msg;
    EXPECT_NE(msg.find("[load_safetensors]"), std::string::npos) << msg;
    expect_same_params(before, prog.download_params());
    return msg;
  }
  std::string load_error_with(const std::map<std::string, std::string>& entries, size_t data = kNetBytes) {
    return load_error(file_bytes(header_from(entries), data));
  }

  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dir_;
};

#define EXPECT_MSG_HAS(msg, text) EXPECT_NE((msg).find(text), std::string::npos) << (msg)

TEST_F(Safetensors, TrainedProgramRoundTripsBitForBit) {
  Net a;
  auto train = tg::compile_train(a,
                                 [&](tg::Tensor x, tg::Tensor y) {
                                   auto d = a.l2(tg::tanh(a.l1(x))) - y;
                                   return tg::mean(d * d);
                                 },
                                 {.inputs = {{"x", {2, 3}}, {"y", {2, 2}}},
                                  .optimizer = tg::Adam{.lr = 1e-2},
                                  .device = tg::Device::cpu()});
  train.init_params(3);
  for (int i = 0; i < 5; ++i) train.step({{"x", kX}, {"y", std::vector<float>{0.5f, -0.5f, 1.0f, 0.0f}}});
  tg::Program predict_a = make_forward(a);

  const std::string p = path("model.safetensors");
  tg::save_safetensors(p, train, {{"step", "5"}, {"model", "Net"}});
  EXPECT_EQ(listing(), std::vector<std::string>{"model.safetensors"});  // no temporary file left

  Net b;
  tg::Program predict_b = make_forward(b);
  predict_b.init_params(99);
  tg::load_safetensors(p, predict_b);
  expect_same_params(train.download_params(), predict_b.download_params());
  EXPECT_TRUE(same_bits(predict_a.run({{"x", kX}}), predict_b.run({{"x", kX}})));

  EXPECT_EQ(tg::read_safetensors_metadata(p),
            (std::map<std::string, std::string>{{"model", "Net"}, {"step", "5"}}));
  const auto tensors = tg::read_safetensors(p);
  EXPECT_EQ(tensors.size(), 4u);
  EXPECT_EQ(tensors.at("l1.weight").shape(), (tg::Shape{4, 3}));

  // The layout of the official writer: metadata first, names sorted, 8-byte aligned data.
  const std::string raw = read_file(p);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(raw[i])) << (8 * i);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(raw.size(), 8 + n + kNetBytes);
  const std::string header = raw.substr(8, n);
  EXPECT_EQ(header.rfind(R"({"__metadata__":{"model":"Net","step":"5"},"l1.bias":{"dtype":"F32","shape":[4],)"
                         R"("data_offsets":[0,16]},"l1.weight":)",
                         0),
            0u)
      << header;
}

TEST_F(Safetensors, MixedDtypesEmptyTensorsAndEscapedNamesRoundTrip) {
  std::map<std::string, tg::HostTensor> in;
  in.emplace("b.mask", tg::HostTensor(tg::DType::kBool, {3}));
  static_cast<uint8_t*>(in.at("b.mask").data())[1] = 1;
  in.emplace("c.count", tg::HostTensor::i32({-7}, {}));
  in.emplace("a.empty", tg::HostTensor(tg::DType::kF32, {0, 3}));
  in.emplace("weird \"name\"\n\x01 ü", tg::HostTensor::f32({1.5f, -0.0f}, {2}));
  const std::map<std::string, std::string> meta{{"k\"ey", "line\nbreak\ttab \x02 ✓"}, {"empty", ""}};
  const std::string p = path("mixed.safetensors");
  tg::save_safetensors(p, in, meta);
  const auto out = tg::read_safetensors(p);
  ASSERT_EQ(out.size(), in.size());
  for (const auto& [name, t] : in) EXPECT_TRUE(same_bits(t, out.at(name))) << name;
  EXPECT_EQ(tg::read_safetensors_metadata(p), meta);
  // F32 data first, then I32, then BOOL (the official writer's alignment order).
  const std::string raw = read_file(p);
  EXPECT_LT(raw.find("\"a.empty\""), raw.find("\"weird"));
  EXPECT_LT(raw.find("\"weird"), raw.find("\"c.count\""));
  EXPECT_LT(raw.find("\"c.count\""), raw.find("\"b.mask\""));
}

TEST_F(Safetensors, LoadsTheFileWrittenByPyTorchSideCode) {
  const std::string golden = std::string(TG_TEST_DATA_DIR) + "/torch_written.safetensors";
  std::ifstream expected_file(std::string(TG_TEST_DATA_DIR) + "/torch_written_expected.txt");
  ASSERT_TRUE(expected_file) << "missing torch_written_expected.txt";
  std::map<std::string, std::vector<float>> expected;
  std::map<std::string, std::string> expected_meta;
  for (std::string line; std::getline(expected_file, line);) {
    std::istringstream in(line);
    std::string kind, name, dtype;
    in >> kind;
    if (kind == "metadata") {
      const tg::io::JsonValue meta = tg::io::parse_json(line.substr(9));
      for (const auto& [k, v] : meta.object) expected_meta[k] = v.string;
    } else if (kind == "tensor") {
      int rank = 0;
      in >> name >> dtype >> rank;
      int64_t numel = 1;
      for (int i = 0, d = 0; i < rank; ++i) in >> d, numel *= d;
      for (std::string v; in >> v;)
        expected[name].push_back(static_cast<float>(std::strtod(v.c_str(), nullptr)));
      ASSERT_EQ(static_cast<int64_t>(expected[name].size()), numel) << name;
    }
  }
  ASSERT_EQ(expected.size(), 4u);

  Net m;
  tg::Program prog = make_forward(m);
  tg::load_safetensors(golden, prog);
  for (const auto& [name, t] : prog.download_params()) {
    const std::vector<float> got(t.f32().begin(), t.f32().end());
    EXPECT_EQ(got, expected.at(name)) << name;
  }
  EXPECT_EQ(tg::read_safetensors_metadata(golden), expected_meta);

  // torch's Linear layout: y = tanh(x W1ᵀ + b1) W2ᵀ + b2.
  const tg::HostTensor y = prog.run({{"x", kX}});
  const auto &w1 = expected.at("l1.weight"), &b1 = expected.at("l1.bias");
  const auto &w2 = expected.at("l2.weight"), &b2 = expected.at("l2.bias");
  for (int r = 0; r < 2; ++r)
    for (int o = 0; o < 2; ++o) {
      double acc = b2[o];
      for (int h = 0; h < 4; ++h) {
        double z = b1[h];
        for (int i = 0; i < 3; ++i) z += double(kX[r * 3 + i]) * w1[h * 3 + i];
        acc += std::tanh(z) * w2[o * 4 + h];
      }
      EXPECT_NEAR(y.f32()[r * 2 + o], acc, 1e-5);
    }

  // For the script's --check mode: the same values written by tensorgrad.
  if (const char* out = std::getenv("TG_WRITE_SAFETENSORS")) {
    const std::string base(out);
    tg::save_safetensors(base, prog, expected_meta);
    auto tensors = prog.download_params();
    tensors.emplace("extra.step", tg::HostTensor::i32({1234}, {}));
    tg::HostTensor mask(tg::DType::kBool, {3});
    static_cast<uint8_t*>(mask.data())[0] = static_cast<uint8_t*>(mask.data())[2] = 1;
    tensors.emplace("extra.mask", mask);
    const std::string stem =
        base.size() > 12 && base.ends_with(".safetensors") ? base.substr(0, base.size() - 12) : base;
    tg::save_safetensors(stem + "_mixed.safetensors", tensors, expected_meta);
  }
}

TEST_F(Safetensors, PartialLoadUpdatesOnlyTheGivenParameters) {
  Net m;
  tg::Program prog = make_forward(m);
  const auto before = prog.download_params();
  std::map<std::string, tg::HostTensor> l1{{"l1.weight", tg::HostTensor(tg::DType::kF32, {4, 3})},
                                           {"l1.bias", tg::HostTensor::f32({1, 2, 3, 4}, {4})}};
  tg::save_safetensors(path("l1.safetensors"), l1);
  const std::string msg = load_error(read_file(path("l1.safetensors")));
  EXPECT_MSG_HAS(msg, "missing parameters 'l2.bias', 'l2.weight'");
  tg::load_safetensors(path("l1.safetensors"), prog, {.partial = true});
  const auto after = prog.download_params();
  EXPECT_TRUE(same_bits(after.at("l1.bias"), l1.at("l1.bias")));
  EXPECT_TRUE(same_bits(after.at("l1.weight"), l1.at("l1.weight")));
  EXPECT_TRUE(same_bits(after.at("l2.weight"), before.at("l2.weight")));
  // Unknown names stay errors with partial.
  l1.emplace("l3.weight", tg::HostTensor(tg::DType::kF32, {1}));
  tg::save_safetensors(path("l1.safetensors"), l1);
  EXPECT_MSG_HAS(load_error(read_file(path("l1.safetensors")), {.partial = true}), "tensor 'l3.weight'");
}

TEST_F(Safetensors, AFifoIsRefusedWithoutBlocking) {
  const std::string fifo = path("pipe.safetensors");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // No writer ever opens the FIFO: a blocking open would hang here forever.
  const std::string msg = message_of<tg::CheckpointError>([&] { tg::read_safetensors(fifo); });
  EXPECT_MSG_HAS(msg, "not a regular file");
}

TEST_F(Safetensors, ASaveRemovesTempFilesOfDeadProcessesOnly) {
  // A pid that is certainly dead: a child that has exited and been reaped.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);
  const std::string target = path("w.safetensors");
  const std::string dead = target + ".tmp." + std::to_string(child) + ".0";
  const std::string alive = target + ".tmp." + std::to_string(::getppid()) + ".3";  // the test runner
  const std::string mine = target + ".tmp." + std::to_string(::getpid()) + ".99";   // a save in flight
  const std::string other = path("other.safetensors.tmp." + std::to_string(child) + ".0");
  for (const std::string& p : {dead, alive, mine, other}) write_file(p, "partial");
  Net m;
  tg::Program prog = make_forward(m);
  tg::save_safetensors(target, prog);
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(alive));
  EXPECT_TRUE(fs::exists(mine));
  EXPECT_TRUE(fs::exists(other));  // another target's temp file is not this save's business
  EXPECT_TRUE(fs::exists(target));
}

TEST_F(Safetensors, UnreadableAndTruncatedFiles) {
  Net m;
  tg::Program prog = make_forward(m);
  const std::string missing = path("nope.safetensors");
  std::string msg = message_of<tg::CheckpointError>([&] { tg::load_safetensors(missing, prog); });
  EXPECT_MSG_HAS(msg, missing);
  EXPECT_MSG_HAS(msg, "No such file");
  msg = message_of<tg::CheckpointError>([&] { tg::read_safetensors(dir_.string()); });
  EXPECT_MSG_HAS(msg, "not a regular file");

  EXPECT_MSG_HAS(load_error(""), "0 bytes, shorter than the 8-byte header length");
  EXPECT_MSG_HAS(load_error(std::string("\x10\0\0", 3)), "3 bytes");
  const std::string good = file_bytes(header_from(net_entries()), kNetBytes);
  EXPECT_MSG_HAS(load_error(good.substr(0, 20)), "runs past the end of the file (20 bytes");
  // Truncated in the data section: the last tensor lies beyond the end.
  msg = load_error(good.substr(0, good.size() - 1));
  EXPECT_MSG_HAS(msg, "tensor 'l2.weight'");
  EXPECT_MSG_HAS(msg, "outside the data section");
  EXPECT_MSG_HAS(load_error(file_bytes("{}", 0, uint64_t{1} << 62)), "exceeds the 100 MB limit");
  EXPECT_MSG_HAS(load_error(file_bytes("{}", 0, 100'000'001)), "exceeds the 100 MB limit");
}

TEST_F(Safetensors, MalformedHeaders) {
  EXPECT_MSG_HAS(load_error(file_bytes("", 0)), "not valid JSON");
  EXPECT_MSG_HAS(load_error(file_bytes("{\"l1.bias\": ", 0)), "not valid JSON");
  EXPECT_MSG_HAS(load_error(file_bytes("{\"a\":1} x", 0)), "not valid JSON");
  EXPECT_MSG_HAS(load_error(file_bytes("{\"bad \\q escape\":1}", 0)), "invalid escape");
  EXPECT_MSG_HAS(load_error(file_bytes("{\"\xff\":1}", 0)), "not valid UTF-8");
  EXPECT_MSG_HAS(load_error(file_bytes("{\"\\ud800\":1}", 0)), "surrogate");
  EXPECT_MSG_HAS(load_error(file_bytes(std::string(100000, '[') + std::string(100000, ']'), 0)),
                 "nesting deeper");
  EXPECT_MSG_HAS(load_error(file_bytes("[1, 2]", 0)), "not a JSON object");
  EXPECT_MSG_HAS(load_error(file_bytes(R"({"__metadata__": ["x"]})", 0)),
                 "\"__metadata__\" is not a JSON object");
  EXPECT_MSG_HAS(load_error(file_bytes(R"({"__metadata__": {"k": 1}})", 0)), "entry 'k' is not a string");
  EXPECT_MSG_HAS(load_error(file_bytes(R"({"__metadata__":{},"__metadata__":{}})", 0)),
                 "\"__metadata__\" appears twice");

  auto e = net_entries();
  e["l1.weight"] = "5";
  EXPECT_MSG_HAS(load_error_with(e), "tensor 'l1.weight': header entry is not a JSON object");
  const std::pair<const char*, const char*> without[] = {
      {"dtype", R"({"shape":[2],"data_offsets":[64,72]})"},
      {"shape", R"({"dtype":"F32","data_offsets":[64,72]})"},
      {"data_offsets", R"({"dtype":"F32","shape":[2]})"}};
  for (const auto& [field, entry] : without) {
    e = net_entries();
    e["l2.bias"] = entry;
    EXPECT_MSG_HAS(load_error_with(e),
                   std::string("tensor 'l2.bias': header entry has no \"") + field + "\"");
  }
  e = net_entries();
  e["l2.bias"] = R"({"dtype":"F32","shape":[-2],"data_offsets":[64,72]})";
  EXPECT_MSG_HAS(load_error_with(e), "tensor 'l2.bias': \"shape\" must hold non-negative integers");
  e["l2.bias"] = R"({"dtype":"F32","shape":[2],"data_offsets":[64.0,72]})";
  EXPECT_MSG_HAS(load_error_with(e), "tensor 'l2.bias': \"data_offsets\" must hold non-negative integers");
  e["l2.bias"] = R"({"dtype":"F32","shape":[2],"data_offsets":[64]})";
  EXPECT_MSG_HAS(load_error_with(e), "tensor 'l2.bias': \"data_offsets\" is not an array of two integers");
  e["l2.bias"] = R"({"dtype":"F32","shape":[2],"data_offsets":[64,99999999999999999999]})";
  EXPECT_MSG_HAS(load_error_with(e), "integer out of range");
  e["l2.bias"] = R"({"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[64,72]})";
  EXPECT_MSG_HAS(load_error_with(e), "tensor 'l2.bias': shape is too large");

  // Duplicate names: JSON allows them, a checkpoint must not.
  std::string h = header_from(net_entries());
  h.insert(1, R"("l2.bias":{"dtype":"F32","shape":[2],"data_offsets":[64,72]},)");
  EXPECT_MSG_HAS(load_error(file_bytes(h, kNetBytes)), "tensor 'l2.bias' appears twice");
}

TEST_F(Safetensors, DtypesWeDoNotReadAreRejectedByName) {
  auto e = net_entries();
  e["l1.bias"] = R"({"dtype":"Q42","shape":[4],"data_offsets":[0,16]})";
  EXPECT_MSG_HAS(load_error_with(e), "tensor 'l1.bias': unknown dtype 'Q42'");
  for (const char* dtype : {"F64", "I64", "U8", "F8_E4M3"}) {
    e["l1.bias"] = std::string(R"({"dtype":")") + dtype + R"(","shape":[4],"data_offsets":[0,16]})";
    const std::string msg = load_error_with(e);
    EXPECT_MSG_HAS(msg, std::string("tensor 'l1.bias': dtype ") + dtype + " is not supported");
  }
  // A dtype we read but that does not fit a parameter.
  e["l1.bias"] = R"({"dtype":"I32","shape":[4],"data_offsets":[0,16]})";
  EXPECT_MSG_HAS(load_error_with(e), "tensor 'l1.bias' is I32, but model parameters are F32");
  // Bools are bytes 0 or 1.
  const std::string p = path("bool.safetensors");
  write_file(p, file_bytes(R"({"m":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", 0) + "\x01\x02");
  EXPECT_MSG_HAS(message_of<tg::CheckpointError>([&] { tg::read_safetensors(p); }),
                 "tensor 'm': BOOL element 1 is 2");
}

TEST_F(Safetensors, BadDataOffsets) {
  auto e = net_entries();
  e["l2.bias"] = R"({"dtype":"F32","shape":[2],"data_offsets":[72,64]})";
  EXPECT_MSG_HAS(load_error_with(e), "tensor 'l2.bias': data_offsets [72, 64] are out of order");
  e["l2.bias"] = R"({"dtype":"F32","shape":[2],"data_offsets":[64,76]})";
  EXPECT_MSG_HAS(load_error_with(e),
                 "tensor 'l2.bias': data_offsets [64, 76] cover 12 bytes, but F32[2] needs 8");
  e["l2.bias"] = R"({"dtype":"F32","shape":[2],"data_offsets":[100,108]})";
  EXPECT_MSG_HAS(load_error_with(e),
                 "tensor 'l2.bias': data_offsets [100, 108] lie outside the data section (104 bytes");
  e["l2.bias"] = R"({"dtype":"F32","shape":[2],"data_offsets":[60,68]})";
  EXPECT_MSG_HAS(load_error_with(e), "tensor 'l2.bias': data_offsets [60, 68] overlap tensor 'l1.weight'");
  e = net_entries();
  e["l2.weight"] = R"({"dtype":"F32","shape":[2,4],"data_offsets":[76,108]})";
  EXPECT_MSG_HAS(load_error_with(e, 108),
                 "tensor 'l2.weight': data_offsets [76, 108] leave a gap of 4 bytes after tensor 'l2.bias'");
  EXPECT_MSG_HAS(load_error_with(net_entries(), kNetBytes + 3),
                 "3 bytes follow the last tensor's data (tensor 'l2.weight')");
}

TEST_F(Safetensors, FileThatDoesNotFitTheModel) {
  auto e = net_entries();
  e["l1.weight"] = R"({"dtype":"F32","shape":[3,4],"data_offsets":[16,64]})";
  EXPECT_MSG_HAS(load_error_with(e),
                 "tensor 'l1.weight' has shape [3, 4], but the model's parameter has shape [4, 3]");
  e = net_entries();
  e["l3.weight"] = R"({"dtype":"F32","shape":[1],"data_offsets":[104,108]})";
  const std::string msg = load_error_with(e, kNetBytes + 4);
  EXPECT_MSG_HAS(msg, "tensor 'l3.weight' is not a parameter of the model");
  EXPECT_MSG_HAS(msg, "'l1.weight'");  // lists what the model has
  e = net_entries();
  e.erase("l2.weight");
  EXPECT_MSG_HAS(load_error_with(e, 72), "missing parameter 'l2.weight' (pass {.partial = true}");
}

TEST_F(Safetensors, SaveToMissingDirectoryThrowsAndLeavesNothing) {
  Net m;
  tg::Program prog = make_forward(m);
  const std::string p = path("no_such_dir/model.safetensors");
  const std::string msg = message_of<tg::CheckpointError>([&] { tg::save_safetensors(p, prog); });
  EXPECT_MSG_HAS(msg, "[save_safetensors] " + p);
  EXPECT_MSG_HAS(msg, "No such file or directory");
  EXPECT_TRUE(listing().empty());
}

TEST_F(Safetensors, FailedRenameRemovesTheTemporaryFile) {
  Net m;
  tg::Program prog = make_forward(m);
  fs::create_directories(dir_ / "occupied" / "child");  // rename cannot replace a non-empty directory
  const std::string msg =
      message_of<tg::CheckpointError>([&] { tg::save_safetensors(path("occupied"), prog); });
  EXPECT_MSG_HAS(msg, "cannot rename");
  EXPECT_EQ(listing(), std::vector<std::string>{"occupied"});
}

TEST_F(Safetensors, OverwriteReplacesTheCheckpointEntirely) {
  const std::string p = path("ckpt.safetensors");
  std::map<std::string, tg::HostTensor> big{{"w", tg::HostTensor(tg::DType::kF32, {1000})}};
  tg::save_safetensors(p, big, {{"note", std::string(500, 'x')}});
  const auto small = std::map<std::string, tg::HostTensor>{{"v", tg::HostTensor::i32({1, 2}, {2})}};
  tg::save_safetensors(p, small);
  EXPECT_EQ(fs::file_size(p), 8u + 56u + 8u);  // the 55-byte header padded to 56, then 8 data bytes
  const auto back = tg::read_safetensors(p);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_TRUE(same_bits(back.at("v"), small.at("v")));
  EXPECT_TRUE(tg::read_safetensors_metadata(p).empty());
  EXPECT_EQ(listing(), std::vector<std::string>{"ckpt.safetensors"});
}

TEST_F(Safetensors, WriteFailureMidFileKeepsTheOldCheckpoint) {
  const std::string p = path("ckpt.safetensors");
  const auto old = std::map<std::string, tg::HostTensor>{{"v", tg::HostTensor::i32({1, 2}, {2})}};
  tg::save_safetensors(p, old);
  const std::string old_bytes = read_file(p);
  // A file-size limit makes the write fail part-way, as a full disk would.
  struct rlimit saved {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto* saved_handler = signal(SIGXFSZ, SIG_IGN);
  struct rlimit tiny = saved;
  tiny.rlim_cur = 256;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &tiny), 0);
  const std::string msg = message_of<tg::CheckpointError>([&] {
    tg::save_safetensors(p, {{"w", tg::HostTensor(tg::DType::kF32, {10000})}});
  });
  setrlimit(RLIMIT_FSIZE, &saved);
  signal(SIGXFSZ, saved_handler);
  EXPECT_MSG_HAS(msg, "File too large");
  EXPECT_EQ(read_file(p), old_bytes);
  EXPECT_EQ(listing(), std::vector<std::string>{"ckpt.safetensors"});
}

TEST_F(Safetensors, SaveRejectsNamesTheFormatCannotHold) {
  const std::string p = path("x.safetensors");
  EXPECT_MSG_HAS(message_of<tg::CheckpointError>([&] {
                   tg::save_safetensors(p, {{"__metadata__", tg::HostTensor(tg::DType::kF32, {1})}});
                 }),
                 "reserved");
  EXPECT_MSG_HAS(message_of<tg::CheckpointError>([&] {
                   tg::save_safetensors(p, {{"bad\xff", tg::HostTensor(tg::DType::kF32, {1})}});
                 }),
                 "not valid UTF-8");
  EXPECT_TRUE(listing().empty());
}

TEST_F(Safetensors, Bf16AndF16RoundTripAndLoadIntoF32Parameters) {
  // Written bit for bit, after F32 and I32 and before BOOL (the official writer's dtype order).
  std::map<std::string, tg::HostTensor> in;
  in.emplace("h", tg::HostTensor::f32({0.1f, -65504.0f, 1e-7f}, {3}).to(tg::DType::kF16));
  in.emplace("b", tg::HostTensor::f32({0.1f, 3.0e38f, -1.0f}, {3}).to(tg::DType::kBF16));
  in.emplace("i", tg::HostTensor::i32({5}, {1}));
  in.emplace("m", tg::HostTensor(tg::DType::kBool, {1}));
  const std::string p = path("half.safetensors");
  tg::save_safetensors(p, in);
  const auto out = tg::read_safetensors(p);
  for (const auto& [name, t] : in) EXPECT_TRUE(same_bits(t, out.at(name))) << name;
  const std::string raw = read_file(p);
  EXPECT_NE(raw.find(R"("dtype":"BF16")"), std::string::npos);
  EXPECT_NE(raw.find(R"("dtype":"F16")"), std::string::npos);
  EXPECT_LT(raw.find("\"i\""), raw.find("\"b\""));
  EXPECT_LT(raw.find("\"b\""), raw.find("\"h\""));
  EXPECT_LT(raw.find("\"h\""), raw.find("\"m\""));

  // A model's parameters saved in bf16 (and f16) load into its f32 parameters, converted exactly.
  for (tg::DType half : {tg::DType::kBF16, tg::DType::kF16}) {
    Net m;
    tg::Program prog = make_forward(m);
    prog.init_params(3);
    std::map<std::string, tg::HostTensor> params;
    for (const auto& [name, t] : prog.download_params()) params.emplace(name, t.to(half));
    const std::string q = path("params.safetensors");
    tg::save_safetensors(q, params);
    prog.init_params(4);
    tg::load_safetensors(q, prog);
    for (const auto& [name, t] : prog.download_params())
      EXPECT_TRUE(same_bits(t, params.at(name).to(tg::DType::kF32))) << name;
    // upload_params converts the same way.
    prog.init_params(5);
    prog.upload_params(params);
    for (const auto& [name, t] : prog.download_params())
      EXPECT_TRUE(same_bits(t, params.at(name).to(tg::DType::kF32))) << name;
  }
}

}  // namespace
