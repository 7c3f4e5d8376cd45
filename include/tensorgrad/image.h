// Images for vision models: reading image files, Pillow's bilinear resize, and the
// preprocessing a Hugging Face folder's preprocessor_config.json describes (what transformers'
// image processors do before a model such as nn::ViT sees pixel_values).
//
//   tg::ImageProcessor processor = tg::ImageProcessor::load("vit-base-patch16-224");
//   const tg::Image photo = tg::read_image("cat.jpg");                    // RGB, 8 bits
//   tg::HostTensor pixels = processor({&photo, 1});                      // f32 [1, 3, 224, 224]
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tensorgrad/program.h"

namespace tg {

/// An 8-bit image: rows top to bottom, each pixel's channels side by side (RGB for 3).
struct Image {
  int64_t height = 0, width = 0, channels = 0;
  std::vector<uint8_t> pixels;  // height · width · channels
  uint8_t at(int64_t y, int64_t x, int64_t c) const {
    return pixels[static_cast<size_t>((y * width + x) * channels + c)];
  }
};

/// Reads a PNG, JPEG, BMP, GIF (its first frame), TGA or PNM file (stb_image) as `channels`
/// channels: 3 gives RGB (a gray image's value in each, alpha dropped), 1 gray, 4 RGBA. Throws
/// InputError naming the file and what is wrong with it (missing, not an image, truncated); Error
/// when the library was built without stb_image (Debian: libstb-dev).
Image read_image(const std::string& path, int channels = 3);
/// Writes `image` (1 to 4 channels) as a PNG file; InputError when it cannot.
void write_png(const Image& image, const std::string& path);

/// `image` resized to height × width as Pillow's Image.resize(…, BILINEAR) does, to the bit: the
/// triangle filter, stretched over the scale when shrinking (antialiased), applied across the
/// rows and then down the columns with Pillow's fixed-point weights and its rounding to 8 bits
/// after each pass. The same size returns a copy.
Image resize_bilinear(const Image& image, int64_t height, int64_t width);

/// What preprocessor_config.json asks for (transformers' ViTImageProcessor and the processors
/// with its fields): resize to size (bilinear: resample 2), rescale by rescale_factor, normalize
/// by image_mean and image_std, per channel, into pixel_values [B, C, H, W].
struct ImageProcessor {
  bool do_resize = true;
  int64_t height = 224, width = 224;
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  std::vector<double> mean = {0.5, 0.5, 0.5}, std = {0.5, 0.5, 0.5};

  /// The folder's preprocessor_config.json. Without one: these defaults, with config.json's
  /// image_size as the size when it names one. CheckpointError for a file it cannot follow (a
  /// resampling other than bilinear, a center crop, a size given as shortest_edge, a mean or
  /// std of another channel count, a field of the wrong type).
  static ImageProcessor load(const std::string& folder);

  /// pixel_values f32 [B, C, height, width] for images of C = mean.size() channels (any sizes
  /// when do_resize; else each must already be height × width). InputError otherwise.
  HostTensor operator()(std::span<const Image> images) const;
};

}  // namespace tg
