"""The peer of prompt_bench: transformers' generate(prompt, max_new_tokens=1) of a random Mamba or
Mamba-2 model of the same shapes (mamba-130m, mamba2-130m), batch 1, greedy: the prompt's forward
with its cache, then one token. Prints the same lines as prompt_bench:
    <model>_prompt<L> hf_generate_<dtype> <ms> ms/prompt <tokens/s> tokens/s
and whether transformers found the fused kernels (mamba_ssm, causal_conv1d) or ran its PyTorch path.

    python3 prompt_peer.py [cuda|cpu] [mamba|mamba2] [prompt tokens] [fp32|bf16]
"""
import statistics
import sys
import time

import torch
import transformers


def main():
    device = sys.argv[1] if len(sys.argv) > 1 else "cuda"
    name = sys.argv[2] if len(sys.argv) > 2 else "mamba"
    length = int(sys.argv[3]) if len(sys.argv) > 3 else 512
    dtype_name = sys.argv[4] if len(sys.argv) > 4 else "fp32"
    dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
    if name == "mamba":
        config = transformers.MambaConfig(vocab_size=50280, hidden_size=768, num_hidden_layers=24,
                                          state_size=16, expand=2, conv_kernel=4)
        model = transformers.MambaForCausalLM(config)
        module = sys.modules[transformers.MambaForCausalLM.__module__]
    else:
        config = transformers.Mamba2Config(vocab_size=50288, hidden_size=768, num_hidden_layers=24,
                                           state_size=128, expand=2, head_dim=64, num_heads=24, n_groups=1,
                                           conv_kernel=4, chunk_size=256)
        model = transformers.Mamba2ForCausalLM(config)
        module = sys.modules[transformers.Mamba2ForCausalLM.__module__]
    fast = getattr(module, "is_fast_path_available", None)
    print(f"# transformers {transformers.__version__}, torch {torch.__version__}, "
          f"fused kernels: {fast}", flush=True)
    model = model.to(device=device, dtype=dtype).eval()
    ids = torch.randint(0, config.vocab_size, (1, length), device=device)

    def once():
        with torch.no_grad():
            model.generate(ids, max_new_tokens=1, do_sample=False, pad_token_id=0)
        if device == "cuda":
            torch.cuda.synchronize()

    once()
    runs = []
    for _ in range(3):
        t0 = time.perf_counter()
        once()
        runs.append(time.perf_counter() - t0)
    sec = statistics.median(runs)
    print(f"{name}_prompt{length:<6} hf_generate_{dtype_name:<10} {sec * 1e3:10.2f} ms/prompt "
          f"{length / sec:12.1f} tokens/s")


if __name__ == "__main__":
    main()
