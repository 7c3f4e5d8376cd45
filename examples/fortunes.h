// The character-level text task shared by the char_lm and mamba_lm examples: the Debian
// `fortunes` corpus (real English text, ~2.5 MB), a byte vocabulary, a 90/10 split by fortune,
// random training windows, fixed validation windows and the unigram baseline.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

namespace fortunes {

inline const char* kDir = "/usr/share/games/fortunes";

/// The corpus directory, installing the Debian package when it is missing and we are root.
inline std::filesystem::path locate(const std::string& dir = kDir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir) && dir == kDir) {
    if (geteuid() == 0) {
      std::printf("the fortunes corpus is not installed; running: apt-get install -y fortunes\n");
      std::fflush(stdout);
      if (std::system("DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fortunes >/dev/null 2>&1 || "
                      "(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fortunes "
                      ">/dev/null)") != 0)
        throw std::runtime_error("apt-get install fortunes failed");
    } else {
      throw std::runtime_error(std::string("no corpus at ") + dir +
                               ": install it with `sudo apt-get install fortunes`");
    }
  }
  if (!fs::is_directory(dir)) throw std::runtime_error("no corpus directory " + dir);
  return dir;
}

/// The fortunes of one file (separated by lines holding a single "%"), appended to `out`.
inline void read_file(const std::filesystem::path& f, std::vector<std::string>& out) {
  std::ifstream in(f, std::ios::binary);
  std::string line, current;
  while (std::getline(in, line)) {
    if (line == "%") {
      if (!current.empty()) out.push_back(current);
      current.clear();
    } else {
      current += line + "\n";
    }
  }
  if (!current.empty()) out.push_back(current);
}

/// Every fortune of every plain-text file of the directory (files without an extension), in
/// file-name order.
inline std::vector<std::string> read_all(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && !e.path().has_extension()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<std::string> out;
  for (const fs::path& f : files) read_file(f, out);
  return out;
}

/// Byte-level tokens: the distinct bytes of the corpus, in byte order.
struct Vocab {
  std::string bytes;  // token id → byte
  int32_t id[256];    // byte → token id (-1: not in the vocabulary)
  explicit Vocab(const std::string& chars = "") : bytes(chars) {
    std::fill(id, id + 256, -1);
    for (size_t i = 0; i < bytes.size(); ++i)
      id[static_cast<unsigned char>(bytes[i])] = static_cast<int32_t>(i);
  }
  static Vocab of(const std::string& text) {
    bool seen[256] = {};
    for (const char c : text) seen[static_cast<unsigned char>(c)] = true;
    std::string chars;
    for (int b = 0; b < 256; ++b)
      if (seen[b]) chars += static_cast<char>(b);
    return Vocab(chars);
  }
  int64_t size() const { return static_cast<int64_t>(bytes.size()); }
  /// Text → ids; bytes outside the vocabulary become the space's id (or 0).
  std::vector<int32_t> encode(const std::string& text) const {
    const int32_t fallback =
        id[static_cast<unsigned char>(' ')] >= 0 ? id[static_cast<unsigned char>(' ')] : 0;
    std::vector<int32_t> out;
    for (const char c : text)
      out.push_back(id[static_cast<unsigned char>(c)] >= 0 ? id[static_cast<unsigned char>(c)] : fallback);
    return out;
  }
  std::string decode(const std::vector<int32_t>& ids) const {
    std::string s;
    for (const int32_t t : ids) s += bytes[static_cast<size_t>(t)];
    return s;
  }
  /// The vocabulary as hex (for a checkpoint's metadata), and back.
  std::string hex() const {
    std::string h;
    char buf[3];
    for (const char c : bytes) {
      std::snprintf(buf, sizeof buf, "%02x", static_cast<unsigned char>(c));
      h += buf;
    }
    return h;
  }
  static Vocab from_hex(const std::string& h) {
    std::string chars;
    for (size_t i = 0; i + 1 < h.size(); i += 2)
      chars += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
    return Vocab(chars);
  }
};

/// The task: fortunes shuffled with a fixed seed, 90% of them (as one text, each followed by
/// "%\n" as in the files) for training and 10% held out.
struct Corpus {
  Vocab vocab;
  std::vector<int32_t> train, val;
  size_t fortunes = 0;

  static Corpus load(const std::string& dir = kDir) {
    std::vector<std::string> all = read_all(locate(dir));
    if (all.size() < 20) throw std::runtime_error("the corpus at " + dir + " has too few fortunes");
    std::mt19937 rng(20261121);
    std::shuffle(all.begin(), all.end(), rng);
    const size_t held = all.size() / 10;
    std::string train_text, val_text;
    for (size_t i = 0; i < all.size(); ++i) (i < held ? val_text : train_text) += all[i] + "%\n";
    Corpus c{Vocab::of(train_text + val_text), {}, {}, all.size()};
    c.train = c.vocab.encode(train_text);
    c.val = c.vocab.encode(val_text);
    return c;
  }

  /// Cross-entropy (nats per character) of the validation text under the training text's
  /// character frequencies (add-one smoothed): what a model that ignores context achieves.
  double unigram_baseline() const {
    std::vector<double> count(static_cast<size_t>(vocab.size()), 1.0);
    for (const int32_t t : train) count[static_cast<size_t>(t)] += 1;
    double total = 0;
    for (const double c : count) total += c;
    double nll = 0;
    for (const int32_t t : val) nll -= std::log(count[static_cast<size_t>(t)] / total);
    return nll / static_cast<double>(val.size());
  }

  /// A batch of `batch` windows of `seq` tokens and their next-token targets from `text`:
  /// at random offsets (rng) or, with rng null, at the evenly spaced offsets of window `index`.
  static void windows(const std::vector<int32_t>& text, int64_t batch, int64_t seq, std::mt19937* rng,
                      int64_t index, int64_t count, std::vector<int32_t>& ids,
                      std::vector<int32_t>& targets) {
    ids.resize(static_cast<size_t>(batch * seq));
    targets.resize(ids.size());
    const auto span = static_cast<int64_t>(text.size()) - seq - 1;
    std::uniform_int_distribution<int64_t> pick(0, span);
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t start =
          rng ? pick(*rng) : (index * batch + b) * span / std::max<int64_t>(count * batch, 1);
      for (int64_t t = 0; t < seq; ++t) {
        ids[static_cast<size_t>(b * seq + t)] = text[static_cast<size_t>(start + t)];
        targets[static_cast<size_t>(b * seq + t)] = text[static_cast<size_t>(start + t + 1)];
      }
    }
  }
};

}  // namespace fortunes
