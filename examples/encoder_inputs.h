// Token ids for the BERT-family examples (embed, classify): each text with the tokenizer's
// [CLS] … [SEP] (or <s> … </s>), cut to a length.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <tensorgrad/tensorgrad.h>

namespace example {

/// The ids of each text, wrapped as the tokenizer's post-processor says; a text of more than
/// `n` tokens keeps its first n − 1 and the closing token. `cut` (if given) counts those.
inline std::vector<std::vector<int32_t>> encode_texts(const tg::Tokenizer& tok,
                                                      const std::vector<std::string>& texts, int64_t n,
                                                      size_t* cut = nullptr) {
  std::vector<std::vector<int32_t>> out;
  for (const std::string& t : texts) {
    std::vector<int32_t> ids = tok.encode(t, /*add_special=*/true);
    if (static_cast<int64_t>(ids.size()) > n) {
      const int32_t last = ids.back();
      ids.resize(static_cast<size_t>(n));
      ids.back() = last;
      if (cut) ++*cut;
    }
    out.push_back(std::move(ids));
  }
  return out;
}

}  // namespace example
