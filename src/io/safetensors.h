// Reads of safetensors files the library needs beyond checkpoint.h's.
#pragma once
#include <functional>
#include <map>
#include <string>

#include "tensorgrad/program.h"

namespace tg::io {

/// The U8 tensors of the safetensors file at `path` that `wanted` names, each one's bytes as an
/// i8 HostTensor of its shape (packed codes for the caller to decode: gpt-oss's MXFP4 blocks
/// and scales); the file is checked as read_safetensors checks it, and its other tensors are
/// not read.
std::map<std::string, HostTensor> read_safetensors_u8(const std::string& path,
                                                      const std::function<bool(const std::string&)>& wanted);

}  // namespace tg::io
