// Facts of the source tree that keep it a place a contributor can live in (STYLE.md), checked
// on every CI run by reading src/ as text:
//   * no file over 800 lines;
//   * no function over 150 lines, except the flat per-op switches (shape inference, VJP) and
//     the functions listed in kLongFunctionsToSplit, a list that may only shrink: a listed
//     function that is now short, or gone, fails the test until it is taken off the list;
//   * no getenv outside util/switches.cc (every switch is declared in util/switches.h), and the
//     README's table lists every switch;
//   * no C++ raw string over 30 lines in a .cc file (kernel sources live in .cuh files);
//   * no property of one GPU model (an SM count, a shared-memory size) written as a number in
//     the CUDA backend: launch shapes come from the device's own properties.
// The function scanner is lexical: comments, string and character literals are blanked, then a
// brace block opened at namespace or class level whose header is not a namespace, class,
// struct, union, enum or `= {…}` initializer counts as a function body, from its header's
// first line to its closing brace.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "util/switches.h"

namespace {

namespace fs = std::filesystem;

constexpr int kMaxFileLines = 800;
constexpr int kMaxFunctionLines = 150;
constexpr int kMaxRawStringLines = 30;

// Flat switches over every op, long by nature: one short case per op.
const std::set<std::string> kPerOpSwitches = {"src/ir/shape.cc:infer", "src/autograd/vjp.cc:vjp"};

// Functions still to be split (none now; list one here only with a plan to split it).
const std::set<std::string> kLongFunctionsToSplit = {};

struct Source {
  std::string path;  // relative to the repository root
  std::string text;
};

std::vector<Source> sources() {
  const fs::path root = fs::path(TG_SOURCE_DIR);
  std::vector<Source> out;
  for (const auto& e : fs::recursive_directory_iterator(root / "src")) {
    if (!e.is_regular_file()) continue;
    const std::string ext = e.path().extension().string();
    if (ext != ".cc" && ext != ".h" && ext != ".cuh" && ext != ".def") continue;
    std::ifstream f(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    out.push_back({fs::relative(e.path(), root).generic_string(), ss.str()});
  }
  std::sort(out.begin(), out.end(), [](const Source& a, const Source& b) { return a.path < b.path; });
  return out;
}

int line_count(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

/// A raw string literal: its first line (1-based) and how many lines it spans.
struct RawString {
  int line = 0, lines = 0;
};

/// `text` with comments, string/character literals (raw ones too) and preprocessor lines
/// replaced by spaces, newlines kept, so braces and line numbers can be read off it; the raw
/// strings met on the way are reported.
std::string blank_non_code(const std::string& text, std::vector<RawString>* raws = nullptr) {
  std::string out = text;
  const size_t n = text.size();
  auto blank = [&](size_t from, size_t to) {
    for (size_t k = from; k < to && k < n; ++k)
      if (out[k] != '\n') out[k] = ' ';
  };
  bool line_start = true;
  for (size_t i = 0; i < n;) {
    const char c = text[i];
    if (line_start && c == '#') {  // a preprocessor line, with its continuations
      size_t j = i;
      while (j < n && !(text[j] == '\n' && text[j - 1] != '\\')) ++j;
      blank(i, j);
      i = j;
      continue;
    }
    if (c == '\n')
      line_start = true;
    else if (c != ' ' && c != '\t')
      line_start = false;
    if (c == '/' && i + 1 < n && text[i + 1] == '/') {
      const size_t j = text.find('\n', i);
      blank(i, j == std::string::npos ? n : j);
      i = j == std::string::npos ? n : j;
    } else if (c == '/' && i + 1 < n && text[i + 1] == '*') {
      const size_t j = text.find("*/", i + 2);
      const size_t end = j == std::string::npos ? n : j + 2;
      blank(i, end);
      i = end;
    } else if (c == 'R' && i + 1 < n && text[i + 1] == '"' &&
               (i == 0 || !std::isalnum(static_cast<unsigned char>(text[i - 1])))) {
      const size_t open = text.find('(', i + 2);
      const std::string delim = text.substr(i + 2, open - (i + 2));
      const size_t close = text.find(")" + delim + "\"", open);
      const size_t end = close == std::string::npos ? n : close + delim.size() + 2;
      if (raws != nullptr)
        raws->push_back({line_count(text.substr(0, i)) + 1,
                         static_cast<int>(std::count(text.begin() + i, text.begin() + end, '\n')) + 1});
      blank(i, end);
      i = end;
    } else if (c == '"' ||
               (c == '\'' && !(i > 0 && std::isxdigit(static_cast<unsigned char>(text[i - 1]))))) {
      size_t j = i + 1;
      while (j < n && text[j] != c) j += text[j] == '\\' ? 2 : 1;
      blank(i, j + 1);
      i = j + 1;
    } else {
      ++i;
    }
  }
  return out;
}

struct Function {
  std::string name;
  int first = 0, last = 0;  // 1-based lines, the header's first and the closing brace's
  int lines() const { return last - first + 1; }
};

bool is_word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

/// The identifiers (and numbers) of `text`, in order.
std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> out;
  for (size_t i = 0; i < text.size();) {
    if (!is_word_char(text[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && is_word_char(text[j])) ++j;
    out.push_back(text.substr(i, j - i));
    i = j;
  }
  return out;
}

/// The function bodies of `code` (already blanked), as described in the header comment.
std::vector<Function> functions(const std::string& code) {
  static const std::set<std::string> scope_words = {"namespace", "class", "struct", "union", "enum"};
  std::vector<Function> out;
  // Each open brace: whether it is a scope (namespace/class body) and, for a function, its record.
  struct Open {
    bool scope;
    Function fn;
  };
  std::vector<Open> stack;
  size_t header_start = 0;  // where the text since the last ; { } begins
  int line = 1;
  auto line_at = [&](size_t pos) {
    return 1 + static_cast<int>(std::count(code.begin(), code.begin() + static_cast<long>(pos), '\n'));
  };
  for (size_t i = 0; i < code.size(); ++i) {
    const char c = code[i];
    if (c == '\n') ++line;
    const bool at_scope_level =
        std::all_of(stack.begin(), stack.end(), [](const Open& o) { return o.scope; });
    if (c == '{') {
      if (!at_scope_level) {
        stack.push_back({false, {}});
      } else {
        const std::string header = code.substr(header_start, i - header_start);
        const std::vector<std::string> ws = words(header);
        const bool scope =
            header.find('(') == std::string::npos &&
            std::any_of(ws.begin(), ws.end(), [](const std::string& w) { return scope_words.count(w) > 0; });
        const size_t paren = header.find('(');
        // `= {…}` initialisers; an `=` after the parameter list opens (a default argument) is not one.
        const size_t eq = header.find('=');
        const bool data =
            eq != std::string::npos && eq < paren && header.find("operator") == std::string::npos;
        if (scope || data || paren == std::string::npos) {
          stack.push_back({true, {}});
        } else {
          // The function's name: the last identifier before the parameter list.
          const std::vector<std::string> before = words(header.substr(0, paren));
          const std::string name = before.empty() ? "?" : before.back();
          const size_t first_char = header.find_first_not_of(" \t\n");
          stack.push_back(
              {false, {name, line_at(header_start + (first_char == std::string::npos ? 0 : first_char)), 0}});
        }
      }
      header_start = i + 1;
    } else if (c == '}') {
      if (!stack.empty()) {
        Open o = stack.back();
        stack.pop_back();
        const bool closes_function =
            !o.scope && std::all_of(stack.begin(), stack.end(), [](const Open& s) { return s.scope; });
        if (closes_function) {
          o.fn.last = line;
          out.push_back(o.fn);
        }
      }
      header_start = i + 1;
    } else if (c == ';' && at_scope_level) {
      header_start = i + 1;
    }
  }
  return out;
}

TEST(TreeFacts, NoFileOver800Lines) {
  for (const Source& s : sources())
    EXPECT_LE(line_count(s.text), kMaxFileLines)
        << s.path << " has " << line_count(s.text) << " lines: split it";
}

TEST(TreeFacts, NoFunctionOver150Lines) {
  std::set<std::string> long_listed_seen;
  for (const Source& s : sources()) {
    if (s.path.ends_with(".def")) continue;
    for (const Function& f : functions(blank_non_code(s.text))) {
      const std::string key = s.path + ":" + f.name;
      if (f.lines() <= kMaxFunctionLines || kPerOpSwitches.count(key)) continue;
      if (kLongFunctionsToSplit.count(key)) {
        long_listed_seen.insert(key);
        continue;
      }
      ADD_FAILURE() << key << " (lines " << f.first << "-" << f.last << ") is " << f.lines()
                    << " lines long, over " << kMaxFunctionLines << ": split it";
    }
  }
  for (const std::string& key : kLongFunctionsToSplit)
    EXPECT_TRUE(long_listed_seen.count(key)) << key << " is no longer over " << kMaxFunctionLines
                                             << " lines (or is gone): take it off kLongFunctionsToSplit";
}

TEST(TreeFacts, ExecutablesAreShortAndInOneOrTwoFiles) {
  // The executables run what the schedule (cpu) or the lowering (cuda) decided: a short
  // header each, and members defined in at most two files.
  for (const char* backend : {"cpu", "cuda"}) {
    const std::string header = std::string("src/backend/") + backend + "/executable.h";
    const std::string cls =
        std::string(backend == std::string("cpu") ? "CpuExecutable" : "CudaExecutable") + "::";
    std::set<std::string> defining;
    for (const Source& s : sources()) {
      if (s.path == header) {
        EXPECT_LE(line_count(s.text), 100) << header << " is " << line_count(s.text) << " lines";
      }
      if (s.path.starts_with(std::string("src/backend/") + backend + "/") && s.path.ends_with(".cc") &&
          blank_non_code(s.text).find(cls) != std::string::npos)
        defining.insert(s.path);
    }
    EXPECT_GE(defining.size(), 1u) << cls;
    EXPECT_LE(defining.size(), 2u) << cls << " has members defined in " << defining.size() << " files";
  }
}

TEST(TreeFacts, GetenvOnlyInTheSwitchesFile) {
  for (const Source& s : sources()) {
    if (s.path == "src/util/switches.cc") continue;
    EXPECT_EQ(blank_non_code(s.text).find("getenv"), std::string::npos)
        << s.path << " reads the environment: declare the switch in src/util/switches.h and use tg::env";
  }
}

TEST(TreeFacts, NoLongRawStringsInCcFiles) {
  for (const Source& s : sources()) {
    if (!s.path.ends_with(".cc")) continue;
    std::vector<RawString> raws;
    blank_non_code(s.text, &raws);
    for (const RawString& r : raws)
      EXPECT_LE(r.lines, kMaxRawStringLines) << s.path << ":" << r.line << ": a raw string of " << r.lines
                                             << " lines; move kernel source into a .cuh file";
  }
}

TEST(TreeFacts, NoGpuModelNumbersInTheCudaBackend) {
  // SM counts of current parts (H100/H200 132, and 2, 4 and 32 times it; H100 PCIe 114, A100 108,
  // L40S 142, B200 148) and the largest shared memory a block may opt into on sm_80/sm_90 (227 KiB).
  static const std::set<std::string> model_numbers = {"132", "264", "528", "4224", "114",
                                                      "108", "142", "148", "227",  "232448"};
  for (const Source& s : sources()) {
    if (!s.path.starts_with("src/backend/cuda/")) continue;
    const std::string code = blank_non_code(s.text);
    std::istringstream lines(code);
    std::string l;
    for (int n = 1; std::getline(lines, l); ++n)
      for (size_t i = 0; i < l.size(); ++i) {
        // Whole integer literals only: not part of a name, a float (1.0e132) or a longer number.
        if (!std::isdigit(static_cast<unsigned char>(l[i])) ||
            (i > 0 && (is_word_char(l[i - 1]) || l[i - 1] == '.')))
          continue;
        size_t j = i;
        while (j < l.size() && is_word_char(l[j])) ++j;
        const bool fraction = j < l.size() && l[j] == '.';
        EXPECT_FALSE(!fraction && model_numbers.count(l.substr(i, j - i)))
            << s.path << ":" << n
            << " writes a GPU model's SM count or shared memory as a number: query DeviceInfo";
        i = j;
      }
  }
}

TEST(TreeFacts, ReadmeListsEverySwitch) {
  std::ifstream f(fs::path(TG_SOURCE_DIR) / "README.md");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string readme = ss.str();
  for (const tg::env::SwitchInfo& s : tg::env::all_switches())
    EXPECT_NE(readme.find(std::string("| `") + s.name + "`"), std::string::npos)
        << s.name << " is declared in src/util/switches.h but has no row in the README's table of switches";
}

// The scanner itself, on a snippet whose answers are known.
TEST(TreeFacts, ScannerFindsFunctionsAndRawStrings) {
  const std::string text =
      "namespace a {\n"                     // 1
      "struct S {\n"                        // 2
      "  int f() const { return 1; }\n"     // 3
      "};\n"                                // 4
      "constexpr int kTable[] = {1, 2};\n"  // 5
      "void g(int x)\n"                     // 6
      "{\n"                                 // 7
      "  if (x) { x = 2; }  // } {\n"       // 8
      "  const char* s = R\"(\n{\n)\";\n"   // 9-11
      "}\n"                                 // 12
      "}  // namespace a\n"                 // 13
      "int h(int x = 2) {\n"                // 14: a default argument is no initialiser
      "  return x;\n"                       // 15
      "}\n";                                // 16
  std::vector<RawString> raws;
  const std::vector<Function> fs = functions(blank_non_code(text, &raws));
  ASSERT_EQ(fs.size(), 3u);
  EXPECT_EQ(fs[0].name, "f");
  EXPECT_EQ(fs[0].lines(), 1);
  EXPECT_EQ(fs[1].name, "g");
  EXPECT_EQ(fs[1].first, 6);
  EXPECT_EQ(fs[1].last, 12);
  EXPECT_EQ(fs[2].name, "h");
  EXPECT_EQ(fs[2].lines(), 3);
  ASSERT_EQ(raws.size(), 1u);
  EXPECT_EQ(raws[0].line, 9);
  EXPECT_EQ(raws[0].lines, 3);
}

}  // namespace
