"""pyiqa architectures without side effects on transformers: topiq's CFANet (a class named unlike its module) is
imported alone, not through pyiqa's fallback that imports every architecture module, among them Compare2Score's and
Q-Align's, which replace transformers' Llama classes for the whole process (a Llama model built later in it failed:
SmolVLA, the HF VLM subjects); a Compare2Score or Q-Align that cannot be built (offline) puts them back."""
import json
import subprocess
import sys

import pytest

SCRIPT = r"""
import contextlib, json, sys
import numpy as np
import transformers.models.llama.modeling_llama as ml
from transformers import LlamaConfig, LlamaForCausalLM
own = ml.LlamaDecoderLayer
import embeval_analysis.iqa.finetune as ft
import embeval_analysis.iqa.pyiqa_archs as pa
if sys.argv[1] == "unfixed":  # pyiqa's own ways
    ft.import_arch = pa.import_metric_arch = lambda name: None
    pa.llama_kept_if_it_fails = lambda metric: contextlib.nullcontext()
from embeval_analysis.iqa.metrics import zero_shot_scores
from pyiqa.utils.registry import ARCH_REGISTRY

tiny = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                   num_key_value_heads=2)
out = {"type": ft.network_options("topiq_nr", random_init=True)["type"], "registered": "CFANet" in ARCH_REGISTRY,
       "own_after_topiq": ml.LlamaDecoderLayer is own}
img = np.zeros((32, 32, 3), np.uint8)
values, missing, _ = zero_shot_scores([img], [img], ["compare2score", "qalign", "psnr"])  # no checkpoints here
out.update(missing=sorted(missing), psnr=float(values["psnr"][0]), own_after_c2s=ml.LlamaDecoderLayer is own,
           c2s_imported="pyiqa.archs.compare2score_arch" in sys.modules)
try:
    out["llama_builds"] = type(LlamaForCausalLM(tiny)).__name__
except AttributeError as exc:
    out["llama_builds"] = str(exc)
print(json.dumps(out))
"""


@pytest.mark.parametrize("mode", ["fixed", "unfixed"])
def test_topiq_and_a_failed_compare2score_leave_transformers_llama_as_it_was(mode):
    r = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["type"] == "CFANet" and out["registered"]
    assert out["missing"] == ["compare2score", "qalign"] and out["psnr"] == 60.0 and out["c2s_imported"], out
    if mode == "fixed":
        assert out["own_after_topiq"] and out["own_after_c2s"] and out["llama_builds"] == "LlamaForCausalLM", out
    else:  # the control: pyiqa's fallback replaces transformers' Llama layer, and a Llama model fails to build
        assert not out["own_after_topiq"] and not out["own_after_c2s"], out
        assert "rope_theta" in out["llama_builds"], out


def test_the_llama_guard_restores_on_failure_only():
    import transformers.models.llama.modeling_llama as ml

    from embeval_analysis.iqa.pyiqa_archs import llama_kept_if_it_fails

    own, forward = ml.LlamaDecoderLayer, ml.LlamaModel.forward
    with pytest.raises(OSError), llama_kept_if_it_fails("compare2score"):
        ml.LlamaDecoderLayer, ml.LlamaModel.forward, ml.NEW_NAME = object, print, 1
        raise OSError("no checkpoint")
    assert ml.LlamaDecoderLayer is own and ml.LlamaModel.forward is forward and not hasattr(ml, "NEW_NAME")
    try:
        with llama_kept_if_it_fails("compare2score"):
            ml.LlamaDecoderLayer = object  # a build that succeeds keeps what it replaced
        assert ml.LlamaDecoderLayer is object
    finally:
        ml.LlamaDecoderLayer = own
    try:
        with pytest.raises(OSError), llama_kept_if_it_fails("psnr"):  # not one of those: nothing is put back for it
            ml.LlamaDecoderLayer = object
            raise OSError("no checkpoint")
        assert ml.LlamaDecoderLayer is object
    finally:
        ml.LlamaDecoderLayer = own


def test_a_metric_that_could_not_download_says_what_it_needs_in_one_line(tmp_path):
    from urllib.error import URLError

    from embeval_analysis.iqa.metrics import missing_reason

    hf = OSError("We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in the "
                 "cached files. '[Errno -2] Name or service not known' thrown while requesting HEAD "
                 "https://huggingface.co/q-future/Compare2Score/resolve/main/config.json")
    assert missing_reason(hf, "", tmp_path) == ("needs the Hugging Face model q-future/Compare2Score in the Hugging Face "
                                                "cache (no network): OSError")
    url = URLError("<urlopen error [Errno -2] Name or service not known> while fetching "
                   "https://github.com/chaofengc/IQA-PyTorch/releases/download/v0.1-weights/DBCNN_koniq.pth")
    assert missing_reason(url, "", tmp_path) == f"needs DBCNN_koniq.pth in {tmp_path} (no network): URLError"
    assert missing_reason(OSError("couldn't reach it"), "", tmp_path) == \
        f"needs its pretrained files in {tmp_path} (no network): OSError"
    assert missing_reason(OSError("couldn't reach it"), "x.pth", tmp_path) == f"needs x.pth in {tmp_path} (no network): OSError"
