"""tests/data/tiny_bert*, tiny_roberta: tiny random BERT-family encoders made with transformers'
own classes (save_pretrained folders) and what they compute for a padded batch, for
tests/io/pretrained_bert_test.cc.

    PYTHONPATH=tests/nn python3 tests/nn/gen_hf_bert_golden.py [out dir]

Run after tests/text/gen_tokenizer_golden.py --only bert: tiny_bert's vocabulary is that
tokenizer's, and the folder gets a copy of its tokenizer.json, so the golden ids are what the
tokenizer gives for two texts padded to one length.

  tiny_bert          BertForMaskedLM (no pooler, the prediction head tied to the embeddings)
  tiny_bert_pooler   BertModel with its pooler, a sentence pair (token type ids 0 and 1), the
                     tanh GELU (hidden_act "gelu_new")
  tiny_roberta       RobertaForMaskedLM: positions counted from padding_idx + 1 over the tokens
                     that are not padding, one token type
  tiny_bert_cls      BertForSequenceClassification, 3 labels (the pooler, then the classifier)
  tiny_roberta_cls   RobertaForSequenceClassification, 2 labels (classifier.dense, tanh,
                     classifier.out_proj on the first token)
  tiny_bert_token    BertForTokenClassification, 5 labels (a classifier on every token)
  tiny_bert_qa       BertForQuestionAnswering (qa_outputs: start and end logits per token)
  tiny_roberta_qa    RobertaForQuestionAnswering

Each model's 1-d parameters (norm gains, biases) are moved off their initial values so that a
lost one shows. logits.safetensors holds "ids", "mask", "types" I32 [B, T] and what the model
gives for them in float32 on the CPU with that attention mask: "hidden" F32 [B, T, hidden]
(last_hidden_state), and "logits" F32 [B, T, vocab] (masked-LM models), [B, labels]
(sequence classifiers), [B, T, labels] (token classifiers), [B, T, 2] (question answering: start
and end logits stacked) or "pooled" F32 [B, hidden] (BertModel's pooler_output). tiny_bert's and
tiny_bert_cls's also hold transformers' loss for "labels" I32 ([B, T] with -100 where no token
is predicted; [B] for the classifier) and the gradient of that loss for every parameter,
"grad/<the file's name>", computed in eval mode (no dropout)."""
import os
import shutil
import sys

import torch
import transformers as tf
from tokenizers import Tokenizer

from golden_file import write_safetensors

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "data")
TOKENIZER = os.path.join(OUT, "tokenizer", "bert", "tokenizer.json")
COMMON = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
              initializer_range=0.1, layer_norm_eps=1e-12, attn_implementation="eager")


def perturb(model):
    torch.manual_seed(1)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))


def save(name, model, tensors, tokenizer=None):
    folder = os.path.join(OUT, name)
    os.makedirs(folder, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    if tokenizer:
        shutil.copy(tokenizer, os.path.join(folder, "tokenizer.json"))
    write_safetensors(os.path.join(folder, "logits.safetensors"), tensors, {})
    from safetensors import safe_open
    with safe_open(os.path.join(folder, "model.safetensors"), "pt") as f:
        print(name, sorted(f.keys()))


def gradients(model, ids, mask, types, labels, t):
    """transformers' loss for `labels` and every parameter's gradient of it, into t."""
    model.eval()
    model.zero_grad()
    out = model(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels)
    out.loss.backward()
    t["labels"] = labels.int()
    t["loss"] = out.loss.detach().reshape(1).float()
    for name, p in model.named_parameters():
        t["grad/" + name] = p.grad.float().clone()
    return t


def run_qa(model, ids, mask, types):
    model.eval()
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
    return {"ids": ids.int(), "mask": mask.int(), "types": types.int(), "hidden": out.hidden_states[-1].float(),
            "logits": torch.stack([out.start_logits, out.end_logits], -1).float()}


def run(model, ids, mask, types, head):
    model.eval()
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
    t = {"ids": ids.int(), "mask": mask.int(), "types": types.int(), "hidden": out.hidden_states[-1].float()}
    if head == "logits":
        t["logits"] = out.logits.float()
    else:
        t["pooled"] = out.pooler_output.float()
    return t


def main():
    torch.manual_seed(0)
    tok = Tokenizer.from_file(TOKENIZER)
    tok.enable_padding(pad_id=tok.token_to_id("[PAD]"), pad_token="[PAD]")
    vocab = tok.get_vocab_size()

    mlm = tf.BertForMaskedLM(tf.BertConfig(vocab_size=vocab, max_position_embeddings=40, type_vocab_size=2,
                                           hidden_act="gelu", **COMMON))
    perturb(mlm)
    enc = tok.encode_batch(["The cat sat on the [MASK].", "Don't panic: 42 is the answer, isn't it?"])
    ids = torch.tensor([e.ids for e in enc])
    mask = torch.tensor([e.attention_mask for e in enc])
    # Predict the tokens at a few positions of each row (padding never).
    labels = torch.full_like(ids, -100)
    labels[0, 2], labels[0, 5], labels[1, 1], labels[1, 7] = ids[0, 2], 7, ids[1, 1], ids[1, 7]
    types = torch.zeros_like(ids)
    t = run(mlm, ids, mask, types, "logits")
    save("tiny_bert", mlm, gradients(mlm, ids, mask, types, labels, t), TOKENIZER)

    base = tf.BertModel(tf.BertConfig(vocab_size=vocab, max_position_embeddings=40, type_vocab_size=2,
                                      hidden_act="gelu_new", **COMMON), add_pooling_layer=True)
    perturb(base)
    enc = tok.encode_batch([("How old are you?", "I am six."), ("Where?", "Here, by the sea and the sand.")])
    ids = torch.tensor([e.ids for e in enc])
    mask = torch.tensor([e.attention_mask for e in enc])
    types = torch.tensor([e.type_ids for e in enc])
    save("tiny_bert_pooler", base, run(base, ids, mask, types, "pooled"), TOKENIZER)

    cls = tf.BertForSequenceClassification(tf.BertConfig(
        vocab_size=vocab, max_position_embeddings=40, type_vocab_size=2, hidden_act="gelu", num_labels=3,
        **COMMON))
    perturb(cls)
    t = run(cls, ids, mask, types, "logits")
    save("tiny_bert_cls", cls, gradients(cls, ids, mask, types, torch.tensor([2, 0]), t), TOKENIZER)

    roberta_cls = tf.RobertaForSequenceClassification(tf.RobertaConfig(
        vocab_size=64, max_position_embeddings=16 + 2, type_vocab_size=1, pad_token_id=1, bos_token_id=0,
        eos_token_id=2, hidden_act="gelu", num_labels=2, **COMMON))
    perturb(roberta_cls)
    rids = torch.tensor([[0, 5, 9, 13, 17, 21, 25, 2], [0, 60, 33, 7, 2, 1, 1, 1]])
    save("tiny_roberta_cls", roberta_cls, run(roberta_cls, rids, (rids != 1).long(), torch.zeros_like(rids), "logits"))

    # Token classification and question answering: the sentence-pair batch (types 0 and 1).
    bert_kw = dict(vocab_size=vocab, max_position_embeddings=40, type_vocab_size=2, hidden_act="gelu", **COMMON)
    token = tf.BertForTokenClassification(tf.BertConfig(num_labels=5, **bert_kw))
    perturb(token)
    save("tiny_bert_token", token, run(token, ids, mask, types, "logits"), TOKENIZER)
    qa = tf.BertForQuestionAnswering(tf.BertConfig(**bert_kw))
    perturb(qa)
    save("tiny_bert_qa", qa, run_qa(qa, ids, mask, types), TOKENIZER)
    roberta_qa = tf.RobertaForQuestionAnswering(tf.RobertaConfig(
        vocab_size=64, max_position_embeddings=16 + 2, type_vocab_size=1, pad_token_id=1, bos_token_id=0,
        eos_token_id=2, hidden_act="gelu", **COMMON))
    perturb(roberta_qa)
    save("tiny_roberta_qa", roberta_qa, run_qa(roberta_qa, rids, (rids != 1).long(), torch.zeros_like(rids)))

    roberta = tf.RobertaForMaskedLM(tf.RobertaConfig(vocab_size=64, max_position_embeddings=16 + 2,
                                                     type_vocab_size=1, pad_token_id=1, bos_token_id=0,
                                                     eos_token_id=2, hidden_act="gelu", **COMMON))
    perturb(roberta)
    ids = torch.tensor([[0, 5, 9, 13, 17, 21, 25, 2], [0, 60, 33, 7, 2, 1, 1, 1]])
    mask = (ids != 1).long()
    save("tiny_roberta", roberta, run(roberta, ids, mask, torch.zeros_like(ids), "logits"))


if __name__ == "__main__":
    main()
