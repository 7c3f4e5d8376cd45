// Audio for speech models: reading and writing WAV files, changing the sample rate, and the
// log-mel spectrogram Whisper reads (what transformers' WhisperFeatureExtractor computes from a
// folder's preprocessor_config.json).
//
//   tg::Audio speech = tg::resample(tg::read_wav("talk.wav"), 16000);   // mono, 16 kHz
//   tg::LogMelFeatures features = tg::LogMelFeatures::load("whisper-base");
//   tg::HostTensor mel = features({&speech, 1});                        // f32 [1, 80, 3000]
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tensorgrad/program.h"

namespace tg {

/// Mono audio: samples in [-1, 1] at sample_rate per second.
struct Audio {
  int64_t sample_rate = 16000;
  std::vector<float> samples;
  double seconds() const { return static_cast<double>(samples.size()) / static_cast<double>(sample_rate); }
};

/// Reads a RIFF WAVE file: integer PCM of 8 (unsigned), 16, 24 or 32 bits, or IEEE float of 32 or 64
/// bits, also inside WAVE_FORMAT_EXTENSIBLE; any number of channels, averaged into one. Integers
/// are scaled by 2^-(bits-1) (16 bits: s / 32768). Throws InputError naming the file and what is
/// wrong (missing, not RIFF WAVE, another encoding such as µ-law or ADPCM, truncated chunks).
Audio read_wav(const std::string& path);
/// Writes `audio` as 16-bit PCM, mono: each sample times 32768 (read_wav's scale), rounded to
/// nearest and clipped to [-32768, 32767];
/// InputError when the file cannot be written.
void write_wav(const Audio& audio, const std::string& path);

/// `audio` at `sample_rate`: band-limited interpolation with a Kaiser-windowed sinc (32 zero
/// crossings each side, β = 8.6), its cutoff at the lower Nyquist frequency of the two rates, so
/// that content the new rate cannot hold is filtered out rather than folded back. The same rate
/// returns a copy. InputError for a rate that is not positive.
Audio resample(const Audio& audio, int64_t sample_rate);

/// Whisper's input: the log-mel spectrogram of transformers' WhisperFeatureExtractor. Each clip
/// is cut or padded with zeros to chunk_length seconds (n_samples); frames of n_fft samples every
/// hop samples (the clip padded by n_fft / 2 reflected samples at each end, the last frame
/// dropped: n_samples / hop frames), a periodic Hann window, the power spectrum; n_mels
/// triangular filters up to 8 kHz (as transformers has them), evenly spaced and area-normalized on the Slaney
/// mel scale; log10 of max(power, 1e-10); values more than 8 below the clip's largest raised to it; then (x +
/// 4) / 4.
struct LogMelFeatures {
  int64_t n_mels = 80, n_fft = 400, hop = 160, sample_rate = 16000, chunk_length = 30;

  /// The folder's preprocessor_config.json (feature_size, n_fft, hop_length, sampling_rate,
  /// chunk_length); without one, these defaults. CheckpointError for a file it cannot follow
  /// (another feature extractor, dither or do_normalize set, sizes that are not positive).
  static LogMelFeatures load(const std::string& folder);

  int64_t n_samples() const { return chunk_length * sample_rate; }
  int64_t frames() const { return n_samples() / hop; }
  /// input_features f32 [B, n_mels, frames()] for B clips at sample_rate (InputError for a clip
  /// at another rate: resample() it first). Clips longer than chunk_length seconds are cut
  /// (WhisperGenerator::transcribe takes long audio in windows).
  HostTensor operator()(std::span<const Audio> clips) const;
  /// The filters, [n_fft / 2 + 1, n_mels] row-major: the weight of each frequency bin in each mel band.
  std::vector<double> mel_filters() const;
};

}  // namespace tg
