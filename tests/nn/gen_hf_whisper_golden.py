"""tests/data/tiny_whisper, tests/data/audio: a tiny random Whisper made with transformers' own
classes, its feature extractor and tokenizer, two short recordings, and what transformers
computes from them, for tests/io/pretrained_whisper_test.cc and tests/audio/audio_test.cc.

    PYTHONPATH=tests/nn:tests/text python3 tests/nn/gen_hf_whisper_golden.py [out dir]

audio/chirp.wav (mono) and audio/tones.wav (stereo): 16-bit PCM at 16 kHz, 1.3 s and 0.8 s of
synthetic sound (a rising chirp with a harmonic and noise; two tones under an envelope). The
feature extractor is WhisperFeatureExtractor with 80 mel bins and chunk_length 2 (32,000 samples,
200 frames), so the model reads 200 frames (max_source_positions 100). The tokenizer: GPT-2-style
byte-level BPE trained on gen_tokenizer_golden.py's corpus (400 tokens), then Whisper's special
tokens (<|endoftext|>, <|startoftranscript|>, three languages, the tasks, <|notimestamps|>, …)
and its template. The model: WhisperForConditionalGeneration, width 32, 4 heads, feed-forward 64,
2 encoder and 2 decoder layers, 32 target positions, weights drawn with std 0.2 (0.02 makes every
logit nearly equal) and the decoder's final norm scaled, so that greedy decoding and language
detection have clear margins (printed).

logits.safetensors: "features" [2, 80, 200] (each clip mono, as transformers' feature extractor
gives them, the stereo one averaged), "encoder_hidden" [2, 100, 32], "decoder_ids" I32 [2, 7] and
"logits" [2, 7, vocab]; "labels" I32 [2, 6], transformers' "loss" and its gradient for every
trained parameter as "grad/<name>"; "generated" I32 [2, n]: generate(language="en",
task="transcribe")'s new ids (after the prompt; <|endoftext|> once a sequence ended), "generated_auto" the
same with the language detected, and "languages" I32 [2]: detect_language's ids."""
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import transformers as tf
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from golden_file import write_safetensors
import gen_tokenizer_golden as gtg

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "data")
RATE = 16000
SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|de|>", "<|fr|>", "<|translate|>",
            "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>"]


def write_wav(path, channels):
    """16-bit PCM; channels: float arrays in [-1, 1] of one length."""
    data = np.stack(channels, axis=1)
    pcm = np.clip(np.round(data * 32767), -32768, 32767).astype("<i2").tobytes()
    n = len(channels)
    with open(path, "wb") as f:
        f.write(b"RIFF" + struct.pack("<I", 36 + len(pcm)) + b"WAVE")
        f.write(b"fmt " + struct.pack("<IHHIIHH", 16, 1, n, RATE, RATE * 2 * n, 2 * n, 16))
        f.write(b"data" + struct.pack("<I", len(pcm)) + pcm)


def read_back(path):
    """The WAV as the C++ reader gives it: int16 / 32768, channels averaged."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<H", raw[22:24])[0]
    pcm = np.frombuffer(raw[44:], dtype="<i2").astype(np.float32) / 32768.0
    return pcm.reshape(-1, n).mean(axis=1).astype(np.float32)


def recordings(folder):
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(7)
    t = np.arange(int(1.3 * RATE)) / RATE
    phase = 2 * math.pi * (200 * t + 0.5 * (3000 - 200) / 1.3 * t * t)
    chirp = 0.5 * np.sin(phase) + 0.2 * np.sin(2 * phase) + 0.02 * rng.standard_normal(t.size)
    write_wav(os.path.join(folder, "chirp.wav"), [chirp])
    t = np.arange(int(0.8 * RATE)) / RATE
    env = np.sin(math.pi * t / 0.8) ** 2
    left = env * (0.6 * np.sin(2 * math.pi * 440 * t) + 0.1 * np.sin(2 * math.pi * 5000 * t))
    right = env * 0.4 * np.sin(2 * math.pi * 660 * t)
    write_wav(os.path.join(folder, "tones.wav"), [left, right])
    return [read_back(os.path.join(folder, name)) for name in ("chirp.wav", "tones.wav")]


def tokenizer(folder):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(gtg.corpus(), trainer)
    tok.add_special_tokens(SPECIALS)
    sot, nots, eot = (tok.token_to_id(s) for s in ("<|startoftranscript|>", "<|notimestamps|>", "<|endoftext|>"))
    tok.post_processor = processors.TemplateProcessing(
        single="<|startoftranscript|> <|notimestamps|> $A <|endoftext|>",
        pair="<|startoftranscript|> <|notimestamps|> $A $B <|endoftext|>",
        special_tokens=[("<|startoftranscript|>", sot), ("<|notimestamps|>", nots), ("<|endoftext|>", eot)])
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    return tok


def main():
    audio = recordings(os.path.join(OUT, "audio"))
    folder = os.path.join(OUT, "tiny_whisper")
    tok = tokenizer(folder)
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    space = tok.token_to_id("\u0120")  # "Ġ": a lone space, as Whisper's 220
    vocab = tok.get_vocab_size()
    print("vocabulary", vocab, "specials", ids, "space", space)

    fe = tf.WhisperFeatureExtractor(feature_size=80, sampling_rate=RATE, hop_length=160, chunk_length=2, n_fft=400)
    fe.save_pretrained(folder)
    features = fe(audio, sampling_rate=RATE, return_tensors="pt").input_features.float()
    np_features = torch.from_numpy(np.stack([fe._np_extract_fbank_features(
        np.pad(a, (0, fe.n_samples - a.size))[None], "cpu")[0] for a in audio])).float()
    print("features", tuple(features.shape), "torch vs numpy", (features - np_features).abs().max().item())

    suppress = [ids["<|startoflm|>"], ids["<|startofprev|>"], ids["<|nospeech|>"], tok.token_to_id("!"),
                tok.token_to_id("?")]
    config = tf.WhisperConfig(
        vocab_size=vocab, num_mel_bins=80, d_model=32, encoder_layers=2, encoder_attention_heads=4,
        decoder_layers=2, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_source_positions=100, max_target_positions=32, init_std=0.2,
        decoder_start_token_id=ids["<|startoftranscript|>"], eos_token_id=ids["<|endoftext|>"],
        pad_token_id=ids["<|endoftext|>"], bos_token_id=ids["<|endoftext|>"],
        suppress_tokens=suppress, begin_suppress_tokens=[space, ids["<|endoftext|>"]])
    torch.manual_seed(0)
    model = tf.WhisperForConditionalGeneration(config).eval()
    with torch.no_grad():
        model.model.decoder.layer_norm.weight.mul_(4.0)
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    gen = tf.GenerationConfig(
        decoder_start_token_id=ids["<|startoftranscript|>"], eos_token_id=ids["<|endoftext|>"],
        pad_token_id=ids["<|endoftext|>"], bos_token_id=ids["<|endoftext|>"], max_length=32,
        suppress_tokens=suppress, begin_suppress_tokens=[space, ids["<|endoftext|>"]],
        no_timestamps_token_id=ids["<|notimestamps|>"], is_multilingual=True,
        lang_to_id={k: ids[k] for k in ("<|en|>", "<|de|>", "<|fr|>")},
        task_to_id={"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]})
    model.generation_config = gen
    model.save_pretrained(folder, safe_serialization=True)
    print(open(os.path.join(folder, "config.json")).read())
    print(open(os.path.join(folder, "generation_config.json")).read())

    out = {"features": features}
    with torch.no_grad():
        enc = model.model.encoder(features).last_hidden_state
        out["encoder_hidden"] = enc
        prompt = [ids["<|startoftranscript|>"], ids["<|en|>"], ids["<|transcribe|>"], ids["<|notimestamps|>"]]
        text = [tok.encode(" the cat").ids[:3], tok.encode(" hello world").ids[:3]]
        dec = torch.tensor([prompt + (t + [space] * 3)[:3] for t in text], dtype=torch.int32)
        out["decoder_ids"] = dec
        logits = model(input_features=features, decoder_input_ids=dec.long()).logits
        out["logits"] = logits
        lang = model.detect_language(input_features=features, num_segment_frames=200)
        out["languages"] = lang.to(torch.int32)
        print("languages", lang.tolist())
        g = model.generate(features, language="en", task="transcribe", max_new_tokens=12)
        g_auto = model.generate(features, task="transcribe", max_new_tokens=12)
    eot = ids["<|endoftext|>"]

    def padded(seqs):
        seqs = seqs if torch.is_tensor(seqs) else seqs["sequences"]
        return seqs.to(torch.int32)

    out["generated"], out["generated_auto"] = padded(g), padded(g_auto)
    print("generated", out["generated"].tolist())
    print("generated_auto", out["generated_auto"].tolist())
    print("text", [tok.decode(s.tolist(), skip_special_tokens=True) for s in out["generated"]])

    # Margins: the greedy choices and the language detection must not be near-ties.
    with torch.no_grad():
        prompt_ids = torch.tensor([prompt, prompt])
        seqs = torch.cat([prompt_ids, out["generated"].long()], dim=1)
        full = model(input_features=features, decoder_input_ids=seqs).logits
        low = math.inf
        for b in range(seqs.shape[0]):
            for t in range(3, seqs.shape[1] - 1):
                if seqs[b, t + 1] == eot and seqs[b, t] == eot:
                    break
                row = full[b, t].clone()
                row[suppress] = -math.inf
                if t == 3:
                    row[[space, eot]] = -math.inf
                top = row.topk(2).values
                low = min(low, (top[0] - top[1]).item())
        start = model(input_features=features,
                      decoder_input_ids=torch.full((2, 1), ids["<|startoftranscript|>"])).logits[:, -1]
        langs = start[:, [ids["<|en|>"], ids["<|de|>"], ids["<|fr|>"]]].sort(dim=-1, descending=True).values
        print("smallest greedy margin", low, "language margins", (langs[:, 0] - langs[:, 1]).tolist())

    labels = torch.tensor([[ids["<|en|>"], ids["<|transcribe|>"], ids["<|notimestamps|>"]] + text[0] + [eot],
                           [ids["<|en|>"], ids["<|transcribe|>"], ids["<|notimestamps|>"]] + text[1][:2] + [eot, -100]])
    out["labels"] = labels.to(torch.int32)
    model.zero_grad()
    loss = model(input_features=features, labels=labels).loss
    loss.backward()
    out["loss"] = loss.detach().reshape(1)
    for name, p in model.named_parameters():
        if p.grad is not None:
            out["grad/" + name] = p.grad
    print("loss", loss.item(), "grads", sum(1 for k in out if k.startswith("grad/")))
    write_safetensors(os.path.join(folder, "logits.safetensors"),
                      {k: v.detach().contiguous() for k, v in out.items()}, {})
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "WhisperTokenizer", "eos_token": "<|endoftext|>",
                   "bos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"}, f, indent=2)


if __name__ == "__main__":
    main()
