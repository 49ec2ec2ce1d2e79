"""Tiny Hugging Face models made by transformers, for tests/hf_spec.lua: each
folder under tests/golden/hf/ is what model.save_pretrained wrote (config.json
and the safetensors weights), and tests/golden/hf/expected.safetensors holds,
per model, the input ids, and the logits in float32 (eval mode) and the loss
with labels = the ids of the folder as transformers loads it back.

- gpt2: GPT-2 with tied embeddings, gelu_new, one model.safetensors.
- gpt2_sharded: tie_word_embeddings = false, the exact gelu,
  scale_attn_by_inverse_layer_idx, written in shards with their index.
- llama: grouped-query attention (4 heads, 2 key/value heads), default RoPE.
- llama3_bf16: rope_type llama3, attention and MLP biases, a head_dim that is
  not hidden_size / heads, tied embeddings, saved in bfloat16 and in shards
  (its logits: the folder loaded in float32).

Beside them, torch.nn.functional.rms_norm's outputs and gradients
(rms_* entries: float32, float64, an eps, bfloat16).

Every weight is drawn at random (norms' too), so a name or a layout mapped
wrong changes the logits.  Run from the repository root with the cached PyPI
venv (torch 2.15, transformers 5):

    py=$(scripts/py-venv.sh); $py tests/golden/make_hf.py

Its outputs are committed.
"""
import os
import shutil

import torch
import transformers
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

assert torch.__version__.startswith("2.15"), torch.__version__
assert transformers.__version__.startswith("5."), transformers.__version__

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf")


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if p.dim() == 1 and name.endswith("weight"):  # norms: around one
                p.copy_(1 + 0.2 * noise)
            else:
                p.copy_(0.2 * noise)


def make(name, model, vocab, T, seed, save_dtype=None, **save):
    randomize(model, seed)
    model.eval()
    path = os.path.join(OUT, name)
    shutil.rmtree(path, ignore_errors=True)
    if save_dtype is not None:
        model = model.to(save_dtype)
    model.save_pretrained(path, **save)
    # the logits of the folder as transformers loads it (in float32): not
    # of the model in memory, whose rotary frequencies .to(bfloat16) rounded
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ids = torch.randint(0, vocab, (2, T), generator=torch.Generator().manual_seed(seed + 1))
    with torch.no_grad():
        out = model(ids, labels=ids)
    return {f"{name}.ids": ids, f"{name}.logits": out.logits.float().contiguous(),
            f"{name}.loss": out.loss.float().reshape(1)}


expected = {}
expected.update(make("gpt2", GPT2LMHeadModel(GPT2Config(
    vocab_size=96, n_positions=24, n_embd=32, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0)),
    96, 12, 1))
expected.update(make("gpt2_sharded", GPT2LMHeadModel(GPT2Config(
    vocab_size=80, n_positions=16, n_embd=24, n_layer=3, n_head=3, n_inner=40, activation_function="gelu",
    scale_attn_by_inverse_layer_idx=True, tie_word_embeddings=False, layer_norm_epsilon=1e-4,
    bos_token_id=0, eos_token_id=0)),
    80, 16, 2, max_shard_size="8KB"))
expected.update(make("llama", LlamaForCausalLM(LlamaConfig(
    vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, bos_token_id=0, eos_token_id=1)),
    64, 20, 3))
expected.update(make("llama3_bf16", LlamaForCausalLM(LlamaConfig(
    vocab_size=72, hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=1, head_dim=16, max_position_embeddings=64, attention_bias=True, mlp_bias=True,
    tie_word_embeddings=True, bos_token_id=0, eos_token_id=1,
    rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 16})),
    72, 24, 4, save_dtype=torch.bfloat16, max_shard_size="16KB"))
# torch.nn.functional.rms_norm (the Llama's norm is nn.RMSNorm): outputs and
# the gradients of sum(out * g)
g = torch.Generator().manual_seed(5)
for name, shape, ns, affine, eps, dtype in (
        ("rms_f32", (3, 4, 5), (5,), True, None, torch.float32),
        ("rms_f64", (3, 4, 5), (4, 5), False, 1e-5, torch.float64),
        ("rms_eps", (2, 8), (8,), True, 0.5, torch.float32),
        ("rms_bf16", (4, 16), (16,), True, None, torch.bfloat16)):
    x = (torch.randn(shape, generator=g) * 2 + 0.5).to(dtype).requires_grad_()
    w = (torch.randn(ns, generator=g)).to(dtype).requires_grad_() if affine else None
    out = torch.nn.functional.rms_norm(x, ns, w, eps)
    up = torch.randn(shape, generator=g).to(dtype)
    (out.float() * up.float()).sum().backward()
    expected.update({f"{name}.x": x.detach(), f"{name}.out": out.detach(), f"{name}.up": up,
                     f"{name}.grad_x": x.grad})
    if affine:
        expected.update({f"{name}.w": w.detach(), f"{name}.grad_w": w.grad})

save_file(expected, os.path.join(OUT, "expected.safetensors"), metadata={
    "transformers": transformers.__version__, "torch": torch.__version__})
for name in sorted(os.listdir(OUT)):
    print(name, sorted(os.listdir(os.path.join(OUT, name))) if os.path.isdir(os.path.join(OUT, name)) else "")
