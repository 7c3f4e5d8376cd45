// tg::ImageProcessor: preprocessor_config.json read, and transformers' image processing done.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

#include "tensorgrad/errors.h"
#include "tensorgrad/image.h"

namespace tg {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

[[noreturn]] void processor_fail(const std::string& file, const std::string& what) {
  throw CheckpointError("[ImageProcessor::load] " + file + ": " + what);
}

json read_file(const fs::path& path) {
  std::ifstream in(path);
  if (!in) processor_fail(path.string(), "cannot be read");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    processor_fail(path.string(), std::string("not JSON: ") + e.what());
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
  if (!ok)
    processor_fail(file, std::string("\"") + key + "\" is " + v.dump() + ", which is not what it should be");
  return v.get<T>();
}

std::vector<double> per_channel(const json& c, const std::string& file, const char* key,
                                const std::vector<double>& fallback) {
  if (!c.contains(key) || c[key].is_null()) return fallback;
  const json& v = c[key];
  if (v.is_number()) return std::vector<double>(fallback.size(), v.get<double>());
  if (!v.is_array() || v.empty() ||
      !std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_number(); }))
    processor_fail(file, std::string("\"") + key + "\" is " + v.dump() + ", expected a number per channel");
  return v.get<std::vector<double>>();
}
// A size as preprocessor_config.json gives it: {"height", "width"}, {"shortest_edge"} (into
// `edge`), or one number, a square unless `number_is_edge`.
void read_size(const json& s, const std::string& file, const char* key, bool number_is_edge, int64_t& height,
               int64_t& width, int64_t* edge) {
  if (s.is_number_integer() && !number_is_edge) {
    height = width = s.get<int64_t>();
  } else if (s.is_number_integer() && edge) {
    *edge = s.get<int64_t>();
    if (*edge <= 0)
      processor_fail(file, std::string("\"") + key + "\" " + s.dump() + " is not a positive size");
  } else if (s.is_object() && s.size() == 2 && s.contains("height") && s.contains("width")) {
    height = get<int64_t>(s, file, "height", 0);
    width = get<int64_t>(s, file, "width", 0);
  } else if (s.is_object() && s.size() == 1 && s.contains("shortest_edge") && edge) {
    *edge = get<int64_t>(s, file, "shortest_edge", 0);
  } else {
    processor_fail(file, std::string("\"") + key + "\" is " + s.dump() + ": {\"height\", \"width\"}" +
                             (edge ? ", {\"shortest_edge\"}" : "") + " or one number is implemented");
  }
  if (height <= 0 || width <= 0 || (edge && *edge < 0) || (edge && s.contains("shortest_edge") && *edge == 0))
    processor_fail(file, std::string("\"") + key + "\" " + s.dump() + " is not a positive size");
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
  if (!c.is_object()) processor_fail(file, "not a JSON object");
  // A size of one number: CLIP's processor reads it as the shortest edge, the others as a square.
  const bool clip =
      (c.contains("image_processor_type") && c["image_processor_type"] == "CLIPImageProcessor") ||
      (c.contains("feature_extractor_type") && c["feature_extractor_type"] == "CLIPFeatureExtractor");
  p.do_resize = get<bool>(c, file, "do_resize", true);
  if (c.contains("size") && !c["size"].is_null())
    read_size(c["size"], file, "size", clip, p.height, p.width, &p.shortest_edge);
  const int64_t resample = get<int64_t>(c, file, "resample", 2);
  if (p.do_resize && resample != 2 && resample != 3)
    processor_fail(file,
                   "\"resample\" " + std::to_string(resample) +
                       " is not implemented (2, bilinear, and 3, bicubic, are; 1 is Lanczos, 0 nearest)");
  p.resample = resample == 3 ? Resample::kBicubic : Resample::kBilinear;
  if (c.contains("crop_pct") && !c["crop_pct"].is_null())
    processor_fail(file, "\"crop_pct\" (a resize to size / crop_pct before the crop) is not implemented");
  p.do_center_crop = get<bool>(c, file, "do_center_crop", false);
  if (p.do_center_crop && c.contains("crop_size") && !c["crop_size"].is_null())
    read_size(c["crop_size"], file, "crop_size", false, p.crop_height, p.crop_width, nullptr);
  p.do_rescale = get<bool>(c, file, "do_rescale", true);
  p.rescale_factor = get<double>(c, file, "rescale_factor", 1.0 / 255.0);
  p.do_normalize = get<bool>(c, file, "do_normalize", true);
  p.mean = per_channel(c, file, "image_mean", p.mean);
  p.std = per_channel(c, file, "image_std", p.std);
  if (p.mean.size() != p.std.size())
    processor_fail(file, "image_mean has " + std::to_string(p.mean.size()) + " channels, image_std " +
                             std::to_string(p.std.size()));
  return p;
}

namespace {

std::string size_str(int64_t h, int64_t w) { return std::to_string(h) + " × " + std::to_string(w); }

// transformers' shortest-edge resize: the shorter side becomes `edge`, the longer one
// int(edge · long / short), rounded down.
std::pair<int64_t, int64_t> shortest_edge_size(int64_t h, int64_t w, int64_t edge) {
  const bool tall = w <= h;
  const auto longer = static_cast<int64_t>(static_cast<double>(edge) * static_cast<double>(tall ? h : w) /
                                           static_cast<double>(tall ? w : h));
  return tall ? std::pair{longer, edge} : std::pair{edge, longer};
}

// The crop_h × crop_w window at the center, its corner at ((h − crop_h) / 2, (w − crop_w) / 2)
// rounded down.
Image center_crop(const Image& im, int64_t crop_h, int64_t crop_w) {
  const int64_t top = (im.height - crop_h) / 2, left = (im.width - crop_w) / 2;
  Image out{crop_h, crop_w, im.channels, {}};
  out.pixels.reserve(static_cast<size_t>(crop_h * crop_w * im.channels));
  for (int64_t y = 0; y < crop_h; ++y)
    for (int64_t x = 0; x < crop_w; ++x)
      for (int64_t c = 0; c < im.channels; ++c) out.pixels.push_back(im.at(top + y, left + x, c));
  return out;
}

}  // namespace

HostTensor ImageProcessor::operator()(std::span<const Image> images) const {
  const auto C = static_cast<int64_t>(mean.size());
  if (images.empty()) throw InputError("[ImageProcessor] no images");
  std::vector<float> out;
  int64_t H = 0, W = 0;
  for (size_t i = 0; i < images.size(); ++i) {
    const Image& raw = images[i];
    if (raw.height <= 0 || raw.width <= 0 ||
        raw.pixels.size() != static_cast<size_t>(raw.height * raw.width * raw.channels))
      throw InputError("[ImageProcessor] image " + std::to_string(i) + " holds " +
                       std::to_string(raw.pixels.size()) + " bytes for " + size_str(raw.height, raw.width) +
                       " × " + std::to_string(raw.channels) + " channels (an empty or inconsistent Image)");
    if ((do_resize && shortest_edge <= 0 && (height <= 0 || width <= 0)) ||
        (do_center_crop && (crop_height <= 0 || crop_width <= 0)))
      throw InputError("[ImageProcessor] the resize and crop sizes must be positive");
    const std::string which =
        "[ImageProcessor] image " + std::to_string(i) + " (" + size_str(raw.height, raw.width) + ")";
    if (raw.channels != C)
      throw InputError(which + " has " + std::to_string(raw.channels) +
                       " channels; the processor normalizes " + std::to_string(C) + " (read_image(path, " +
                       std::to_string(C) + "))");
    Image im = raw;
    if (do_resize) {
      const auto [h, w] = shortest_edge > 0 ? shortest_edge_size(raw.height, raw.width, shortest_edge)
                                            : std::pair{height, width};
      im = resize_image(raw, h, w, resample);
    }
    if (do_center_crop) {
      if (im.height < crop_height || im.width < crop_width)
        throw InputError(which + " is " + size_str(im.height, im.width) +
                         " before the crop, smaller than its " + size_str(crop_height, crop_width));
      im = center_crop(im, crop_height, crop_width);
    }
    if (i == 0) {
      H = im.height, W = im.width;
      out.reserve(static_cast<size_t>(static_cast<int64_t>(images.size()) * C * H * W));
    } else if (im.height != H || im.width != W) {
      throw InputError(which + " comes out " + size_str(im.height, im.width) + ", image 0 " + size_str(H, W) +
                       ": one batch needs one size (resize to a fixed size, or crop)");
    }
    // As transformers computes it: the rescale in double rounded to f32, then (x − mean) / std
    // in f32.
    for (int64_t c = 0; c < C; ++c) {
      const auto m = static_cast<float>(do_normalize ? mean[static_cast<size_t>(c)] : 0.0);
      const auto s = static_cast<float>(do_normalize ? std[static_cast<size_t>(c)] : 1.0);
      for (int64_t y = 0; y < H; ++y)
        for (int64_t x = 0; x < W; ++x) {
          const double v = im.at(y, x, c);
          const auto r = static_cast<float>(do_rescale ? v * rescale_factor : v);
          out.push_back(do_normalize ? (r - m) / s : r);
        }
    }
  }
  return HostTensor::f32(std::move(out), {static_cast<int64_t>(images.size()), C, H, W});
}

}  // namespace tg
