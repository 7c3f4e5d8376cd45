// What the tokenizer tests share: the golden.txt files of tests/data/tokenizer/* (ids and decodes
// that Hugging Face `tokenizers` gives for test texts, written by tests/text/gen_tokenizer_golden.py's
// write_golden), and reading, writing and loading test files.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tensorgrad/errors.h"
#include "test_util.h"
#include "tensorgrad/tokenizer.h"

namespace tg_test {

/// `content` written to a file of the test's temporary folder; its path.
inline std::string write_temp(const std::string& name, const std::string& content) {
  const std::string path = testing::TempDir() + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

inline std::string read_file(const std::string& path) {
  std::stringstream s;
  s << std::ifstream(path, std::ios::binary).rdbuf();
  return s.str();
}

/// The TokenizerError loading `path` gives (a test failure when it loads).
inline std::string load_error(const std::string& path) {
  try {
    tg::Tokenizer::load(path);
  } catch (const tg::TokenizerError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no TokenizerError for " << path;
  return "";
}

/// The bytes a string of hex digit pairs spells ("4869" → "Hi").
inline std::string from_hex(const std::string& hex) {
  std::string bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    bytes += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return bytes;
}

/// One line of golden.txt: <add_special> TAB <hex of the text's bytes> TAB <ids> [TAB <hex of
/// tokenizers' decode(ids, skip_special_tokens=False)>].
struct GoldenCase {
  bool add_special = false;
  std::string text;
  std::vector<int32_t> ids;
  std::optional<std::string> decoded;  // absent in files written before decodes were recorded
};

/// The cases of the golden file at `path`, in order (none when it cannot be read).
inline std::vector<GoldenCase> read_golden(const std::string& path) {
  std::vector<GoldenCase> cases;
  std::ifstream golden(path);
  for (std::string line; std::getline(golden, line);) {
    std::istringstream fields(line);
    std::string add_special, hex, ids_text, decoded_hex;
    std::getline(fields, add_special, '\t');
    std::getline(fields, hex, '\t');
    std::getline(fields, ids_text, '\t');
    GoldenCase c;
    c.add_special = add_special == "1";
    // A third tab starts the decode, which may be empty (getline then reports nothing read).
    std::getline(fields, decoded_hex);
    if (std::count(line.begin(), line.end(), '\t') >= 3) c.decoded = from_hex(decoded_hex);
    c.text = from_hex(hex);
    std::istringstream ids_stream(ids_text);
    for (int32_t id; ids_stream >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace tg_test
