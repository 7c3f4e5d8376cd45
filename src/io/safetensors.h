// Reads of safetensors files the library needs beyond checkpoint.h's.
#pragma once
#include <functional>
#include <map>
#include <string>

#include "tensorgrad/dtype.h"

#include "tensorgrad/program.h"

namespace tg::io {

/// A tensor of a dtype the library does not hold, as the file has it.
struct RawTensor {
  std::string dtype;  // the file's name of it: "U8", "F8_E4M3", "F64", …
  Shape shape;
  /// For a one-byte dtype (U8, F8_E4M3, F8_E5M2, F8_E8M0) its bytes as an i8
  /// HostTensor of its shape, for the caller to decode (gpt-oss's MXFP4 blocks and scales, FP8
  /// weights); else empty.
  HostTensor bytes;
};

/// The tensors of the safetensors file at `path` whose dtype the library does not hold and that
/// `wanted` names; the file is checked as read_safetensors checks it, and its other tensors are
/// not read.
std::map<std::string, RawTensor> read_safetensors_raw(const std::string& path,
                                                      const std::function<bool(const std::string&)>& wanted);

}  // namespace tg::io
