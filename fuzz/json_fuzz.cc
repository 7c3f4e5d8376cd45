// Fuzz target: the JSON reader of safetensors headers. Any input either parses or throws
// JsonError; a parsed value's strings are valid UTF-8 and quote back to parseable JSON.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "io/json.h"

namespace {
void check(const tg::io::JsonValue& v, int depth) {
  if (depth > 1000) __builtin_trap();  // the parser bounds its depth far below this
  if (v.is_string() && !tg::io::is_valid_utf8(v.string)) __builtin_trap();
  if (v.is_string() && tg::io::parse_json(tg::io::json_quote(v.string)).string != v.string) __builtin_trap();
  for (const auto& e : v.array) check(e, depth + 1);
  for (const auto& [key, e] : v.object) {
    if (!tg::io::is_valid_utf8(key)) __builtin_trap();
    check(e, depth + 1);
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    check(tg::io::parse_json(std::string_view(reinterpret_cast<const char*>(data), size)), 0);
  } catch (const tg::io::JsonError&) {
  }
  return 0;
}
