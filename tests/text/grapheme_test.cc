// Extended grapheme clusters (src/text/grapheme.cc) on the cases UAX #29's rules are about, each
// cluster spelled out by hand: a combining mark, CR LF, Hangul jamo, a conjunct (GB9c), an emoji
// ZWJ sequence and a skin tone, flags in pairs, prepended marks, and bytes that are not UTF-8.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "text/grapheme.h"

namespace {

std::vector<std::string> clusters(const std::string& s) {
  std::vector<std::string> out;
  for (std::string_view c : tg::text::graphemes(s)) out.emplace_back(c);
  return out;
}

using V = std::vector<std::string>;

TEST(Graphemes, UnicodeRules) {
  EXPECT_EQ(clusters(""), V{});
  EXPECT_EQ(clusters("ab"), (V{"a", "b"}));
  EXPECT_EQ(clusters("e\u0301x"), (V{"e\u0301", "x"}));                       // GB9: × Extend
  EXPECT_EQ(clusters("a\r\nb\n\r"), (V{"a", "\r\n", "b", "\n", "\r"}));       // GB3, GB4, GB5
  EXPECT_EQ(clusters("\n\u0301"), (V{"\n", "\u0301"}));                        // GB4 before GB9
  EXPECT_EQ(clusters("\u1100\u1161\u11a8\u1100"), (V{"\u1100\u1161\u11a8", "\u1100"}));  // GB6–GB8
  EXPECT_EQ(clusters("\uac00\u11a8\uac01\u1161"), (V{"\uac00\u11a8", "\uac01", "\u1161"}));
  EXPECT_EQ(clusters("\u0915\u094d\u0937\u093f"), (V{"\u0915\u094d\u0937\u093f"}));  // GB9c, GB9a
  EXPECT_EQ(clusters("\u0915\u0937"), (V{"\u0915", "\u0937"}));
  EXPECT_EQ(clusters("\U0001f468\u200d\U0001f469\u200d\U0001f467!"),            // GB11
            (V{"\U0001f468\u200d\U0001f469\u200d\U0001f467", "!"}));
  EXPECT_EQ(clusters("a\u200d\U0001f469"), (V{"a\u200d", "\U0001f469"}));     // no pictograph before
  EXPECT_EQ(clusters("\U0001f44d\U0001f3fd"), (V{"\U0001f44d\U0001f3fd"}));   // a skin tone extends
  EXPECT_EQ(clusters("\U0001f1fa\U0001f1f8\U0001f1e9"),                        // GB12, GB13
            (V{"\U0001f1fa\U0001f1f8", "\U0001f1e9"}));
  EXPECT_EQ(clusters("\u0600\u0661x"), (V{"\u0600\u0661", "x"}));             // GB9b: Prepend ×
  EXPECT_EQ(clusters("a\xff\u0301b\xc3"), (V{"a", "\xff", "\u0301", "b", "\xc3"}));
}

}  // namespace
