// classify_image: image classification from a Hugging Face folder, with a classifier or zero-shot.
//   - a Vision Transformer classifier (ViTForImageClassification or DeiT's: config.json,
//     model.safetensors, preprocessor_config.json), e.g. google/vit-base-patch16-224 or
//     facebook/deit-base-distilled-patch16-224 and their ImageNet-1k labels;
//   - CLIP (CLIPModel, e.g. openai/clip-vit-base-patch32, with its tokenizer.json): zero-shot,
//     over labels given on the command line, each put into a caption ("a photo of a {}.") and
//     scored by the similarity of the caption's and the image's embeddings.
//
//   ./classify_image --model <folder> --images cat.jpg,dog.png [--top 5] [--batch 16]
//                    [--labels cat,dog,car] [--template "a photo of a {}."]
//                    [--device cpu|cuda] [--precision fp32|bf16]
//
// Each image (PNG, JPEG, BMP, GIF, TGA or PNM, read as RGB) is resized and normalized as the
// folder's preprocessor_config.json says (tg::ImageProcessor: what transformers' image
// processors compute, to the bit), the model's logits become probabilities, and the likeliest
// labels are drawn as bars.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "args.h"

namespace {

constexpr const char* kUsage =
    "usage: classify_image --model FOLDER --images A.jpg[,B.png,...] [--top 5] [--batch 16]\n"
    "                      [--labels A,B,...] [--template \"a photo of a {}.\"]\n"
    "                      [--device cpu|cuda] [--precision fp32|bf16]\n"
    "\n"
    "Classifies each image with a ViTForImageClassification (or DeiT classifier) folder (config.json,\n"
    "model.safetensors and preprocessor_config.json, as transformers saves them), over its labels\n"
    "(config.json's id2label); or with a CLIPModel folder (and its tokenizer.json) over --labels,\n"
    "each put into --template's caption. The images are resized and normalized as the folder's image\n"
    "processor says, and the TOP likeliest labels of each are drawn as bars.\n";

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

// The image side the folder's processor gives: its crop, else its fixed resize (a
// shortest-edge resize without a crop gives each image its own size, which one program cannot
// take); it must be the model's.
void check_processor(const tg::ImageProcessor& processor, int64_t image_size) {
  const bool fixed = processor.do_center_crop || (processor.do_resize && processor.shortest_edge == 0);
  const int64_t out_h = processor.do_center_crop ? processor.crop_height : processor.height,
                out_w = processor.do_center_crop ? processor.crop_width : processor.width;
  if (!fixed || out_h != image_size || out_w != image_size)
    throw std::runtime_error("preprocessor_config.json gives " +
                             (fixed ? std::to_string(out_h) + " × " + std::to_string(out_w) + " images"
                                    : std::string("images of their own sizes")) +
                             ", but the model takes " + std::to_string(image_size) + " × " +
                             std::to_string(image_size));
}

// What main runs for either kind of model: a program from pixels [B, C, S, S] to probabilities
// [B, labels], and the labels' names.
struct Classifier {
  tg::Program program;
  std::vector<std::string> labels;
  int64_t channels = 3, image_size = 0;
  /// CLIP's: the captions' features, the program's "text" input.
  std::optional<tg::HostTensor> text = {};
};

Classifier vit_classifier(const tg::pretrained::Model& m, const example::Args& args, int64_t B) {
  const tg::nn::ViTConfig& c = std::get<tg::nn::ViTConfig>(m.config);
  if (c.labels == 0)
    throw std::runtime_error(m.architecture + " is not an image classifier (it has no classifier)");
  if (args.has("labels"))
    throw std::runtime_error("--labels is for CLIP; " + m.architecture + " has its own");
  std::printf("%s from %s: %lld layers, width %lld, %lld × %lld images in %lld-pixel patches, %lld labels\n",
              m.architecture.c_str(), m.folder.c_str(), static_cast<long long>(c.layers),
              static_cast<long long>(c.d_model), static_cast<long long>(c.image_size),
              static_cast<long long>(c.image_size), static_cast<long long>(c.patch_size),
              static_cast<long long>(c.labels));
  std::vector<std::string> names;
  for (int64_t i = 0; i < c.labels; ++i)
    names.push_back(static_cast<size_t>(i) < m.label_names.size() ? m.label_names[static_cast<size_t>(i)]
                                                                  : "label " + std::to_string(i));
  tg::Program p = tg::compile_forward(
      *m.module, [&](tg::Tensor pixels) { return tg::softmax(m.logits(pixels), -1); },
      {.inputs = {{"pixels", {B, c.channels, c.image_size, c.image_size}, tg::DType::kF32}},
       .device = args.device(),
       .precision = args.precision()});
  m.upload(p);
  return {std::move(p), names, c.channels, c.image_size};
}

// CLIP zero-shot: the labels' captions padded with the end-of-text token (masked) into one
// batch, their features computed once; the probabilities are the softmax over the captions of
// logits_per_image.
Classifier clip_classifier(const tg::pretrained::Model& m, const std::string& folder,
                           const example::Args& args, int64_t B) {
  const tg::nn::ClipConfig& c = std::get<tg::nn::ClipConfig>(m.config);
  if (!c.has_text || !c.has_vision || !c.projections)
    throw std::runtime_error(m.architecture + " has one tower: zero-shot classification needs a CLIPModel");
  const std::vector<std::string> labels = split(args.get("labels", ""));
  if (labels.size() < 2)
    throw std::runtime_error("CLIP classifies zero-shot: give --labels A,B[,...] (two or more)");
  const std::string tmpl = args.get("template", "a photo of a {}.");
  const size_t slot = tmpl.find("{}");
  if (slot == std::string::npos) throw std::runtime_error("--template must hold {} where the label goes");
  std::vector<std::string> texts;
  for (const std::string& label : labels) texts.push_back(std::string(tmpl).replace(slot, 2, label));
  const tg::Tokenizer tok = tg::Tokenizer::load(folder);
  const tg::EncodedBatch captions = tok.encode_batch(texts, {.pad_id = tok.eos_id()});
  if (captions.length > c.text.positions)
    throw std::runtime_error("a caption of " + std::to_string(captions.length) +
                             " tokens is longer than the model's " + std::to_string(c.text.positions) +
                             " positions");
  std::printf(
      "%s from %s: text %lld layers × %lld, image %lld layers × %lld, %lld × %lld images; %zu captions as "
      "\"%s\"\n",
      m.architecture.c_str(), m.folder.c_str(), static_cast<long long>(c.text.encoder.layers),
      static_cast<long long>(c.text.encoder.d_model), static_cast<long long>(c.vision.encoder.layers),
      static_cast<long long>(c.vision.encoder.d_model), static_cast<long long>(c.vision.image_size),
      static_cast<long long>(c.vision.image_size), labels.size(), tmpl.c_str());
  const auto& clip = static_cast<const tg::nn::Clip&>(*m.module);
  const tg::Shape shape{captions.rows, captions.length};
  const tg::ForwardOptions options{.device = args.device(), .precision = args.precision()};
  tg::ForwardOptions text_options = options;
  text_options.inputs = {{"ids", shape, tg::DType::kI32}, {"mask", shape, tg::DType::kI32}};
  tg::Program text = tg::compile_forward(
      *m.module, [&](tg::Tensor ids, tg::Tensor mask) { return clip.text_features(ids, mask); },
      text_options);
  m.upload(text);
  const tg::HostTensor features = text.run({{"ids", captions.ids}, {"mask", captions.mask}});
  tg::ForwardOptions image_options = options;
  image_options.inputs = {
      {"pixels", {B, c.vision.channels, c.vision.image_size, c.vision.image_size}, tg::DType::kF32},
      {"text", features.shape(), tg::DType::kF32}};
  tg::Program p = tg::compile_forward(
      *m.module,
      [&](tg::Tensor pixels, tg::Tensor t) {
        return tg::softmax(clip.logits_per_image(clip.image_features(pixels), t), -1);
      },
      image_options);
  m.upload(p);
  return {std::move(p), labels, c.vision.channels, c.vision.image_size, features};
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (example::Args::wants_help(argc, argv)) {
      std::printf("%s", kUsage);
      return 0;
    }
    const example::Args args = example::Args::parse(argc, argv);
    args.allow_only({"model", "images", "top", "batch", "labels", "template", "device", "precision"});
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
    const bool vit = std::holds_alternative<tg::nn::ViTConfig>(m.config);
    if (!vit && !std::holds_alternative<tg::nn::ClipConfig>(m.config))
      throw std::runtime_error(
          m.architecture + " is not an image classifier (ViTForImageClassification, DeiT's or CLIPModel)");
    const int64_t B = std::min<int64_t>(batch, static_cast<int64_t>(paths.size()));
    Classifier classifier = vit ? vit_classifier(m, args, B) : clip_classifier(m, folder, args, B);
    std::vector<tg::Image> images;
    for (const std::string& p : paths) images.push_back(tg::read_image(p));
    const tg::ImageProcessor processor = tg::ImageProcessor::load(folder);
    check_processor(processor, classifier.image_size);
    std::printf("compiled for %s in %.2f s (loading included)\n", classifier.program.device().str().c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());

    const auto t1 = std::chrono::steady_clock::now();
    const size_t K = classifier.labels.size();
    for (size_t first = 0; first < images.size(); first += static_cast<size_t>(B)) {
      // A last, shorter batch is filled up with copies of its last image (their rows unread).
      std::vector<tg::Image> chunk;
      for (size_t i = first; i < first + static_cast<size_t>(B); ++i)
        chunk.push_back(images[std::min(i, images.size() - 1)]);
      const tg::HostTensor pixels = processor(chunk);  // Feeds borrow their data
      tg::Feeds feeds{{"pixels", pixels.f32()}};
      if (classifier.text) feeds.push_back(tg::Feed{"text", std::as_const(*classifier.text).f32()});
      const tg::HostTensor probs = classifier.program.run(feeds);
      for (size_t i = first; i < std::min(images.size(), first + static_cast<size_t>(B)); ++i) {
        const std::span<const float> row = probs.f32().subspan((i - first) * K, K);
        std::vector<size_t> order(row.size());
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return row[a] > row[b]; });
        std::printf("%s (%lld × %lld):\n", paths[i].c_str(), static_cast<long long>(images[i].height),
                    static_cast<long long>(images[i].width));
        for (size_t k = 0; k < std::min(top, order.size()); ++k)
          std::printf("  %6.3f %s%s\n", row[order[k]], bar(row[order[k]], 30).c_str(),
                      classifier.labels[order[k]].c_str());
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
