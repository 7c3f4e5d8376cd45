"""tests/data/beam_golden.safetensors: transformers' beam search (generate with num_beams, no
sampling) over the tiny models of tests/data, for tests/runtime/beam_search_test.cc.

    python3 tests/nn/gen_hf_beam_golden.py [data dir]

For each model and case, "<model>.<case>.sequences" I32 [beams, max_new_tokens] holds every
returned hypothesis's new tokens, best first, -1 after its end (the end token itself is not
kept), "<model>.<case>.ended" I32 [beams] 1 where the end token ended it, and "<model>.<case>.scores" F32 [beams] their scores (sum of log-probabilities over
length ** length_penalty, transformers' sequences_scores). The prompt ("<model>.prompt" I32) is
the decoder-only models' input ids, T5's source ids. The metadata holds each case's settings as
JSON, and "<model>.<case>.eos" I32 [n] the tokens that end a hypothesis: 2 (the tiny models'
eos), or from case d on a token the model favours (and in f both), so that hypotheses end on the
way."""
import json
import os
import sys

import torch
import transformers as tf
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(__file__))
from golden_file import write_safetensors  # noqa: E402

DATA = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "data")
EOS = 2
CASES = {
    "a": dict(num_beams=3, max_new_tokens=8, length_penalty=1.0, early_stopping=False),
    "b": dict(num_beams=4, max_new_tokens=6, length_penalty=0.5, early_stopping=True),
    "c": dict(num_beams=2, max_new_tokens=10, length_penalty=2.0, early_stopping=False),
    # The end token is one the model favours (FREQUENT), so that hypotheses end on the way.
    "d": dict(num_beams=3, max_new_tokens=8, length_penalty=1.0, early_stopping=False, frequent=True),
    "e": dict(num_beams=4, max_new_tokens=8, length_penalty=0.7, early_stopping=True, frequent=True),
    # early_stopping "never", with a negative and a positive length penalty; f ends at either of
    # two tokens (the favoured one and 2), so that 3 · beams continuations are kept a step.
    "f": dict(num_beams=3, max_new_tokens=8, length_penalty=-0.5, early_stopping="never", frequent=True,
              two_eos=True),
    "g": dict(num_beams=4, max_new_tokens=7, length_penalty=1.5, early_stopping="never", frequent=True),
}
FREQUENT = {"tiny_llama": 54, "tiny_gpt2": 35, "tiny_qwen2": 12, "tiny_flan_t5": 84}


def t5_source():
    g = load_file(os.path.join(DATA, "tiny_flan_t5", "logits.safetensors"))
    return g["ids"][0][: int(g["mask"][0].sum())].long()


MODELS = {
    "tiny_llama": (tf.AutoModelForCausalLM, torch.tensor([1, 5, 9, 13])),
    "tiny_gpt2": (tf.AutoModelForCausalLM, torch.tensor([7, 3, 11])),
    "tiny_qwen2": (tf.AutoModelForCausalLM, torch.tensor([1, 40, 8, 8, 19])),
    "tiny_flan_t5": (tf.AutoModelForSeq2SeqLM, None),
}

tensors, meta = {}, {}
for name, (auto, prompt) in MODELS.items():
    model = auto.from_pretrained(os.path.join(DATA, name), dtype=torch.float32).eval()
    seq2seq = prompt is None
    if seq2seq:
        prompt = t5_source()
    tensors[f"{name}.prompt"] = prompt.int()
    for case, settings in CASES.items():
        settings = dict(settings)
        eos = FREQUENT[name] if settings.pop("frequent", False) else EOS
        eos = [eos, EOS] if settings.pop("two_eos", False) else [eos]
        with torch.no_grad():
            out = model.generate(input_ids=prompt[None], attention_mask=torch.ones_like(prompt)[None],
                                 do_sample=False, num_return_sequences=settings["num_beams"],
                                 eos_token_id=eos, pad_token_id=0, output_scores=True,
                                 return_dict_in_generate=True, **settings)
        seqs = out.sequences if seq2seq else out.sequences[:, prompt.numel():]
        if seq2seq:
            seqs = seqs[:, 1:]  # the decoder's start token
        rows = torch.full((seqs.shape[0], settings["max_new_tokens"]), -1, dtype=torch.int32)
        ended = torch.zeros(seqs.shape[0], dtype=torch.int32)
        for i, s in enumerate(seqs.tolist()):
            kept = []
            for t in s:
                if t in eos:
                    ended[i] = 1
                    break
                kept.append(t)
            rows[i, : len(kept)] = torch.tensor(kept, dtype=torch.int32) if kept else rows[i, :0]
        tensors[f"{name}.{case}.sequences"] = rows
        tensors[f"{name}.{case}.scores"] = out.sequences_scores.float()
        tensors[f"{name}.{case}.ended"] = ended
        tensors[f"{name}.{case}.eos"] = torch.tensor(eos, dtype=torch.int32)
        print(name, case, rows.tolist(), ended.tolist(), [round(x, 4) for x in out.sequences_scores.tolist()])
meta["cases"] = json.dumps(CASES)
meta["transformers"] = tf.__version__
write_safetensors(os.path.join(DATA, "beam_golden.safetensors"), tensors, meta)
print("wrote", os.path.join(DATA, "beam_golden.safetensors"))
