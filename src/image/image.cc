// Image files through stb_image (Debian's libstb-dev), and Pillow's bilinear and bicubic resizes.
#include "tensorgrad/image.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "tensorgrad/errors.h"

#ifdef TG_HAVE_STB
#include <stb_image.h>
#include <stb_image_write.h>
#endif

namespace tg {
namespace {

// Pillow's resampling, one pass over one axis: each output sample is a weighted sum of the
// input samples in [first, first + count), with fixed-point weights of kBits fraction bits
// (Pillow's PRECISION_BITS for 8-bit images: 32 − 8 − 2), rounded half up and clipped to 8 bits.
constexpr int kBits = 22;

struct Taps {
  std::vector<int64_t> first, count;
  std::vector<int64_t> weights;  // count[i] of them from i · stride
  int64_t stride = 0;
};

// Pillow's filters over their support: the triangle, and Keys' cubic with a = −0.5.
double bilinear(double x) {
  x = std::abs(x);
  return x < 1 ? 1 - x : 0;
}
double bicubic(double x) {
  constexpr double a = -0.5;
  x = std::abs(x);
  if (x < 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return (((x - 5) * x + 8) * x - 4) * a;
  return 0;
}

// Output sample i sits at (i + 0.5)·scale in the input (scale = in / out); the filter is
// stretched by max(scale, 1), so a shrink averages over every input sample it covers. The
// weights are normalised to sum to 1 before their conversion to fixed point.
Taps taps(int64_t in, int64_t out, Resample filter) {
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double stretch = std::max(scale, 1.0), inverse = 1.0 / stretch;
  const double support = (filter == Resample::kBicubic ? 2.0 : 1.0) * stretch;
  double (*const f)(double) = filter == Resample::kBicubic ? bicubic : bilinear;
  Taps t;
  t.stride = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  t.weights.assign(static_cast<size_t>(out * t.stride), 0);
  std::vector<double> k(static_cast<size_t>(t.stride));
  for (int64_t i = 0; i < out; ++i) {
    const double center = (static_cast<double>(i) + 0.5) * scale;
    // Bounds truncated toward zero, as Pillow's (int) casts are.
    const int64_t lo = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    const int64_t hi = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in);
    const int64_t n = hi - lo;
    double total = 0;
    for (int64_t x = 0; x < n; ++x) {
      k[static_cast<size_t>(x)] = f((static_cast<double>(x + lo) - center + 0.5) * inverse);
      total += k[static_cast<size_t>(x)];
    }
    for (int64_t x = 0; x < n; ++x) {
      const double w = total != 0 ? k[static_cast<size_t>(x)] / total : 0;
      t.weights[static_cast<size_t>(i * t.stride + x)] =
          static_cast<int64_t>(w * (1 << kBits) + (w < 0 ? -0.5 : 0.5));
    }
    t.first.push_back(lo);
    t.count.push_back(n);
  }
  return t;
}

uint8_t clip8(int64_t acc) {
  const int64_t v = acc >> kBits;
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

// Resamples along the rows (horizontal) or down the columns.
Image pass(const Image& in, int64_t out_size, bool horizontal, Resample filter) {
  const Taps t = taps(horizontal ? in.width : in.height, out_size, filter);
  Image out{horizontal ? in.height : out_size, horizontal ? out_size : in.width, in.channels, {}};
  out.pixels.resize(static_cast<size_t>(out.height * out.width * out.channels));
  for (int64_t y = 0; y < out.height; ++y)
    for (int64_t x = 0; x < out.width; ++x) {
      const int64_t i = horizontal ? x : y;
      for (int64_t c = 0; c < in.channels; ++c) {
        int64_t acc = int64_t{1} << (kBits - 1);
        for (int64_t j = 0; j < t.count[static_cast<size_t>(i)]; ++j) {
          const int64_t s = t.first[static_cast<size_t>(i)] + j;
          acc += static_cast<int64_t>(horizontal ? in.at(y, s, c) : in.at(s, x, c)) *
                 t.weights[static_cast<size_t>(i * t.stride + j)];
        }
        out.pixels[static_cast<size_t>((y * out.width + x) * out.channels + c)] = clip8(acc);
      }
    }
  return out;
}

void check_image(const Image& im, const char* api) {
  if (im.height <= 0 || im.width <= 0 || im.channels < 1 || im.channels > 4 ||
      im.pixels.size() != static_cast<size_t>(im.height * im.width * im.channels))
    throw InputError(std::string("[") + api + "] an image of " + std::to_string(im.height) + " × " +
                     std::to_string(im.width) + " × " + std::to_string(im.channels) + " channels holds " +
                     std::to_string(im.pixels.size()) +
                     " bytes: expected a positive size, 1 to 4 channels and " +
                     "height · width · channels bytes");
}

}  // namespace

Image resize_image(const Image& image, int64_t height, int64_t width, Resample filter) {
  check_image(image, "resize_image");
  if (height <= 0 || width <= 0)
    throw InputError("[resize_image] the size must be positive, got " + std::to_string(height) + " × " +
                     std::to_string(width));
  if (filter != Resample::kBilinear && filter != Resample::kBicubic)
    throw InputError("[resize_image] resampling filter " + std::to_string(static_cast<int>(filter)) +
                     ": bilinear (2) and bicubic (3) are implemented");
  // Across the rows first, as Pillow.
  Image out = image.width != width ? pass(image, width, true, filter) : image;
  return out.height != height ? pass(out, height, false, filter) : out;
}

bool image_files_supported() {
#ifdef TG_HAVE_STB
  return true;
#else
  return false;
#endif
}

#ifdef TG_HAVE_STB

Image read_image(const std::string& path, int channels) {
  if (channels < 1 || channels > 4)
    throw InputError("[read_image] channels must be 1 to 4, got " + std::to_string(channels));
  int w = 0, h = 0, n = 0;
  std::unique_ptr<stbi_uc, void (*)(void*)> data(stbi_load(path.c_str(), &w, &h, &n, channels),
                                                 stbi_image_free);
  if (!data)
    throw InputError("[read_image] " + path + ": " +
                     (stbi_failure_reason() ? stbi_failure_reason() : "unreadable"));
  Image im{h, w, channels, {}};
  im.pixels.assign(data.get(), data.get() + static_cast<size_t>(h) * static_cast<size_t>(w) *
                                                static_cast<size_t>(channels));
  return im;
}

void write_png(const Image& image, const std::string& path) {
  check_image(image, "write_png");
  if (!stbi_write_png(path.c_str(), static_cast<int>(image.width), static_cast<int>(image.height),
                      static_cast<int>(image.channels), image.pixels.data(),
                      static_cast<int>(image.width * image.channels)))
    throw InputError("[write_png] cannot write " + path);
}

#else

Image read_image(const std::string& path, int) {
  throw Error(
      "[read_image] " + path +
      ": this build of tensorgrad has no stb_image (Debian: apt-get install libstb-dev, then rebuild)");
}
void write_png(const Image&, const std::string& path) {
  throw Error(
      "[write_png] " + path +
      ": this build of tensorgrad has no stb_image (Debian: apt-get install libstb-dev, then rebuild)");
}

#endif

}  // namespace tg
