"""What transformers computes for examples/classify_image's zero-shot test (tests/CMakeLists.txt,
example_classify_image_clip): tests/data/tiny_clip's probabilities for the captions
"a photo of a cat." / "a photo of a dog." / "a photo of a car." on tests/data/image/photo.png and
gray.png, its CLIPImageProcessor (the pil backend, as tg::ImageProcessor) and CLIPTokenizer.

    python3 tests/nn/clip_zero_shot_reference.py"""
import os

import torch
import transformers as tf
from PIL import Image

DATA = os.path.join(os.path.dirname(__file__), "..", "data")


def main():
    folder = os.path.join(DATA, "tiny_clip")
    model = tf.CLIPModel.from_pretrained(folder).eval()
    tok = tf.CLIPTokenizer.from_pretrained(folder)
    proc = tf.AutoImageProcessor.from_pretrained(folder, backend="pil")
    labels = ["cat", "dog", "car"]
    text = tok(["a photo of a %s." % l for l in labels], padding=True, return_tensors="pt")
    for name in ("photo.png", "gray.png"):
        image = Image.open(os.path.join(DATA, "image", name)).convert("RGB")
        pixels = proc(images=[image], return_tensors="pt").pixel_values
        with torch.no_grad():
            out = model(input_ids=text.input_ids, attention_mask=text.attention_mask, pixel_values=pixels)
        probs = out.logits_per_image.softmax(-1)[0].tolist()
        print(name, " ".join("%s %.3f" % (l, p) for l, p in sorted(zip(labels, probs), key=lambda x: -x[1])))


if __name__ == "__main__":
    main()
