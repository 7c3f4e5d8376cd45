// The GGUF writer (see gguf.h for the layout) and ggml's Q8_0 quantizer.
#include <cmath>
#include <cstring>

#include "io/atomic_file.h"
#include "io/gguf.h"
#include "tensorgrad/dtype.h"
#include "tensorgrad/errors.h"

namespace tg::io {
namespace {

using nlohmann::json;

constexpr uint64_t kAlignment = 32;

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

// One value of type `type` from its JSON.
void put_value(std::string& out, uint32_t type, const json& v, const std::string& key) {
  switch (type) {
    case kGgufU32: put<uint32_t>(out, v.get<uint32_t>()); return;
    case kGgufI32: put<int32_t>(out, v.get<int32_t>()); return;
    case kGgufF32: put<float>(out, v.get<float>()); return;
    case kGgufBool: put<uint8_t>(out, v.get<bool>() ? 1 : 0); return;
    case kGgufString: put_string(out, v.get<std::string>()); return;
    case kGgufU64: put<uint64_t>(out, v.get<uint64_t>()); return;
    default:
      throw CheckpointError("the key '" + key + "': the value type " + std::to_string(type) +
                            " is not written");
  }
}

}  // namespace

void write_gguf(const std::string& path, const std::vector<GgufKv>& kvs,
                const std::vector<GgufOut>& tensors) {
  std::string header = "GGUF";
  put<uint32_t>(header, 3);
  put<uint64_t>(header, tensors.size());
  put<uint64_t>(header, kvs.size());
  try {
    for (const GgufKv& kv : kvs) {
      put_string(header, kv.key);
      put<uint32_t>(header, kv.type);
      if (kv.type == kGgufArray) {
        put<uint32_t>(header, kv.item);
        put<uint64_t>(header, kv.value.size());
        for (const json& v : kv.value) put_value(header, kv.item, v, kv.key);
      } else {
        put_value(header, kv.type, kv.value, kv.key);
      }
    }
  } catch (const json::exception& e) {
    throw CheckpointError(path + ": a metadata value of the wrong type: " + e.what());
  } catch (const CheckpointError& e) {
    throw CheckpointError(path + ": " + e.what());
  }
  uint64_t offset = 0;
  for (const GgufOut& t : tensors) {
    put_string(header, t.name);
    put<uint32_t>(header, static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it)
      put<uint64_t>(header, static_cast<uint64_t>(*it));
    put<uint32_t>(header, t.type);
    put<uint64_t>(header, offset);
    offset += (t.bytes + kAlignment - 1) / kAlignment * kAlignment;
  }
  header.resize((header.size() + kAlignment - 1) / kAlignment * kAlignment, '\0');
  try {
    write_file_atomically(path, [&](const ByteSink& sink) {
      sink(header.data(), header.size());
      const char zeros[kAlignment] = {};
      for (const GgufOut& t : tensors) {
        const std::vector<uint8_t> bytes = t.data();
        if (bytes.size() != t.bytes)
          throw CheckpointError("tensor '" + t.name + "' made " + std::to_string(bytes.size()) +
                                " bytes, not " + std::to_string(t.bytes));
        sink(bytes.data(), bytes.size());
        sink(zeros, (kAlignment - bytes.size() % kAlignment) % kAlignment);
      }
    });
  } catch (const CheckpointError& e) {
    throw CheckpointError(path + ": " + e.what());
  } catch (const std::runtime_error& e) {  // the file system's
    throw CheckpointError(path + ": " + e.what());
  }
}

std::vector<uint8_t> quantize_q4_0(std::span<const float> values) {
  std::vector<uint8_t> out(values.size() / 32 * 18);
  for (size_t b = 0; b < values.size() / 32; ++b) {
    const float* x = values.data() + b * 32;
    float amax = 0, m = 0;
    for (int j = 0; j < 32; ++j)
      if (std::abs(x[j]) > amax) amax = std::abs(x[j]), m = x[j];
    const float d = m / -8.0f, id = d != 0 ? 1.0f / d : 0.0f;
    uint8_t* block = out.data() + b * 18;
    const uint16_t h = f16_from_f32(d);
    std::memcpy(block, &h, 2);
    const auto code = [&](float v) {
      return std::min(15, static_cast<int>(static_cast<int8_t>(v * id + 8.5f)));
    };
    for (int j = 0; j < 16; ++j) block[2 + j] = static_cast<uint8_t>(code(x[j]) | (code(x[j + 16]) << 4));
  }
  return out;
}

std::vector<uint8_t> quantize_q8_0(std::span<const float> values) {
  std::vector<uint8_t> out(values.size() / 32 * 34);
  for (size_t b = 0; b < values.size() / 32; ++b) {
    const float* x = values.data() + b * 32;
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::abs(x[j]));
    const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    uint8_t* block = out.data() + b * 34;
    const uint16_t h = f16_from_f32(d);
    std::memcpy(block, &h, 2);
    for (int j = 0; j < 32; ++j)
      block[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));
  }
  return out;
}

}  // namespace tg::io
