// What the tests of Hugging Face model folders share (pretrained_vit_test, pretrained_clip_test,
// pretrained_t5_test): the fixtures' paths, a file's bytes, a fixture copied with its config.json
// edited, and whether two loaded models hold the same weights.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "tensorgrad/pretrained.h"

namespace tg_test {

/// tests/data/<folder>.
inline std::string data_dir(const std::string& folder) {
  return std::string(TG_TEST_DATA_DIR) + "/" + folder;
}

inline std::string file_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// tests/data/<folder>'s model.safetensors and config.json, the first `from` in it replaced by
/// `to`, in the temporary folder <name>; its path.
inline std::filesystem::path edited_copy(const std::string& folder, const std::string& name,
                                         const std::string& from, const std::string& to) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / name;
  fs::create_directories(dir);
  fs::copy_file(data_dir(folder) + "/model.safetensors", dir / "model.safetensors",
                fs::copy_options::overwrite_existing);
  std::string c = file_bytes(data_dir(folder) + "/config.json");
  EXPECT_NE(c.find(from), std::string::npos) << from;
  if (c.find(from) != std::string::npos) c.replace(c.find(from), from.size(), to);
  std::ofstream(dir / "config.json") << c;
  return dir;
}

/// The same parameter names, shapes and f32 values.
inline bool same_weights(const tg::pretrained::Model& a, const tg::pretrained::Model& b) {
  if (a.weights.size() != b.weights.size()) return false;
  for (const auto& [name, t] : a.weights) {
    if (!b.weights.count(name) || b.weights.at(name).shape() != t.shape()) return false;
    const std::span<const float> x = t.f32(), y = b.weights.at(name).f32();
    if (!std::equal(x.begin(), x.end(), y.begin())) return false;
  }
  return true;
}

}  // namespace tg_test
