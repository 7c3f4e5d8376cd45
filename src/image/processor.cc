// tg::ImageProcessor: preprocessor_config.json read, and transformers' image processing done.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tensorgrad/errors.h"
#include "tensorgrad/image.h"

namespace tg {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw CheckpointError("[ImageProcessor::load] " + file + ": " + what);
}

json read_file(const fs::path& path) {
  std::ifstream in(path);
  if (!in) fail(path.string(), "cannot be read");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail(path.string(), std::string("not JSON: ") + e.what());
  }
}

template <typename T>
T get(const json& c, const std::string& file, const char* key, T fallback) {
  if (!c.contains(key) || c[key].is_null()) return fallback;
  const json& v = c[key];
  const bool ok = std::is_same_v<T, bool>       ? v.is_boolean()
                  : std::is_integral_v<T>       ? v.is_number_integer()
                  : std::is_floating_point_v<T> ? v.is_number()
                                                : false;
  if (!ok) fail(file, std::string("\"") + key + "\" is " + v.dump() + ", which is not what it should be");
  return v.get<T>();
}

std::vector<double> per_channel(const json& c, const std::string& file, const char* key,
                                const std::vector<double>& fallback) {
  if (!c.contains(key) || c[key].is_null()) return fallback;
  const json& v = c[key];
  if (v.is_number()) return std::vector<double>(fallback.size(), v.get<double>());
  if (!v.is_array() || v.empty() ||
      !std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_number(); }))
    fail(file, std::string("\"") + key + "\" is " + v.dump() + ", expected a number per channel");
  return v.get<std::vector<double>>();
}

}  // namespace

ImageProcessor ImageProcessor::load(const std::string& folder) {
  ImageProcessor p;
  const fs::path dir(folder), path = dir / "preprocessor_config.json";
  if (!fs::exists(path)) {  // the model's own image size, transformers' ViTImageProcessor defaults
    if (fs::exists(dir / "config.json")) {
      const json c = read_file(dir / "config.json");
      if (c.contains("image_size") && c["image_size"].is_number_integer())
        p.height = p.width = c["image_size"].get<int64_t>();
    }
    return p;
  }
  const std::string file = path.string();
  const json c = read_file(path);
  if (!c.is_object()) fail(file, "not a JSON object");
  p.do_resize = get<bool>(c, file, "do_resize", true);
  if (c.contains("size") && !c["size"].is_null()) {
    const json& s = c["size"];
    if (s.is_number_integer()) {
      p.height = p.width = s.get<int64_t>();
    } else if (s.is_object() && s.contains("height") && s.contains("width")) {
      p.height = get<int64_t>(s, file, "height", 0);
      p.width = get<int64_t>(s, file, "width", 0);
    } else {
      fail(file,
           "\"size\" is " + s.dump() +
               ": only {\"height\", \"width\"} (or one number) is implemented, not shortest/longest edges");
    }
    if (p.height <= 0 || p.width <= 0) fail(file, "\"size\" " + s.dump() + " is not a positive size");
  }
  if (const int64_t resample = get<int64_t>(c, file, "resample", 2); p.do_resize && resample != 2)
    fail(file, "\"resample\" " + std::to_string(resample) +
                   " is not implemented (2, bilinear, is; 3 is bicubic, 1 Lanczos, 0 nearest)");
  if (get<bool>(c, file, "do_center_crop", false)) fail(file, "\"do_center_crop\" true is not implemented");
  p.do_rescale = get<bool>(c, file, "do_rescale", true);
  p.rescale_factor = get<double>(c, file, "rescale_factor", 1.0 / 255.0);
  p.do_normalize = get<bool>(c, file, "do_normalize", true);
  p.mean = per_channel(c, file, "image_mean", p.mean);
  p.std = per_channel(c, file, "image_std", p.std);
  if (p.mean.size() != p.std.size())
    fail(file, "image_mean has " + std::to_string(p.mean.size()) + " channels, image_std " +
                   std::to_string(p.std.size()));
  return p;
}

HostTensor ImageProcessor::operator()(std::span<const Image> images) const {
  const auto C = static_cast<int64_t>(mean.size());
  if (images.empty()) throw InputError("[ImageProcessor] no images");
  std::vector<float> out;
  out.reserve(static_cast<size_t>(static_cast<int64_t>(images.size()) * C * height * width));
  for (size_t i = 0; i < images.size(); ++i) {
    const Image& raw = images[i];
    if (raw.channels != C)
      throw InputError("[ImageProcessor] image " + std::to_string(i) + " has " +
                       std::to_string(raw.channels) + " channels; the processor normalizes " +
                       std::to_string(C) + " (read_image(path, " + std::to_string(C) + "))");
    if (!do_resize && (raw.height != height || raw.width != width))
      throw InputError("[ImageProcessor] image " + std::to_string(i) + " is " + std::to_string(raw.height) +
                       " × " + std::to_string(raw.width) + ", and the processor does not resize to " +
                       std::to_string(height) + " × " + std::to_string(width));
    const Image im = do_resize ? resize_bilinear(raw, height, width) : raw;
    // As transformers computes it: the rescale in double rounded to f32, then (x − mean) / std
    // in f32.
    for (int64_t c = 0; c < C; ++c) {
      const auto m = static_cast<float>(do_normalize ? mean[static_cast<size_t>(c)] : 0.0);
      const auto s = static_cast<float>(do_normalize ? std[static_cast<size_t>(c)] : 1.0);
      for (int64_t y = 0; y < height; ++y)
        for (int64_t x = 0; x < width; ++x) {
          const double v = im.at(y, x, c);
          const auto r = static_cast<float>(do_rescale ? v * rescale_factor : v);
          out.push_back(do_normalize ? (r - m) / s : r);
        }
    }
  }
  return HostTensor::f32(std::move(out), {static_cast<int64_t>(images.size()), C, height, width});
}

}  // namespace tg
