"""tests/data/image: images and what Pillow and transformers' ViT image processor make of them,
for tests/image/image_test.cc; and tests/data/tiny_vit_cls/preprocessor_config.json.

    PYTHONPATH=tests/nn python3 tests/image/gen_image_golden.py [out dir]

  photo.png        a 31 × 23 RGB image (smooth gradients and noise), written by Pillow
  gray.png         a 9 × 12 grayscale image
  resized.safetensors
                   "<h>x<w>" I32 [h, w, 3] (values 0-255): photo.png resized by Pillow's Image.resize with
                   BILINEAR (antialiased when shrinking) to 16 × 16, 7 × 40, 64 × 50 and 23 × 31
                   (its own size: no resampling); "bicubic <h>x<w>": with BICUBIC, the first three
  pixels.safetensors
                   "pixels" F32 [2, 3, 16, 16]: ViTImageProcessor (the Pillow one, backend="pil")
                   of tiny_vit_cls on [photo.png, gray.png as RGB]; "logits" F32 [2, 5]: tiny_vit_cls on
                   them (float32, CPU); "fast_max_diff": how far the torchvision processor
                   (transformers 5's default) lands from those pixels, for the record
  clip/, deit/     preprocessor_config.json of a CLIPImageProcessor (bicubic resize of the
                   shortest edge to 18, center crop 16 × 16) and a DeiTImageProcessor (bicubic
                   resize to 20 × 20, center crop 16 × 12), ImageNet's mean and std
  crops.safetensors
                   "clip", "deit" F32 [2, 3, 16, 16 or 12]: what each (its Pillow backend) makes
                   of [photo.png, gray.png as RGB]
"""
import os
import sys

import numpy as np
import torch
import transformers as tf
from PIL import Image

from golden_file import write_safetensors

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "data")


def main():
    rng = np.random.default_rng(0)
    h, w = 23, 31
    y, x = np.mgrid[0:h, 0:w]
    photo = np.stack([255 * x / (w - 1), 255 * y / (h - 1), 128 + 100 * np.sin(x / 3.0 + y / 5.0)], -1)
    photo = np.clip(photo + rng.normal(0, 20, photo.shape), 0, 255).astype(np.uint8)
    folder = os.path.join(OUT, "image")
    os.makedirs(folder, exist_ok=True)
    Image.fromarray(photo, "RGB").save(os.path.join(folder, "photo.png"))
    gray = rng.integers(0, 256, (12, 9)).astype(np.uint8)
    Image.fromarray(gray, "L").save(os.path.join(folder, "gray.png"))

    img = Image.open(os.path.join(folder, "photo.png"))
    resized = {}
    for (rh, rw) in [(16, 16), (7, 40), (64, 50), (23, 31)]:
        resized[f"{rh}x{rw}"] = torch.from_numpy(np.asarray(img.resize((rw, rh), Image.BILINEAR)).astype(np.int32))
        if (rh, rw) != (23, 31):
            resized[f"bicubic {rh}x{rw}"] = torch.from_numpy(
                np.asarray(img.resize((rw, rh), Image.BICUBIC)).astype(np.int32))
    write_safetensors(os.path.join(folder, "resized.safetensors"), resized, {})

    vit = os.path.join(OUT, "tiny_vit_cls")
    tf.ViTImageProcessor(size={"height": 16, "width": 16}).save_pretrained(vit)
    # The processor takes RGB (it does not convert): the gray image as Pillow converts it, each
    # channel the gray value (as the library's reader gives it).
    images = [Image.open(os.path.join(folder, "photo.png")), Image.open(os.path.join(folder, "gray.png")).convert("RGB")]
    slow = tf.AutoImageProcessor.from_pretrained(vit, backend="pil")
    pixels = slow(images=images, return_tensors="pt")["pixel_values"].float()
    fast = tf.AutoImageProcessor.from_pretrained(vit, backend="torchvision")
    fast_pixels = fast(images=images, return_tensors="pt")["pixel_values"].float()
    diff = (fast_pixels - pixels).abs().max().reshape(1)
    print(type(slow).__name__, type(fast).__name__, "fast - slow max", float(diff))
    model = tf.ViTForImageClassification.from_pretrained(vit)
    model.eval()
    with torch.no_grad():
        logits = model(pixel_values=pixels).logits.float()
    write_safetensors(os.path.join(folder, "pixels.safetensors"),
                      {"pixels": pixels, "logits": logits, "fast_max_diff": diff.float()}, {})
    print(open(os.path.join(vit, "preprocessor_config.json")).read())

    # Bicubic resampling, a shortest-edge resize and a center crop, as CLIP's and DeiT's
    # processors do them (their folders hold only preprocessor_config.json).
    crops = {}
    for name, proc in [("clip", tf.CLIPImageProcessor(size={"shortest_edge": 18}, crop_size={"height": 16, "width": 16})),
                       ("deit", tf.DeiTImageProcessor(size={"height": 20, "width": 20},
                                                      crop_size={"height": 16, "width": 12}))]:
        where = os.path.join(folder, name)
        proc.save_pretrained(where)
        pil = tf.AutoImageProcessor.from_pretrained(where, backend="pil")
        crops[name] = pil(images=images, return_tensors="pt")["pixel_values"].float()
        print(name, type(pil).__name__, tuple(crops[name].shape))
        print(open(os.path.join(where, "preprocessor_config.json")).read())
    write_safetensors(os.path.join(folder, "crops.safetensors"), crops, {})


if __name__ == "__main__":
    main()
