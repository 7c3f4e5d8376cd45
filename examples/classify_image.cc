// classify_image: image classification with a Vision Transformer from a Hugging Face folder
// (ViTForImageClassification or DeiT's classifiers: config.json, model.safetensors,
// preprocessor_config.json), e.g. google/vit-base-patch16-224 or
// facebook/deit-base-distilled-patch16-224 and their ImageNet-1k labels.
//
//   ./classify_image --model <folder> --images cat.jpg,dog.png [--top 5] [--batch 16]
//                    [--device cpu|cuda] [--precision fp32|bf16]
//
// Each image (PNG, JPEG, BMP, GIF, TGA or PNM, read as RGB) is resized and normalized as the
// folder's preprocessor_config.json says (tg::ImageProcessor: what transformers' ViT image
// processor computes, to the bit), the model's logits become probabilities, and the likeliest
// labels (config.json's id2label) are drawn as bars.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "args.h"

namespace {

constexpr const char* kUsage =
    "usage: classify_image --model FOLDER --images A.jpg[,B.png,...] [--top 5] [--batch 16]\n"
    "                      [--device cpu|cuda] [--precision fp32|bf16]\n"
    "\n"
    "Classifies each image with a ViTForImageClassification (or DeiT classifier) folder (config.json,\n"
    "model.safetensors and preprocessor_config.json, as transformers saves them): the images are\n"
    "resized and normalized as the folder's image processor says, and the TOP likeliest labels\n"
    "(config.json's id2label) of each are drawn as bars.\n";

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// p as a bar of `width` columns in eighths of a block, padded to width + 1 columns.
std::string bar(double p, int width) {
  const char* eighths[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
  const int units = static_cast<int>(std::lround(std::clamp(p, 0.0, 1.0) * width * 8));
  std::string s;
  for (int i = 0; i < units / 8; ++i) s += "█";
  s += eighths[units % 8];
  return s + std::string(static_cast<size_t>(width + 1 - units / 8 - (units % 8 ? 1 : 0)), ' ');
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (example::Args::wants_help(argc, argv)) {
      std::printf("%s", kUsage);
      return 0;
    }
    const example::Args args = example::Args::parse(argc, argv);
    args.allow_only({"model", "images", "top", "batch", "device", "precision"});
    if (!args.has("model") || !args.has("images")) {
      std::fprintf(stderr, "classify_image: --model and --images are required\n%s", kUsage);
      return 2;
    }
    const std::string folder = args.get("model", "");
    const std::vector<std::string> paths = split(args.get("images", ""));
    if (paths.empty()) throw std::runtime_error("--images names no file");
    const auto top = static_cast<size_t>(args.num("top", 5));
    const auto batch = static_cast<int64_t>(args.num("batch", 16));
    if (top < 1 || batch < 1) throw std::runtime_error("--top and --batch must be at least 1");

    const auto t0 = std::chrono::steady_clock::now();
    const tg::pretrained::Model m = tg::pretrained::load(folder);
    if (!std::holds_alternative<tg::nn::ViTConfig>(m.config) ||
        std::get<tg::nn::ViTConfig>(m.config).labels == 0)
      throw std::runtime_error(m.architecture +
                               " is not an image classifier (ViTForImageClassification or DeiT's)");
    const tg::nn::ViTConfig& c = std::get<tg::nn::ViTConfig>(m.config);
    const tg::ImageProcessor processor = tg::ImageProcessor::load(folder);
    // What the processor gives: its crop, else its fixed resize (a shortest-edge resize without a
    // crop gives each image its own size, which one program cannot take).
    const bool fixed = processor.do_center_crop || (processor.do_resize && processor.shortest_edge == 0);
    const int64_t out_h = processor.do_center_crop ? processor.crop_height : processor.height,
                  out_w = processor.do_center_crop ? processor.crop_width : processor.width;
    if (!fixed || out_h != c.image_size || out_w != c.image_size)
      throw std::runtime_error("preprocessor_config.json gives " +
                               (fixed ? std::to_string(out_h) + " × " + std::to_string(out_w) + " images"
                                      : std::string("images of their own sizes")) +
                               ", but the model takes " + std::to_string(c.image_size) + " × " +
                               std::to_string(c.image_size));
    std::printf(
        "%s from %s: %lld layers, width %lld, %lld × %lld images in %lld-pixel patches, %lld labels\n",
        m.architecture.c_str(), folder.c_str(), static_cast<long long>(c.layers),
        static_cast<long long>(c.d_model), static_cast<long long>(c.image_size),
        static_cast<long long>(c.image_size), static_cast<long long>(c.patch_size),
        static_cast<long long>(c.labels));

    std::vector<tg::Image> images;
    for (const std::string& p : paths) images.push_back(tg::read_image(p));
    const int64_t B = std::min<int64_t>(batch, static_cast<int64_t>(images.size()));
    tg::Program classify = tg::compile_forward(
        *m.module, [&](tg::Tensor pixels) { return tg::softmax(m.logits(pixels), -1); },
        {.inputs = {{"pixels", {B, c.channels, c.image_size, c.image_size}, tg::DType::kF32}},
         .device = args.device(),
         .precision = args.precision()});
    m.upload(classify);
    std::printf("compiled for %s in %.2f s (loading included)\n", classify.device().str().c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());

    const auto t1 = std::chrono::steady_clock::now();
    for (size_t first = 0; first < images.size(); first += static_cast<size_t>(B)) {
      // A last, shorter batch is filled up with copies of its last image (their rows unread).
      std::vector<tg::Image> chunk;
      for (size_t i = first; i < first + static_cast<size_t>(B); ++i)
        chunk.push_back(images[std::min(i, images.size() - 1)]);
      const tg::HostTensor probs = classify.run({{"pixels", processor(chunk).f32()}});
      const std::span<const float> p = probs.f32();
      for (size_t i = first; i < std::min(images.size(), first + static_cast<size_t>(B)); ++i) {
        const std::span<const float> row =
            p.subspan((i - first) * static_cast<size_t>(c.labels), static_cast<size_t>(c.labels));
        std::vector<size_t> order(row.size());
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return row[a] > row[b]; });
        std::printf("%s (%lld × %lld):\n", paths[i].c_str(), static_cast<long long>(images[i].height),
                    static_cast<long long>(images[i].width));
        for (size_t k = 0; k < std::min(top, order.size()); ++k) {
          const size_t label = order[k];
          const std::string name =
              label < m.label_names.size() ? m.label_names[label] : "label " + std::to_string(label);
          std::printf("  %6.3f %s%s\n", row[label], bar(row[label], 30).c_str(), name.c_str());
        }
      }
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    std::printf("classified %zu images in %.3f s (%.1f images/s, preprocessing included)\n", images.size(), s,
                static_cast<double>(images.size()) / s);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "classify_image: %s\n", e.what());
    return 1;
  }
}
