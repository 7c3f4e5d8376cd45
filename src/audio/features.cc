// tg::LogMelFeatures: Whisper's log-mel spectrogram (see tensorgrad/audio.h).
#include <algorithm>
#include <cmath>
#include <complex>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numbers>

#include "tensorgrad/audio.h"
#include "tensorgrad/errors.h"

namespace tg {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using cd = std::complex<double>;

[[noreturn]] void audio_fail(const std::string& file, const std::string& what) {
  throw CheckpointError("[LogMelFeatures::load] " + file + ": " + what);
}

int64_t positive(const json& c, const std::string& file, const char* key, int64_t fallback) {
  if (!c.contains(key) || c[key].is_null()) return fallback;
  if (!c[key].is_number_integer() || c[key].get<int64_t>() <= 0)
    audio_fail(file, std::string("\"") + key + "\" is " + c[key].dump() + ", expected a positive integer");
  return c[key].get<int64_t>();
}

// The discrete Fourier transform of x[0], x[s], …, x[(n-1)s] into out[0 … n): Cooley–Tukey over the
// smallest prime factor p of n (p interleaved transforms of n/p, combined with twiddles), a direct
// sum when n is prime. w[j] = exp(-2πi j / N) for the top-level length N, of which n divides.
void dft(const cd* x, size_t n, size_t s, const std::vector<cd>& w, cd* out) {
  const size_t N = w.size(), step = N / n;  // exp(-2πi j / n) = w[j · step mod N]
  size_t p = 2;
  while (p * p <= n && n % p != 0) ++p;
  if (n % p != 0) p = n;
  if (p == n) {
    for (size_t k = 0; k < n; ++k) {
      cd sum = 0;
      for (size_t j = 0; j < n; ++j) sum += x[j * s] * w[(j * k % n) * step];
      out[k] = sum;
    }
    return;
  }
  const size_t m = n / p;
  std::vector<cd> sub(n);  // sub[r·m + k]: the transform of x[r], x[r + p], … at k
  for (size_t r = 0; r < p; ++r) dft(x + r * s, m, s * p, w, sub.data() + r * m);
  for (size_t q = 0; q < p; ++q)
    for (size_t k = 0; k < m; ++k) {
      const size_t f = k + m * q;
      cd sum = 0;
      for (size_t r = 0; r < p; ++r) sum += sub[r * m + k] * w[(r * f % n) * step];
      out[f] = sum;
    }
}

// The Slaney mel scale: linear below 1 kHz (3 mels per 200 Hz), logarithmic above.
constexpr double kMinLogHz = 1000.0, kMinLogMel = 15.0;
const double kLogStep = 27.0 / std::log(6.4);
double hz_to_mel(double hz) {
  return hz < kMinLogHz ? 3.0 * hz / 200.0 : kMinLogMel + std::log(hz / kMinLogHz) * kLogStep;
}
double mel_to_hz(double mel) {
  return mel < kMinLogMel ? 200.0 * mel / 3.0 : kMinLogHz * std::exp((mel - kMinLogMel) / kLogStep);
}

}  // namespace

LogMelFeatures LogMelFeatures::load(const std::string& folder) {
  LogMelFeatures f;
  const fs::path path = fs::path(folder) / "preprocessor_config.json";
  if (!fs::exists(path)) return f;
  const std::string file = path.string();
  std::ifstream in(path);
  if (!in) audio_fail(file, "cannot be read");
  json c;
  try {
    c = json::parse(in);
  } catch (const json::exception& e) {
    audio_fail(file, std::string("not JSON: ") + e.what());
  }
  if (!c.is_object()) audio_fail(file, "not a JSON object");
  if (c.contains("feature_extractor_type") && c["feature_extractor_type"] != "WhisperFeatureExtractor")
    audio_fail(file, "feature_extractor_type " + c["feature_extractor_type"].dump() +
                         " is not implemented (WhisperFeatureExtractor is)");
  for (const char* key : {"dither", "do_normalize"})
    if (c.contains(key) && !c[key].is_null() && c[key] != 0.0 && c[key] != false)
      audio_fail(file,
                 std::string("\"") + key + "\" " + c[key].dump() + " is not implemented (0 / false is)");
  f.n_mels = positive(c, file, "feature_size", f.n_mels);
  f.n_fft = positive(c, file, "n_fft", f.n_fft);
  f.hop = positive(c, file, "hop_length", f.hop);
  f.sample_rate = positive(c, file, "sampling_rate", f.sample_rate);
  f.chunk_length = positive(c, file, "chunk_length", f.chunk_length);
  if (f.n_fft < 2 || f.n_fft % 2 != 0 || f.hop > f.n_samples())
    audio_fail(file, "n_fft " + std::to_string(f.n_fft) + " and hop_length " + std::to_string(f.hop) +
                         ": an even n_fft of at least 2 and a hop within the chunk are implemented");
  return f;
}

std::vector<double> LogMelFeatures::mel_filters() const {
  const auto bins = static_cast<size_t>(n_fft / 2 + 1), mels = static_cast<size_t>(n_mels);
  std::vector<double> edges(mels + 2);  // each band's low, center and high frequencies, shared
  // Up to 8 kHz, as transformers' Whisper feature extractor (its Nyquist frequency at 16 kHz).
  const double lo = hz_to_mel(0.0), hi = hz_to_mel(8000.0);
  for (size_t i = 0; i < edges.size(); ++i)
    edges[i] = mel_to_hz(lo + (hi - lo) * static_cast<double>(i) / static_cast<double>(mels + 1));
  std::vector<double> filters(bins * mels);
  const auto nyquist = static_cast<double>(sample_rate / 2);
  for (size_t k = 0; k < bins; ++k) {
    const double hz = nyquist * static_cast<double>(k) / static_cast<double>(bins - 1);
    for (size_t m = 0; m < mels; ++m) {
      const double down = (hz - edges[m]) / (edges[m + 1] - edges[m]);
      const double up = (edges[m + 2] - hz) / (edges[m + 2] - edges[m + 1]);
      // Slaney's normalization: each triangle's area equal (2 / its width in Hz).
      filters[k * mels + m] = std::max(0.0, std::min(down, up)) * 2.0 / (edges[m + 2] - edges[m]);
    }
  }
  return filters;
}

HostTensor LogMelFeatures::operator()(std::span<const Audio> clips) const {
  if (clips.empty()) throw InputError("[LogMelFeatures] no clips");
  const auto N = static_cast<size_t>(n_samples()), F = static_cast<size_t>(frames());
  const auto nfft = static_cast<size_t>(n_fft), bins = nfft / 2 + 1, mels = static_cast<size_t>(n_mels);
  const size_t pad = nfft / 2;
  if (N < pad + 1) throw InputError("[LogMelFeatures] a chunk shorter than n_fft / 2 + 1 samples");
  std::vector<double> window(nfft);  // periodic Hann
  for (size_t i = 0; i < nfft; ++i)
    window[i] =
        0.5 - 0.5 * std::cos(2.0 * std::numbers::pi * static_cast<double>(i) / static_cast<double>(nfft));
  std::vector<cd> w(nfft);
  for (size_t j = 0; j < nfft; ++j)
    w[j] = std::polar(1.0, -2.0 * std::numbers::pi * static_cast<double>(j) / static_cast<double>(nfft));
  const std::vector<double> filters = mel_filters();

  HostTensor out(DType::kF32, {static_cast<int64_t>(clips.size()), n_mels, frames()});
  std::vector<double> x(N + 2 * pad), power(bins), logmel(mels * F);
  std::vector<cd> frame(nfft), spectrum(nfft);
  for (size_t b = 0; b < clips.size(); ++b) {
    const Audio& clip = clips[b];
    if (clip.sample_rate != sample_rate)
      throw InputError("[LogMelFeatures] clip " + std::to_string(b) + " is at " +
                       std::to_string(clip.sample_rate) + " Hz; the model reads " +
                       std::to_string(sample_rate) + " Hz (tg::resample it)");
    // The clip cut or zero-padded to N samples, then reflected by n_fft / 2 at each end.
    const size_t n = std::min(N, clip.samples.size());
    std::fill(x.begin(), x.end(), 0.0);
    for (size_t i = 0; i < n; ++i) x[pad + i] = clip.samples[i];
    for (size_t i = 0; i < pad; ++i) {
      x[pad - 1 - i] = x[pad + 1 + i];
      x[pad + N + i] = x[pad + N - 2 - i];
    }
    double top = -std::numeric_limits<double>::infinity();
    for (size_t t = 0; t < F; ++t) {
      const size_t at = t * static_cast<size_t>(hop);
      for (size_t i = 0; i < nfft; ++i) frame[i] = x[at + i] * window[i];
      dft(frame.data(), nfft, 1, w, spectrum.data());
      for (size_t k = 0; k < bins; ++k) power[k] = std::norm(spectrum[k]);
      for (size_t m = 0; m < mels; ++m) {
        double e = 0;
        for (size_t k = 0; k < bins; ++k) e += filters[k * mels + m] * power[k];
        const double v = std::log10(std::max(e, 1e-10));
        logmel[m * F + t] = v;
        top = std::max(top, v);
      }
    }
    float* dst = out.f32().data() + b * mels * F;
    for (size_t i = 0; i < mels * F; ++i)
      dst[i] = static_cast<float>((std::max(logmel[i], top - 8.0) + 4.0) / 4.0);
  }
  return out;
}

}  // namespace tg
