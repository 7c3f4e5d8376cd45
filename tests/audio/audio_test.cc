// Audio: WAV files of every encoding read_wav takes (written here byte by byte), resampling
// against the sines it should give, and Whisper's log-mel features against transformers'
// WhisperFeatureExtractor on two recordings (tests/nn/gen_hf_whisper_golden.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

using namespace tg;
namespace fs = std::filesystem;

std::string data(const std::string& name) { return (fs::path(TG_TEST_DATA_DIR) / name).string(); }

void put(std::string& s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// A WAV file of `frames` interleaved samples given as raw bytes; `tag` 1 (PCM), 3 (float) or
// 0xFFFE (extensible, with `sub` as its sub-format). An odd-sized "LIST" chunk comes first, padded.
std::string wav(int tag, int channels, int bits, int rate, const std::string& samples, int sub = 0) {
  std::string fmt;
  put(fmt, static_cast<uint64_t>(tag), 2);
  put(fmt, static_cast<uint64_t>(channels), 2);
  put(fmt, static_cast<uint64_t>(rate), 4);
  put(fmt, static_cast<uint64_t>(rate * channels * bits / 8), 4);
  put(fmt, static_cast<uint64_t>(channels * bits / 8), 2);
  put(fmt, static_cast<uint64_t>(bits), 2);
  if (tag == 0xFFFE) {
    put(fmt, 22, 2);
    put(fmt, static_cast<uint64_t>(bits), 2);
    put(fmt, 0, 4);
    put(fmt, static_cast<uint64_t>(sub), 2);
    fmt += std::string(14, '\x01');  // the rest of the GUID
  }
  std::string body = "WAVELIST";
  put(body, 3, 4);
  body += "abc";
  body.push_back('\0');
  body += "fmt ";
  put(body, fmt.size(), 4);
  body += fmt + "data";
  put(body, samples.size(), 4);
  body += samples;
  std::string file = "RIFF";
  put(file, body.size(), 4);
  return file + body;
}

std::string write_temp(const std::string& name, const std::string& bytes) {
  const std::string path = (fs::path(::testing::TempDir()) / name).string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(Wav, ReadsEveryEncoding) {
  // The same four values (0.5, -0.25, 0, -1) in each encoding, as exactly as each holds them.
  std::string pcm16, pcm24, pcm32, f32, f64, pcm8;
  for (const double v : {0.5, -0.25, 0.0, -1.0}) {
    put(pcm16, static_cast<uint64_t>(static_cast<int64_t>(v * 32768)), 2);
    put(pcm24, static_cast<uint64_t>(static_cast<int64_t>(v * 8388608)), 3);
    put(pcm32, static_cast<uint64_t>(static_cast<int64_t>(v * 2147483648.0)), 4);
    pcm8.push_back(static_cast<char>(static_cast<int>(v * 128) + 128));
    float f = static_cast<float>(v);
    f32.append(reinterpret_cast<const char*>(&f), 4);
    f64.append(reinterpret_cast<const char*>(&v), 8);
  }
  const std::vector<float> want{0.5f, -0.25f, 0.0f, -1.0f};
  for (const auto& [name, bytes] : std::vector<std::pair<std::string, std::string>>{
           {"pcm16", wav(1, 1, 16, 8000, pcm16)},
           {"pcm24", wav(1, 1, 24, 8000, pcm24)},
           {"pcm32", wav(1, 1, 32, 8000, pcm32)},
           {"pcm8", wav(1, 1, 8, 8000, pcm8)},
           {"float32", wav(3, 1, 32, 8000, f32)},
           {"float64", wav(3, 1, 64, 8000, f64)},
           {"extensible16", wav(0xFFFE, 1, 16, 8000, pcm16, 1)},
           {"extensible_float", wav(0xFFFE, 1, 32, 8000, f32, 3)}}) {
    const Audio a = read_wav(write_temp("tg_" + name + ".wav", bytes));
    EXPECT_EQ(a.sample_rate, 8000) << name;
    EXPECT_EQ(a.samples, want) << name;
  }
  // Two channels are averaged: (0.5 + -0.25) / 2, (0 + -1) / 2.
  const Audio stereo = read_wav(write_temp("tg_stereo.wav", wav(1, 2, 16, 8000, pcm16)));
  EXPECT_EQ(stereo.samples, (std::vector<float>{0.125f, -0.5f}));
  EXPECT_DOUBLE_EQ(stereo.seconds(), 2.0 / 8000);
}

TEST(Wav, WriteThenReadKeepsSixteenBits) {
  Audio a{.sample_rate = 22050, .samples = {}};
  for (int i = 0; i < 1000; ++i) a.samples.push_back(static_cast<float>(std::sin(0.01 * i * i)));
  a.samples.push_back(3.0f);  // clipped
  const std::string path = (fs::path(::testing::TempDir()) / "tg_written.wav").string();
  write_wav(a, path);
  const Audio b = read_wav(path);
  ASSERT_EQ(b.samples.size(), a.samples.size());
  EXPECT_EQ(b.sample_rate, 22050);
  for (size_t i = 0; i + 1 < a.samples.size(); ++i) EXPECT_NEAR(b.samples[i], a.samples[i], 1.0 / 32768) << i;
  EXPECT_EQ(b.samples.back(), 32767.0f / 32768.0f) << "clipped";
}

TEST(Wav, ErrorsNameTheProblem) {
  std::string pcm16;
  put(pcm16, 1000, 2);
  const std::string good = wav(1, 1, 16, 8000, pcm16);
  for (const auto& [bytes, says] : std::vector<std::pair<std::string, std::string>>{
           {"not a wav at all", "not a RIFF WAVE file"},
           {good.substr(0, good.size() - 8), "truncated"},
           {wav(7, 1, 8, 8000, "ab"), "encoding 7 is not implemented"},
           {wav(1, 1, 12, 8000, "ab"), "12-bit PCM"},
           {good.substr(0, 12), "no \"fmt \" chunk"}}) {
    try {
      read_wav(write_temp("tg_bad.wav", bytes));
      ADD_FAILURE() << "read " << says;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(read_wav("/nonexistent/tg.wav"), InputError);
}

// A data chunk of 0 bytes is empty (the chunks after it are not audio); a streaming writer's
// unknown sizes (0xFFFFFFFF) mean the rest of the file.
TEST(Wav, EmptyAndStreamedDataChunks) {
  std::string empty = wav(1, 1, 16, 8000, "") + "LIST";
  put(empty, 4, 4);
  empty += "junk";
  EXPECT_TRUE(read_wav(write_temp("tg_empty.wav", empty)).samples.empty());
  std::string pcm16;
  for (const int v : {100, -200, 300}) put(pcm16, static_cast<uint64_t>(static_cast<int64_t>(v)), 2);
  std::string streamed = wav(1, 1, 16, 8000, pcm16);
  const size_t data = streamed.find("data");
  for (const size_t at : {size_t{4}, data + 4}) streamed.replace(at, 4, std::string(4, '\xff'));
  EXPECT_EQ(read_wav(write_temp("tg_streamed.wav", streamed)).samples,
            (std::vector<float>{100 / 32768.0f, -200 / 32768.0f, 300 / 32768.0f}));
}

Audio sine(double hz, int64_t rate, double seconds) {
  Audio a{.sample_rate = rate, .samples = {}};
  for (int64_t i = 0; i < static_cast<int64_t>(seconds * static_cast<double>(rate)); ++i)
    a.samples.push_back(
        static_cast<float>(std::sin(2 * std::numbers::pi * hz * static_cast<double>(i) / rate)));
  return a;
}

// Away from the ends (where the filter runs out of input), a tone the new rate can hold comes out
// as the same tone sampled at the new rate; one it cannot hold is filtered out, not folded back.
TEST(Resample, KeepsWhatFitsAndDropsWhatDoesNot) {
  for (const auto& [from, to] :
       std::vector<std::pair<int64_t, int64_t>>{{44100, 16000}, {8000, 16000}, {48000, 16000}}) {
    const Audio out = resample(sine(1000, from, 0.25), to);
    const Audio want = sine(1000, to, 0.25);
    EXPECT_EQ(out.sample_rate, to);
    ASSERT_GE(out.samples.size(), want.samples.size());
    double worst = 0;
    for (size_t i = 200; i + 200 < want.samples.size(); ++i)
      worst = std::max(worst, std::abs(static_cast<double>(out.samples[i] - want.samples[i])));
    EXPECT_LT(worst, 2e-3) << from << " → " << to;
  }
  const Audio high = resample(sine(7000, 44100, 0.25), 8000);  // above 8 kHz's Nyquist of 4 kHz
  double energy = 0;
  for (size_t i = 200; i + 200 < high.samples.size(); ++i) energy += high.samples[i] * high.samples[i];
  EXPECT_LT(energy / static_cast<double>(high.samples.size() - 400), 1e-4) << "a 7 kHz tone at 8 kHz";
  const Audio same = resample(sine(440, 16000, 0.01), 16000);
  EXPECT_EQ(same.samples, sine(440, 16000, 0.01).samples);
  EXPECT_THROW(resample(same, 0), InputError);
}

TEST(LogMel, FeaturesEqualTransformers) {
  const auto g = read_safetensors(data("tiny_whisper/logits.safetensors"));
  const LogMelFeatures f = LogMelFeatures::load(data("tiny_whisper"));
  const std::vector<Audio> clips{read_wav(data("audio/chirp.wav")), read_wav(data("audio/tones.wav"))};
  EXPECT_EQ(clips[0].samples.size(), 20800u);
  EXPECT_EQ(clips[1].samples.size(), 12800u);
  const HostTensor got = f(clips);
  ASSERT_EQ(got.shape(), g.at("features").shape());
  double worst = 0;
  for (size_t i = 0; i < got.f32().size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(got.f32()[i] - g.at("features").f32()[i])));
  // transformers' own torch and numpy paths differ by 7e-5 on these clips (float32 STFTs).
  EXPECT_LT(worst, 2e-4);
  std::printf("  largest difference to transformers' log-mel features: %.2e\n", worst);
  // Slaney's normalization gives every triangle an area of one (in Hz): summed over the 40-Hz
  // bins, each band comes within the sampling's error of it.
  const std::vector<double> filters = f.mel_filters();
  for (int64_t m = 0; m < f.n_mels; ++m) {
    double area = 0;
    for (int64_t k = 0; k <= f.n_fft / 2; ++k) area += filters[static_cast<size_t>(k * f.n_mels + m)] * 40.0;
    EXPECT_NEAR(area, 1.0, 0.1) << "band " << m;
  }
  // A clip longer than the window is cut to it.
  Audio longer = clips[0];
  longer.samples.resize(static_cast<size_t>(f.n_samples()) + 5000, 0.25f);
  Audio cut = longer;
  cut.samples.resize(static_cast<size_t>(f.n_samples()));
  const HostTensor a = f({&longer, 1}), b = f({&cut, 1});
  EXPECT_TRUE(std::equal(a.f32().begin(), a.f32().end(), b.f32().begin()));
  Audio loud = clips[0];
  loud.sample_rate = 8000;
  EXPECT_THROW(f({&loud, 1}), InputError);
}

TEST(LogMel, PreprocessorConfigErrors) {
  const fs::path dir = fs::path(::testing::TempDir()) / "tg_logmel_bad";
  fs::create_directories(dir);
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
           {R"({"feature_extractor_type": "Wav2Vec2FeatureExtractor"})", "Wav2Vec2FeatureExtractor"},
           {R"({"dither": 0.5})", "\"dither\" 0.5"},
           {R"({"hop_length": 0})", "\"hop_length\" is 0"},
           {R"({"n_fft": 401})", "an even n_fft"},
           {"{", "not JSON"}}) {
    std::ofstream(dir / "preprocessor_config.json") << text;
    try {
      LogMelFeatures::load(dir.string());
      ADD_FAILURE() << text;
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
  fs::remove(dir / "preprocessor_config.json");
  EXPECT_EQ(LogMelFeatures::load(dir.string()).frames(), 3000) << "Whisper's defaults: 30 s, 80 bins";
}

}  // namespace
