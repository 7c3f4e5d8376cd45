// Tokenizer::encode_batch: several texts as one padded [rows, length] input (see tokenizer.h).
// Truncation follows `tokenizers`: the text's own ids are cut to what the post-processor's
// tokens leave of max_length, then wrapped.
#include <algorithm>

#include "tensorgrad/errors.h"
#include "text/tokenizer_impl.h"

namespace tg {

std::optional<int32_t> Tokenizer::pad_id() const {
  if (!impl_) throw InputError("[Tokenizer] used before Tokenizer::load");
  return impl_->pad;
}

EncodedBatch Tokenizer::encode_batch(const std::vector<std::string>& texts,
                                     const BatchOptions& options) const {
  if (!impl_) throw InputError("[Tokenizer] used before Tokenizer::load");
  const Impl& t = *impl_;
  const int64_t specials = options.add_special ? static_cast<int64_t>(t.prefix.size() + t.suffix.size()) : 0;
  if (options.max_length < 0 || (options.max_length > 0 && options.max_length <= specials))
    throw InputError("[Tokenizer::encode_batch] max_length " + std::to_string(options.max_length) +
                     " leaves no room for a text beside the " + std::to_string(specials) + " special tokens");
  if (options.pad_to_max_length && options.max_length == 0)
    throw InputError("[Tokenizer::encode_batch] pad_to_max_length needs a max_length");
  EncodedBatch out;
  out.rows = static_cast<int64_t>(texts.size());
  std::vector<std::vector<int32_t>> rows;
  for (const std::string& text : texts) {
    std::vector<int32_t> body = encode(text, /*add_special=*/false);
    if (options.max_length > 0 && static_cast<int64_t>(body.size()) > options.max_length - specials) {
      body.resize(static_cast<size_t>(options.max_length - specials));
      ++out.truncated;
    }
    std::vector<int32_t> ids = options.add_special ? t.prefix : std::vector<int32_t>();
    ids.insert(ids.end(), body.begin(), body.end());
    if (options.add_special) ids.insert(ids.end(), t.suffix.begin(), t.suffix.end());
    out.lengths.push_back(static_cast<int64_t>(ids.size()));
    out.length = std::max(out.length, out.lengths.back());
    rows.push_back(std::move(ids));
  }
  if (options.pad_to_max_length) out.length = options.max_length;
  const std::optional<int32_t> pad = options.pad_id ? options.pad_id : t.pad;
  const bool padded =
      std::any_of(out.lengths.begin(), out.lengths.end(), [&](int64_t n) { return n < out.length; });
  if (padded && !pad)
    throw InputError("[Tokenizer::encode_batch] " + t.file +
                     " names no padding token ([PAD], <pad>, <|pad|> or a \"padding\" pad_id): pass "
                     "BatchOptions::pad_id");
  for (const std::vector<int32_t>& ids : rows) {
    const auto n = static_cast<int64_t>(ids.size());
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    out.mask.insert(out.mask.end(), static_cast<size_t>(n), 1);
    out.ids.insert(out.ids.end(), static_cast<size_t>(out.length - n), pad.value_or(0));
    out.mask.insert(out.mask.end(), static_cast<size_t>(out.length - n), 0);
  }
  return out;
}

}  // namespace tg
