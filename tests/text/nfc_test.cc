// text::nfc, the NFC normalizer of Qwen2-style tokenizer.json files: 5,969 strings against
// CPython's unicodedata.normalize("NFC", …) (tests/data/nfc_golden.txt from
// tests/text/gen_nfc_golden.py: every code point with a canonical decomposition or a combining
// class, then random mixtures of marks, starters and Hangul), and the rules by name.
#include "text/nfc.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace {

using tg::text::nfc;
using tg::text::nfd;

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

TEST(Nfc, EqualsCPythonsUnicodedata) {
  std::ifstream in(std::string(TG_TEST_DATA_DIR) + "/nfc_golden.txt");
  ASSERT_TRUE(in) << "tests/data/nfc_golden.txt is missing";
  std::string line;
  int cases = 0, changed = 0, wrong = 0;
  while (std::getline(in, line)) {
    const size_t tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos) << line;
    const std::string text = from_hex(line.substr(0, tab)), want = from_hex(line.substr(tab + 1));
    ++cases;
    changed += text != want;
    if (nfc(text) != want && ++wrong <= 5) ADD_FAILURE() << "NFC of " << line.substr(0, tab) << " differs";
  }
  EXPECT_EQ(cases, 5969);
  EXPECT_GT(changed, 3000);  // most of the random cases are not in NFC
  EXPECT_EQ(wrong, 0);
}

// NFD against the same strings: composing it again gives the NFC, and it is its own NFD.
TEST(Nfd, ComposesBackToCPythonsNfc) {
  std::ifstream in(std::string(TG_TEST_DATA_DIR) + "/nfc_golden.txt");
  ASSERT_TRUE(in) << "tests/data/nfc_golden.txt is missing";
  std::string line;
  int wrong = 0;
  while (std::getline(in, line)) {
    const size_t tab = line.find('\t');
    const std::string text = from_hex(line.substr(0, tab)), want = from_hex(line.substr(tab + 1));
    const std::string d = nfd(text);
    if ((nfc(d) != want || nfd(d) != d || nfd(want) != d) && ++wrong <= 5)
      ADD_FAILURE() << "NFD of " << line.substr(0, tab) << " differs";
  }
  EXPECT_EQ(wrong, 0);
}

TEST(Nfd, RulesByName) {
  EXPECT_EQ(nfd("plain ASCII, unchanged"), "plain ASCII, unchanged");
  EXPECT_EQ(nfd("\u00e9"), "e\u0301");               // decomposed
  EXPECT_EQ(nfd("\u1ead"), "a\u0323\u0302");         // recursively, marks in class order
  EXPECT_EQ(nfd("q\u0307\u0323"), "q\u0323\u0307");  // marks sorted by class (220 < 230)
  EXPECT_EQ(nfd("\u212b"), "A\u030a");               // a singleton, then Å
  EXPECT_EQ(nfd("\uac01"), "\u1100\u1161\u11a8");    // Hangul LVT by arithmetic
  EXPECT_EQ(nfd("\u00e9\xff\u00e9"),
            "e\u0301\xff"
            "e\u0301");  // an invalid byte kept
}

TEST(Nfc, RulesByName) {
  EXPECT_EQ(nfc("plain ASCII, unchanged"), "plain ASCII, unchanged");
  EXPECT_EQ(nfc("e\u0301"), "\u00e9");               // composed
  EXPECT_EQ(nfc("\u00e9"), "\u00e9");                // already NFC
  EXPECT_EQ(nfc("\u212b"), "\u00c5");                // a singleton decomposes for good
  EXPECT_EQ(nfc("\u0958"), "\u0915\u093c");          // a composition exclusion stays apart
  EXPECT_EQ(nfc("q\u0307\u0323"), "q\u0323\u0307");  // marks sorted by class (220 < 230)
  EXPECT_EQ(nfc("a\u0323\u0302"), "\u1ead");         // both marks absorbed, in class order
  EXPECT_EQ(nfc("a\u0302\u0302"), "\u00e2\u0302");   // â has no composite with ^
  EXPECT_EQ(nfc("a\u0346\u0301"), "a\u0346\u0301");  // ´ blocked by a mark of its class
  EXPECT_EQ(nfc("a\u0315\u0301"), "\u00e1\u0315");   // sorted first (230 < 232), then composed
  EXPECT_EQ(nfc("\u1100\u1161\u11a8"), "\uac01");    // Hangul L V T by arithmetic
  EXPECT_EQ(nfc("\uac00\u11a8"), "\uac01");          // LV + T
  EXPECT_EQ(nfc("e\xff\u0301"), "e\xff\u0301");      // an invalid byte kept, and it blocks
}

}  // namespace
