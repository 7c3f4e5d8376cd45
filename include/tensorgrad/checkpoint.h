// Checkpoints in the safetensors format (https://github.com/huggingface/safetensors), the
// layout PyTorch and Hugging Face use, so parameters move between the two unchanged:
//
//   tg::save_safetensors("model.safetensors", train, {{"step", "1000"}});
//   tg::load_safetensors("model.safetensors", predict);                  // every parameter
//   tg::load_safetensors("encoder.safetensors", predict, {.partial = true});
//
// Writes are atomic: the file is written to `<path>.tmp.<pid>` in the same directory,
// flushed to disk and renamed over `path`, so a crash or error mid-write leaves either the
// old checkpoint or the new one, never a truncated file. Loads are validated before any
// parameter changes: a malformed file, an unknown or missing tensor, or a shape that does
// not fit the model throws tg::CheckpointError naming the file and the tensor.
//
// dtypes: F32, BF16, F16, I32 and BOOL are read and written (BF16 and F16 bit for bit as
// PyTorch writes them). Loading into a program converts BF16 and F16 parameters to its f32
// ones exactly. Every other safetensors dtype (F64, I64, U8, …) is rejected with a
// CheckpointError naming the tensor and its dtype rather than converted, because a silent
// narrowing (F64 → F32, I64 → I32) would change the values the file holds; convert on the
// writing side (e.g. `tensor.float()` in PyTorch).
#pragma once
#include <map>
#include <string>

#include "tensorgrad/program.h"

namespace tg {

struct LoadOptions {
  /// Allow a file that holds a subset of the parameters (tensors the model does not have
  /// are still errors).
  bool partial = false;
};

/// Writes every parameter of the program's model as an F32 tensor named by its path
/// ("l1.weight"), with optional string metadata (the file's "__metadata__").
void save_safetensors(const std::string& path, const Program& program,
                      const std::map<std::string, std::string>& metadata = {});

/// Writes `tensors` (any mix of f32, bf16, f16, i32, bool) laid out as the official safetensors
/// writer does: "__metadata__" first, then tensors by dtype (F32, I32, BF16, F16, BOOL) and name,
/// data contiguous in that order, header padded with spaces to a multiple of 8 bytes. For a
/// program's parameters (all F32) that is simply sorted by name.
void save_safetensors(const std::string& path, const std::map<std::string, HostTensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// Reads and validates every tensor of a safetensors file.
std::map<std::string, HostTensor> read_safetensors(const std::string& path);

/// Reads and validates a safetensors file's header and returns its "__metadata__" (empty
/// when the file has none).
std::map<std::string, std::string> read_safetensors_metadata(const std::string& path);

/// Reads, validates against the program's parameters (names, F32, shapes) and uploads. On
/// any error nothing is uploaded and tg::CheckpointError names the file and the tensor.
void load_safetensors(const std::string& path, Program& program, LoadOptions options = {});

}  // namespace tg
