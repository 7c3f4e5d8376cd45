// Typed exceptions. Every misuse of the library ends in one of these with a message a user
// can act on: it starts with the op or API name in brackets and names the shapes, inputs,
// device or file involved, and (for trace-time errors) the user's file:line.
#pragma once
#include <stdexcept>
#include <string>

namespace tg {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
/// Shapes or dtypes that do not fit an op, found while tracing. Names the op, the shapes
/// and the caller's file:line.
struct ShapeError : Error {
  using Error::Error;
};
/// A wrong input or parameter handed to a compiled program: unknown or missing name,
/// wrong dtype, wrong element count.
struct InputError : Error {
  using Error::Error;
};
/// A device that is missing, unusable or out of memory.
struct DeviceError : Error {
  using Error::Error;
};
/// A checkpoint file that cannot be written or read back.
struct CheckpointError : Error {
  using Error::Error;
};
/// A tokenizer file that cannot be read or holds what the tokenizer does not support (another
/// model type, normalizer or pre-tokenizer). Names the file and what was found.
struct TokenizerError : Error {
  using Error::Error;
};
/// A chat template that cannot be found, does not parse (line and column) or fails while
/// rendering (its raise_exception() message, or a run-time error naming the line).
struct TemplateError : Error {
  using Error::Error;
};
/// Several processes that cannot start or keep working together: a launch variable missing or
/// malformed, a rank that cannot be reached or never joins, a peer that exited. Names the rank
/// and, for the rendezvous, host:port.
struct DistributedError : Error {
  using Error::Error;
};

}  // namespace tg
