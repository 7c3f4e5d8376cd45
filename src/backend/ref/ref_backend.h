// The reference backend: a plain interpreter that computes every node in double precision
// (i32 and bool values are stored as exact doubles). It is the oracle every other backend
// and every gradient is checked against, so it favours the obvious loop over the fast one.
// Tests may use the double-precision entry points below to feed and read values without
// rounding through f32.
#pragma once
#include <span>
#include <vector>

#include "backend/backend.h"

namespace tg::backend {

class RefExecutable : public Executable {
 public:
  /// Feeds an input node in double precision.
  virtual void set_input_f64(int32_t node, std::span<const double> values) = 0;
  /// Any computed node's values in double precision (valid after execute()).
  virtual const std::vector<double>& value_f64(int32_t node) const = 0;
};

/// Persistent buffers of the ref backend expose their doubles for the same reason.
std::vector<double>& ref_buffer_data(Buffer& buffer);

}  // namespace tg::backend
