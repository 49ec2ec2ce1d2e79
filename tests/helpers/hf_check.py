"""tests/helpers/hf_check.py DIR EXPECTED: what transformers makes of a model
folder that ddp.hf.save_pretrained wrote (tests/hf_spec.lua), as one JSON
object on stdout: the class AutoModelForCausalLM.from_pretrained built, its
loading report (missing, unexpected and mismatched keys: all must be empty),
the dtype it loaded in by default, and the largest difference between its
logits (in float32, eval mode) and those ddplua computed for the same ids
(EXPECTED: a safetensors file with "ids" and "logits").
"""
import json
import sys
import warnings

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM
from transformers.utils import logging

logging.set_verbosity_error()
warnings.simplefilter("ignore")

path, expected = sys.argv[1], sys.argv[2]
want = load_file(expected)
auto = AutoModelForCausalLM.from_pretrained(path)
model, info = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, output_loading_info=True)
model.eval()
with torch.no_grad():
    logits = model(want["ids"]).logits
print(json.dumps({
    "class": type(model).__name__,
    "default_dtype": str(next(auto.parameters()).dtype).replace("torch.", ""),
    "missing": sorted(info.get("missing_keys", [])),
    "unexpected": sorted(info.get("unexpected_keys", [])),
    "mismatched": sorted(str(k) for k in info.get("mismatched_keys", [])),
    "tied": model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr(),
    "max_abs_diff": (logits - want["logits"]).abs().max().item(),
}))
