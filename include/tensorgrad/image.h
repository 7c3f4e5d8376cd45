// Images for vision models: reading image files, Pillow's bilinear and bicubic resizes, and the
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
/// Whether read_image and write_png work in this build (it found stb_image).
bool image_files_supported();
/// Writes `image` (1 to 4 channels) as a PNG file; InputError when it cannot.
void write_png(const Image& image, const std::string& path);

/// Resampling filters, numbered as Pillow's (and preprocessor_config.json's "resample").
enum class Resample { kBilinear = 2, kBicubic = 3 };

/// `image` resized to height × width as Pillow's Image.resize does for gray and RGB images, to
/// the bit (Pillow premultiplies the alpha of LA and RGBA images, which this does not): the filter
/// (bilinear: the triangle 1 − |t| over |t| < 1; bicubic: Keys' cubic with a = −0.5 over |t| < 2)
/// stretched over the scale when shrinking (antialiased), applied across the rows and then down
/// the columns with Pillow's fixed-point weights and its rounding to 8 bits after each pass. The
/// same size returns a copy.
Image resize_image(const Image& image, int64_t height, int64_t width, Resample filter = Resample::kBilinear);

/// What preprocessor_config.json asks for (transformers' ViT, DeiT and CLIP image processors and
/// those with their fields): resize to size, or the shortest edge to shortest_edge with the
/// other in proportion (rounded down, as transformers does), with the resample filter; crop the
/// center to crop_size; rescale by rescale_factor; normalize by image_mean and image_std, per
/// channel; into pixel_values [B, C, H, W].
struct ImageProcessor {
  bool do_resize = true;
  int64_t height = 224, width = 224;
  /// When positive: the shorter side becomes shortest_edge (height and width unused).
  int64_t shortest_edge = 0;
  Resample resample = Resample::kBilinear;
  bool do_center_crop = false;
  int64_t crop_height = 224, crop_width = 224;
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  std::vector<double> mean = {0.5, 0.5, 0.5}, std = {0.5, 0.5, 0.5};

  /// The folder's preprocessor_config.json. Without one: these defaults, with config.json's
  /// image_size as the size when it names one. A size given as one number is a square (as
  /// ViTImageProcessor reads it) except for CLIPImageProcessor, whose number is the shortest
  /// edge. CheckpointError for a file it cannot follow (a resampling other than bilinear and
  /// bicubic, a size given as a longest edge, crop_pct, a mean or std of another channel count,
  /// a field of the wrong type).
  static ImageProcessor load(const std::string& folder);

  /// pixel_values f32 [B, C, H, W] for images of C = mean.size() channels: H × W is the crop's
  /// size, else the resized size, else the images' own. InputError for images whose sizes come
  /// out different (a shortest-edge resize without a crop, or no resize), smaller than the crop,
  /// or of another channel count.
  HostTensor operator()(std::span<const Image> images) const;
};

}  // namespace tg
