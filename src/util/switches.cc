// The one place that reads the environment (see switches.h).
#include "util/switches.h"

#include <cstdlib>
#include <cstring>

namespace tg::env {
namespace {

// clang-format off
constexpr SwitchInfo kSwitches[] = {
#define TG_SWITCH_INFO(e, name, fallback, doc) {Switch::e, name, fallback, doc},
    TG_SWITCHES(TG_SWITCH_INFO)
#undef TG_SWITCH_INFO
};
// clang-format on

const char* raw(Switch s) {
  const char* v = std::getenv(info(s).name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

}  // namespace

std::span<const SwitchInfo> all_switches() { return kSwitches; }

const SwitchInfo& info(Switch s) { return kSwitches[static_cast<size_t>(s)]; }

std::string value(Switch s) {
  const char* v = raw(s);
  return v != nullptr ? v : info(s).fallback;
}

bool is_set(Switch s) { return raw(s) != nullptr; }

bool equals(Switch s, const char* v) { return value(s) == v; }

int64_t positive_int(Switch s) {
  const std::string v = value(s);
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  return !v.empty() && end != nullptr && *end == '\0' && n > 0 ? n : 0;
}

}  // namespace tg::env
