// Images for vision models against Pillow 12.3 and transformers 5.17 (tests/image/
// gen_image_golden.py, run on the GPU machine): read_image of the PNGs Pillow wrote,
// resize_image against Pillow's Image.resize(BILINEAR) to the bit (shrinking, stretching,
// both at once and the same size), and ImageProcessor against ViTImageProcessor (its Pillow
// backend): pixel_values, and tiny_vit_cls's logits on them on every backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "tensorgrad/image.h"
#include "tensorgrad/pretrained.h"
#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

using namespace tg;
namespace fs = std::filesystem;

std::string data(const std::string& name) { return std::string(TG_TEST_DATA_DIR) + "/" + name; }

// Image files need stb_image (libstb-dev, which scripts/setup.sh installs); a build without it
// skips the tests that read or write them, and checks that the error says how to get it.
#define SKIP_WITHOUT_IMAGE_FILES() \
  if (!image_files_supported()) GTEST_SKIP() << "this build of tensorgrad has no stb_image"

TEST(Image, WithoutStbReadingSaysHowToGetIt) {
  if (image_files_supported()) GTEST_SKIP() << "this build reads image files";
  try {
    read_image(data("image/photo.png"));
    ADD_FAILURE() << "read an image without stb_image";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("libstb-dev"), std::string::npos) << e.what();
  }
  EXPECT_THROW(write_png(Image{1, 1, 1, {0}}, "x.png"), Error);
}

TEST(Image, ReadsPngAndWritesItBack) {
  SKIP_WITHOUT_IMAGE_FILES();
  const Image photo = read_image(data("image/photo.png"));
  EXPECT_EQ(photo.height, 23);
  EXPECT_EQ(photo.width, 31);
  EXPECT_EQ(photo.channels, 3);
  // The golden's own-size entry is Pillow's decoding of the same file.
  const auto g = read_safetensors(data("image/resized.safetensors"));
  const std::span<const int32_t> want = g.at("23x31").i32();
  ASSERT_EQ(want.size(), photo.pixels.size());
  EXPECT_TRUE(std::equal(want.begin(), want.end(), photo.pixels.begin()));
  // Gray: the value in every channel as RGB, itself with one channel.
  const Image gray = read_image(data("image/gray.png"), 1), rgb = read_image(data("image/gray.png"));
  ASSERT_EQ(gray.height, 12);
  ASSERT_EQ(gray.width, 9);
  for (int64_t y = 0; y < 12; ++y)
    for (int64_t x = 0; x < 9; ++x)
      for (int64_t c = 0; c < 3; ++c) ASSERT_EQ(rgb.at(y, x, c), gray.at(y, x, 0));
  const std::string out = (fs::path(::testing::TempDir()) / "tg_image_round_trip.png").string();
  write_png(photo, out);
  EXPECT_EQ(read_image(out).pixels, photo.pixels);
}

TEST(Image, ReadErrorsNameTheFile) {
  SKIP_WITHOUT_IMAGE_FILES();
  for (const std::string& bad : {data("image/missing.png"), data("tiny_vit_cls/config.json")}) {
    try {
      read_image(bad);
      ADD_FAILURE() << "read " << bad;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(read_image(data("image/photo.png"), 5), InputError);
  EXPECT_THROW(resize_image(Image{2, 2, 3, {1, 2, 3}}, 4, 4), InputError);
  EXPECT_THROW(resize_image(read_image(data("image/photo.png")), 0, 4), InputError);
}

TEST(Image, ResizeIsPillows) {
  SKIP_WITHOUT_IMAGE_FILES();
  const Image photo = read_image(data("image/photo.png"));
  const auto g = read_safetensors(data("image/resized.safetensors"));
  for (const auto& [name, want] : g) {
    const int64_t h = want.shape()[0], w = want.shape()[1];
    const Image got =
        resize_image(photo, h, w, name.starts_with("bicubic") ? Resample::kBicubic : Resample::kBilinear);
    ASSERT_EQ(got.height, h);
    ASSERT_EQ(got.width, w);
    const std::span<const int32_t> v = want.i32();
    int64_t differ = 0;
    for (size_t i = 0; i < v.size(); ++i) differ += v[i] != got.pixels[i];
    EXPECT_EQ(differ, 0) << name << ": " << differ << " of " << v.size() << " values differ from Pillow's";
  }
}

TEST(Image, ProcessorIsTransformers) {
  SKIP_WITHOUT_IMAGE_FILES();
  const ImageProcessor p = ImageProcessor::load(data("tiny_vit_cls"));
  EXPECT_EQ(p.height, 16);
  EXPECT_EQ(p.width, 16);
  EXPECT_TRUE(p.do_resize && p.do_rescale && p.do_normalize);
  EXPECT_EQ(p.mean, (std::vector<double>{0.5, 0.5, 0.5}));
  const std::vector<Image> images{read_image(data("image/photo.png")), read_image(data("image/gray.png"))};
  const HostTensor pixels = p(images);
  const auto g = read_safetensors(data("image/pixels.safetensors"));
  ASSERT_EQ(pixels.shape(), g.at("pixels").shape());
  const std::span<const float> got = pixels.f32(), want = g.at("pixels").f32();
  float worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  EXPECT_EQ(worst, 0.0f) << "pixel_values differ from ViTImageProcessor's by up to " << worst;
  // The model on them, as transformers computed it.
  const pretrained::Model m = pretrained::load(data("tiny_vit_cls"));
  for (const Device& device : tg::testing::all_devices()) {
    Program logits = compile_forward(*m.module, [&](Tensor x) { return m.logits(x); },
                                     {.inputs = {{"pixels", pixels.shape(), DType::kF32}}, .device = device});
    m.upload(logits);
    const double d = tg::testing::rel_diff(logits.run({{"pixels", got}}).f32(), g.at("logits").f32());
    EXPECT_LT(d, 1e-4) << device.str();
  }
}

// Bicubic resampling, a shortest-edge resize and a center crop: CLIPImageProcessor's and
// DeiTImageProcessor's pixel values, as transformers' Pillow backend computes them.
TEST(Image, CropsAreTransformers) {
  SKIP_WITHOUT_IMAGE_FILES();
  const std::vector<Image> images{read_image(data("image/photo.png")), read_image(data("image/gray.png"))};
  const auto g = read_safetensors(data("image/crops.safetensors"));
  const ImageProcessor clip = ImageProcessor::load(data("image/clip")),
                       deit = ImageProcessor::load(data("image/deit"));
  EXPECT_EQ(clip.shortest_edge, 18);
  EXPECT_EQ(clip.resample, Resample::kBicubic);
  EXPECT_TRUE(clip.do_center_crop);
  EXPECT_EQ(deit.shortest_edge, 0);
  EXPECT_EQ(deit.height, 20);
  EXPECT_EQ(deit.crop_width, 12);
  for (const auto& [name, p] :
       {std::pair<std::string, const ImageProcessor*>{"clip", &clip}, {"deit", &deit}}) {
    const HostTensor pixels = (*p)(images);
    ASSERT_EQ(pixels.shape(), g.at(name).shape()) << name;
    const std::span<const float> got = pixels.f32(), want = g.at(name).f32();
    float worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
    EXPECT_EQ(worst, 0.0f) << name << ": pixel_values differ from transformers' by up to " << worst;
  }
}

TEST(Image, ProcessorConfigs) {
  SKIP_WITHOUT_IMAGE_FILES();
  const fs::path dir = fs::path(::testing::TempDir()) / "tg_image_processor";
  fs::create_directories(dir);
  fs::remove(dir / "preprocessor_config.json");
  std::ofstream(dir / "config.json") << R"({"image_size": 40})";
  EXPECT_EQ(ImageProcessor::load(dir.string()).height, 40);  // no preprocessor_config.json
  const auto with = [&](const std::string& text) {
    std::ofstream(dir / "preprocessor_config.json") << text;
    return ImageProcessor::load(dir.string());
  };
  const ImageProcessor p =
      with(R"({"size": 24, "image_mean": 0.25, "image_std": [1, 2, 4], "do_rescale": false})");
  EXPECT_EQ(p.width, 24);
  EXPECT_EQ(p.shortest_edge, 0);  // one number: a square, but the shortest edge for CLIP's processor
  EXPECT_EQ(with(R"({"size": 24, "image_processor_type": "CLIPImageProcessor"})").shortest_edge, 24);
  EXPECT_EQ(p.mean, (std::vector<double>{0.25, 0.25, 0.25}));
  EXPECT_FALSE(p.do_rescale);
  for (const char* bad :
       {R"({"resample": 1})", R"({"size": {"longest_edge": 224}})", R"({"crop_pct": 0.875})",
        R"({"do_center_crop": true, "crop_size": {"height": 0, "width": 4}})",
        R"({"image_mean": [0.5, 0.5], "image_std": [0.5, 0.5, 0.5]})", R"({"do_resize": "yes"})", "not json"})
    EXPECT_THROW(with(bad), CheckpointError) << bad;
  // Images the processor cannot take.
  const Image photo = read_image(data("image/photo.png"));
  const std::vector<Image> two{photo, read_image(data("image/gray.png"))};
  ImageProcessor fixed = p;  // no resize: 23 × 31 and 12 × 9 in one batch
  fixed.do_resize = false;
  EXPECT_THROW(fixed(two), InputError);
  ImageProcessor edge = p;  // a shortest-edge resize without a crop: 24 × 32 and 32 × 24
  edge.shortest_edge = 24;
  EXPECT_THROW(edge(two), InputError);
  ImageProcessor crop = p;  // a crop larger than the resized image
  crop.do_center_crop = true;
  crop.crop_height = 30;
  EXPECT_THROW(crop(two), InputError);
  const Image gray = read_image(data("image/gray.png"), 1);
  EXPECT_THROW(p(std::span<const Image>(&gray, 1)), InputError);  // one channel, not three
}

}  // namespace
