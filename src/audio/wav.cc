// tg::read_wav, tg::write_wav and tg::resample (see tensorgrad/audio.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <numbers>

#include "tensorgrad/audio.h"
#include "tensorgrad/errors.h"

namespace tg {
namespace {

[[noreturn]] void wav_fail(const std::string& path, const std::string& what) {
  throw InputError("[read_wav] " + path + ": " + what);
}

uint32_t u32(const uint8_t* p) {
  return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
uint16_t u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

// One sample of `bits` at p as a value in [-1, 1).
double sample_at(const uint8_t* p, int bits, bool is_float) {
  if (is_float) {
    if (bits == 32) {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    double d;
    std::memcpy(&d, p, 8);
    return d;
  }
  switch (bits) {
    case 8: return (static_cast<int>(p[0]) - 128) / 128.0;  // 8-bit WAV is unsigned
    case 16: return static_cast<int16_t>(u16(p)) / 32768.0;
    case 24: {  // three bytes into the top of an int32, shifted back down with the sign
      const auto v =
          static_cast<int32_t>((static_cast<uint32_t>(p[0]) << 8) | (static_cast<uint32_t>(p[1]) << 16) |
                               (static_cast<uint32_t>(p[2]) << 24));
      return (v >> 8) / 8388608.0;
    }
    default: return static_cast<int32_t>(u32(p)) / 2147483648.0;
  }
}

void put32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put16(std::string& s, uint16_t v) {
  s.push_back(static_cast<char>(v & 0xff));
  s.push_back(static_cast<char>(v >> 8));
}

}  // namespace

Audio read_wav(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) wav_fail(path, "cannot be opened");
  const std::vector<uint8_t> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (raw.size() < 12 || std::memcmp(raw.data(), "RIFF", 4) != 0 ||
      std::memcmp(raw.data() + 8, "WAVE", 4) != 0)
    wav_fail(path, "not a RIFF WAVE file");
  const uint32_t riff_size = u32(raw.data() + 4);
  int channels = 0, bits = 0, tag = 0;
  int64_t rate = 0;
  const uint8_t* data = nullptr;
  size_t data_size = 0;
  size_t at = 12;
  for (; at + 8 <= raw.size();) {
    const uint8_t* chunk = raw.data() + at;
    size_t size = u32(chunk + 4);
    const size_t left = raw.size() - at - 8;
    const bool is_data = std::memcmp(chunk, "data", 4) == 0;
    // Streaming writers leave the sizes unknown (0xFFFFFFFF, or 0 in the RIFF header too): the
    // data is the rest of the file. Otherwise a data chunk of 0 bytes is empty.
    if (is_data && (size == 0xFFFFFFFFu || (size == 0 && (riff_size == 0 || riff_size == 0xFFFFFFFFu))))
      size = left;
    if (size > left)
      wav_fail(path,
               "the \"" + std::string(reinterpret_cast<const char*>(chunk), 4) + "\" chunk is truncated");
    if (std::memcmp(chunk, "fmt ", 4) == 0) {
      if (size < 16) wav_fail(path, "the \"fmt \" chunk is shorter than 16 bytes");
      tag = u16(chunk + 8);
      channels = u16(chunk + 10);
      rate = u32(chunk + 12);
      bits = u16(chunk + 22);
      if (tag == 0xFFFE) {  // WAVE_FORMAT_EXTENSIBLE: the encoding is its sub-format GUID's first two bytes
        if (size < 40) wav_fail(path, "a WAVE_FORMAT_EXTENSIBLE \"fmt \" chunk shorter than 40 bytes");
        tag = u16(chunk + 8 + 24);
      }
    } else if (is_data) {
      data = chunk + 8;
      data_size = size;
    }
    at += 8 + size + (size & 1);  // chunks are padded to an even size
  }
  if (tag == 0) wav_fail(path, "no \"fmt \" chunk");
  if (!data)
    wav_fail(path, at < raw.size() ? "truncated (a chunk's header is cut off)" : "no \"data\" chunk");
  const bool is_float = tag == 3;
  if (tag != 1 && tag != 3)
    wav_fail(path, "encoding " + std::to_string(tag) +
                       " is not implemented (1, integer PCM, and 3, IEEE float, are)");
  if (is_float ? (bits != 32 && bits != 64) : (bits != 8 && bits != 16 && bits != 24 && bits != 32))
    wav_fail(path,
             std::to_string(bits) + "-bit " + (is_float ? "float" : "PCM") + " samples are not implemented");
  if (channels <= 0 || rate <= 0) wav_fail(path, "no channels or no sample rate in the \"fmt \" chunk");
  const size_t frame = static_cast<size_t>(channels) * static_cast<size_t>(bits / 8);
  Audio audio;
  audio.sample_rate = rate;
  audio.samples.resize(data_size / frame);
  for (size_t i = 0; i < audio.samples.size(); ++i) {
    double sum = 0;
    for (int c = 0; c < channels; ++c)
      sum += sample_at(data + i * frame + static_cast<size_t>(c * (bits / 8)), bits, is_float);
    audio.samples[i] = static_cast<float>(sum / channels);
  }
  return audio;
}

void write_wav(const Audio& audio, const std::string& path) {
  if (audio.sample_rate <= 0 || audio.sample_rate > 0xFFFFFFFFll / 2)
    throw InputError("[write_wav] " + path + ": a sample rate of " + std::to_string(audio.sample_rate));
  const size_t bytes = audio.samples.size() * 2;
  if (bytes > 0xFFFFFFFFu - 36) throw InputError("[write_wav] " + path + ": too long for a WAV file (4 GiB)");
  std::string out = "RIFF";
  put32(out, static_cast<uint32_t>(36 + bytes));
  out += "WAVEfmt ";
  put32(out, 16);
  put16(out, 1);  // PCM
  put16(out, 1);  // mono
  put32(out, static_cast<uint32_t>(audio.sample_rate));
  put32(out, static_cast<uint32_t>(audio.sample_rate * 2));
  put16(out, 2);
  put16(out, 16);
  out += "data";
  put32(out, static_cast<uint32_t>(bytes));
  for (const float s : audio.samples) {
    const double v =
        std::clamp(std::round(static_cast<double>(s) * 32768.0), -32768.0, 32767.0);  // read_wav's scale
    put16(out, static_cast<uint16_t>(static_cast<int16_t>(v)));
  }
  std::ofstream f(path, std::ios::binary);
  f.write(out.data(), static_cast<std::streamsize>(out.size()));
  if (!f) throw InputError("[write_wav] " + path + ": cannot be written");
}

namespace {

// The modified Bessel function I0 (its power series; converges quickly for β ≤ 20).
double bessel_i0(double x) {
  double sum = 1, term = 1;
  for (int k = 1; k < 64; ++k) {
    term *= (x / (2 * k)) * (x / (2 * k));
    sum += term;
    if (term < 1e-17 * sum) break;
  }
  return sum;
}

}  // namespace

Audio resample(const Audio& audio, int64_t sample_rate) {
  if (sample_rate <= 0 || audio.sample_rate <= 0)
    throw InputError("[resample] sample rates must be positive, got " + std::to_string(audio.sample_rate) +
                     " → " + std::to_string(sample_rate));
  if (sample_rate == audio.sample_rate) return audio;
  constexpr int kZeros = 32, kSteps = 512;  // zero crossings each side; table points per crossing
  constexpr double kBeta = 8.6;
  // The windowed sinc at kSteps points per zero crossing: table[i] = sinc(i / kSteps)·w(i / (kZeros·kSteps)).
  std::vector<double> table(kZeros * kSteps + 2, 0.0);
  const double i0_beta = bessel_i0(kBeta);
  for (int i = 0; i <= kZeros * kSteps; ++i) {
    const double x = static_cast<double>(i) / kSteps, u = x / kZeros;
    const double sinc = i == 0 ? 1.0 : std::sin(std::numbers::pi * x) / (std::numbers::pi * x);
    table[static_cast<size_t>(i)] = sinc * bessel_i0(kBeta * std::sqrt(std::max(0.0, 1 - u * u))) / i0_beta;
  }
  const auto filter = [&](double x) {  // the kernel at x zero crossings from its center
    const double a = std::abs(x) * kSteps;
    const auto i = static_cast<size_t>(a);
    if (i >= table.size() - 1) return 0.0;
    const double f = a - static_cast<double>(i);
    return table[i] * (1 - f) + table[i + 1] * f;
  };
  const auto in_rate = static_cast<double>(audio.sample_rate), out_rate = static_cast<double>(sample_rate);
  const double ratio = std::min(1.0, out_rate / in_rate);  // the cutoff, as a fraction of the input's Nyquist
  const double half = kZeros / ratio;                      // the kernel's half width in input samples
  const auto n = static_cast<int64_t>(audio.samples.size());
  const int64_t m = (n * sample_rate + audio.sample_rate - 1) / audio.sample_rate;
  Audio out;
  out.sample_rate = sample_rate;
  out.samples.resize(static_cast<size_t>(m));
  for (int64_t j = 0; j < m; ++j) {
    const double x =
        static_cast<double>(j) * in_rate / out_rate;  // the output sample's position in the input
    const auto lo = std::max<int64_t>(0, static_cast<int64_t>(std::ceil(x - half)));
    const auto hi = std::min<int64_t>(n - 1, static_cast<int64_t>(std::floor(x + half)));
    double sum = 0;
    for (int64_t i = lo; i <= hi; ++i)
      sum += audio.samples[static_cast<size_t>(i)] * filter((x - static_cast<double>(i)) * ratio);
    out.samples[static_cast<size_t>(j)] = static_cast<float>(sum * ratio);
  }
  return out;
}

}  // namespace tg
