// Fuzz target: the GGUF reader. Any file is read or refused with a CheckpointError: its header
// and metadata, every tensor (dequantized), the Hugging Face config.json its metadata describes
// and the tokenizer.json of its tokenizer (or a TokenizerError).
#include <cstddef>
#include <cstdint>
#include <fstream>

#include "fuzz_util.h"
#include "io/gguf.h"
#include "io/pretrained_internal.h"
#include "tensorgrad/errors.h"
#include "text/tokenizer_impl.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const tg_fuzz::MemFile file(data, size);
  tg::io::GgufFile g;
  try {
    g = tg::io::read_gguf(file.path());
  } catch (const tg::CheckpointError&) {
    return 0;
  }
  std::ifstream in(file.path(), std::ios::binary);
  for (const tg::io::GgufTensor& t : g.tensors) {
    const tg::HostTensor v = tg::io::read_gguf_tensor(g, t, in);
    if (v.numel() <= 0) __builtin_trap();
  }
  try {
    (void)tg::pretrained::detail::gguf_config(file.path());
  } catch (const tg::CheckpointError&) {
  }
  try {
    (void)tg::text::tokenizer_json_of_gguf(g);
  } catch (const tg::TokenizerError&) {
  }
  return 0;
}
