// Small helpers shared by the test files.
#pragma once
#include <gtest/gtest.h>

#include <string>

namespace tg::testing {

/// Runs `fn`, which must throw E, and returns the exception's message.
template <class E, class F>
std::string message_of(F&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

}  // namespace tg::testing
