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
#include <functional>
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
/// The same, leaving out the tensors of a dtype the library does not hold (I64, F64, U8, …)
/// for which skip_unsupported(name) is true, instead of refusing the file: the int64
/// position_ids buffers older transformers files carry, for instance.
std::map<std::string, HostTensor> read_safetensors(
    const std::string& path, const std::function<bool(const std::string&)>& skip_unsupported);

/// Reads and validates a safetensors file's header and returns its "__metadata__" (empty
/// when the file has none).
std::map<std::string, std::string> read_safetensors_metadata(const std::string& path);

/// Reads, validates against the program's parameters (names, F32, shapes) and uploads. On
/// any error nothing is uploaded and tg::CheckpointError names the file and the tensor.
/// Tensors under "__tg/" (a training checkpoint's optimizer state) are skipped, so a
/// training checkpoint loads into an inference program too. A tensor named like one of the
/// program's tg::state() tensors sets that state (never required): a PyTorch state_dict's
/// batch-norm buffers "bn.running_mean" and "bn.running_var" load with the weights. (Its
/// "bn.num_batches_tracked" is I64, which this reader does not take: leave it out when saving
/// from PyTorch; nn::BatchNorm2d uses a fixed momentum and does not need it.)
void load_safetensors(const std::string& path, Program& program, LoadOptions options = {});

/// A training checkpoint: one safetensors file holding the parameters (as save_safetensors
/// names them), the optimizer's state tensors ("__tg/optimizer/<name>"), the tg::state()
/// tensors ("__tg/state/<name>"), the step count (the schedule's position and Adam's bias
/// correction), the random streams' counter, the base lr and the optimizer's settings
/// ("__tg.*" metadata), and your own metadata (a data loader's position, the epoch). Written
/// atomically like save_safetensors.
///
///   tg::save_checkpoint("run.ckpt", train, {{"epoch", "3"}});
///   …a new process, the same model and compile options…
///   auto meta = tg::load_checkpoint("run.ckpt", train);   // continues bit for bit
///
/// Resuming gives exactly the losses and parameters of a run that never stopped, on the same
/// kind of device. Metadata keys must not start with "__tg.".
void save_checkpoint(const std::string& path, const Program& program,
                     const std::map<std::string, std::string>& metadata = {});

/// Loads a save_checkpoint file into a train program compiled for the same model and
/// optimizer and returns the user metadata. Everything is validated first: a file that is
/// not a training checkpoint, another optimizer (kind or settings but lr), other parameters
/// or state tensors are a tg::CheckpointError naming the file and what differs, and nothing
/// changes. The program's schedule is its own (a function cannot be saved); its position is
/// restored.
std::map<std::string, std::string> load_checkpoint(const std::string& path, Program& program);

}  // namespace tg
