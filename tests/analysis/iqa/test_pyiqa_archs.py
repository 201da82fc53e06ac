"""A pyiqa architecture whose class is named unlike its module (topiq's CFANet) is imported without pyiqa's fallback,
which imports every architecture module and so Q-Align's, which replaces transformers' Llama classes for the whole
process (a Llama model built later in it failed: SmolVLA, the HF VLM subjects)."""
import json
import subprocess
import sys

SCRIPT = r"""
import json, sys
import transformers.models.llama.modeling_llama as ml
from transformers import LlamaConfig, LlamaForCausalLM
own = ml.LlamaDecoderLayer
from embeval_analysis.iqa.finetune import network_options
from embeval_analysis.iqa.pyiqa_archs import import_metric_arch
from pyiqa.utils.registry import ARCH_REGISTRY

opts = network_options("topiq_nr", random_init=True)
import_metric_arch("topiq_nr")
import_metric_arch("lpips")
tiny = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                   num_key_value_heads=2)
out = {"type": opts["type"], "registered": "CFANet" in ARCH_REGISTRY and "LPIPS" in ARCH_REGISTRY,
       "qalign_loaded": any("q_align" in k for k in sys.modules), "own_layer": ml.LlamaDecoderLayer is own,
       "llama_builds": type(LlamaForCausalLM(tiny)).__name__}
import pyiqa.archs
pyiqa.archs._lazy_import_arch("NoSuchArchitecture")  # pyiqa's own fallback: every architecture module
out["raw_fallback_replaces_llama"] = ml.LlamaDecoderLayer is not own
print(json.dumps(out))
"""


def test_topiq_is_imported_alone_and_transformers_llama_is_left_alone():
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["type"] == "CFANet" and out["registered"]
    assert not out["qalign_loaded"] and out["own_layer"] and out["llama_builds"] == "LlamaForCausalLM", out
    # the control: pyiqa's fallback does replace transformers' Llama layer (when it stops, drop pyiqa_archs)
    assert out["raw_fallback_replaces_llama"], out
