"""tests/data/tiny_distilbert*, tiny_xlm_roberta: tiny random DistilBERT and XLM-RoBERTa encoders
made with transformers' own classes (save_pretrained folders) and what they compute for a padded
batch, for tests/io/pretrained_distilbert_test.cc.

    PYTHONPATH=tests/nn python3 tests/nn/gen_hf_distilbert_golden.py [out dir]

The DistilBERT folders use the vocabulary of tests/data/tokenizer/bert (a copy of its
tokenizer.json goes with them), so the golden ids are what that tokenizer gives.

  tiny_distilbert         DistilBertForMaskedLM (vocab_transform, GELU, vocab_layer_norm, the
                          projector tied to the word embeddings)
  tiny_distilbert_base    DistilBertModel, saved without the "distilbert." prefix, with
                          sinusoidal position embeddings
  tiny_distilbert_cls     DistilBertForSequenceClassification, 3 labels (pre_classifier, ReLU,
                          classifier on the first token)
  tiny_distilbert_token   DistilBertForTokenClassification, 5 labels
  tiny_distilbert_qa      DistilBertForQuestionAnswering
  tiny_xlm_roberta        XLMRobertaForMaskedLM (RoBERTa's layout under another name)

Each model's 1-d parameters (norm gains, biases) are moved off their initial values so that a
lost one shows. logits.safetensors holds "ids", "mask" I32 [B, T], "hidden" F32 [B, T, dim] (the
last hidden state) and "logits" (masked-LM: [B, T, vocab]; sequence classifier: [B, labels];
token classifier: [B, T, labels]; question answering: [B, T, 2], start and end stacked), computed
in float32 on the CPU in eval mode. tiny_distilbert's and tiny_distilbert_cls's also hold the loss
for "labels" I32 and every parameter's gradient of it, "grad/<the file's name>" (eval mode: no
dropout)."""
import torch
import transformers as tf
from tokenizers import Tokenizer

from gen_hf_bert_golden import TOKENIZER, perturb, save  # the same output folder and tokenizer

DISTIL = dict(dim=32, n_layers=2, n_heads=4, hidden_dim=48, initializer_range=0.1, max_position_embeddings=40,
              activation="gelu", dropout=0.1, attention_dropout=0.1, qa_dropout=0.1, seq_classif_dropout=0.2,
              attn_implementation="eager")


def run(model, ids, mask, with_loss=None):
    model.eval()
    model.zero_grad()
    out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True,
                **({"labels": with_loss} if with_loss is not None else {}))
    t = {"ids": ids.int(), "mask": mask.int(), "hidden": out.hidden_states[-1].detach().float()}
    if hasattr(out, "start_logits"):
        t["logits"] = torch.stack([out.start_logits, out.end_logits], -1).detach().float()
    elif hasattr(out, "logits"):
        t["logits"] = out.logits.detach().float()
    if with_loss is not None:
        out.loss.backward()
        t["labels"] = with_loss.int()
        t["loss"] = out.loss.detach().reshape(1).float()
        for name, p in model.named_parameters():
            t["grad/" + name] = p.grad.float().clone()
    return t


def main():
    torch.manual_seed(0)
    tok = Tokenizer.from_file(TOKENIZER)
    tok.enable_padding(pad_id=tok.token_to_id("[PAD]"), pad_token="[PAD]")
    vocab = tok.get_vocab_size()
    enc = tok.encode_batch(["The cat sat on the [MASK].", "Don't panic: 42 is the answer, isn't it?"])
    ids = torch.tensor([e.ids for e in enc])
    mask = torch.tensor([e.attention_mask for e in enc])

    mlm = tf.DistilBertForMaskedLM(tf.DistilBertConfig(vocab_size=vocab, **DISTIL))
    perturb(mlm)
    labels = torch.full_like(ids, -100)
    labels[0, 2], labels[0, 5], labels[1, 1], labels[1, 7] = ids[0, 2], 7, ids[1, 1], ids[1, 7]
    save("tiny_distilbert", mlm, run(mlm, ids, mask, labels), TOKENIZER)

    base = tf.DistilBertModel(tf.DistilBertConfig(vocab_size=vocab, sinusoidal_pos_embds=True, **DISTIL))
    perturb(base)
    save("tiny_distilbert_base", base, run(base, ids, mask), TOKENIZER)

    cls = tf.DistilBertForSequenceClassification(tf.DistilBertConfig(vocab_size=vocab, num_labels=3, **DISTIL))
    perturb(cls)
    save("tiny_distilbert_cls", cls, run(cls, ids, mask, torch.tensor([2, 0])), TOKENIZER)

    token = tf.DistilBertForTokenClassification(tf.DistilBertConfig(vocab_size=vocab, num_labels=5, **DISTIL))
    perturb(token)
    save("tiny_distilbert_token", token, run(token, ids, mask), TOKENIZER)

    qa = tf.DistilBertForQuestionAnswering(tf.DistilBertConfig(vocab_size=vocab, **DISTIL))
    perturb(qa)
    save("tiny_distilbert_qa", qa, run(qa, ids, mask), TOKENIZER)

    xlmr = tf.XLMRobertaForMaskedLM(tf.XLMRobertaConfig(
        vocab_size=64, max_position_embeddings=16 + 2, type_vocab_size=1, pad_token_id=1, bos_token_id=0,
        eos_token_id=2, hidden_act="gelu", hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=48, initializer_range=0.1, layer_norm_eps=1e-5, attn_implementation="eager"))
    perturb(xlmr)
    rids = torch.tensor([[0, 5, 9, 13, 17, 21, 25, 2], [0, 60, 33, 7, 2, 1, 1, 1]])
    save("tiny_xlm_roberta", xlmr, run(xlmr, rids, (rids != 1).long()))


if __name__ == "__main__":
    main()
