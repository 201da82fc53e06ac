"""The built-in IQA metrics: one :class:`~embeval_analysis.iqa.metric_registry.Metric` record each, registered on
:data:`~embeval_analysis.iqa.metric_registry.METRICS` when that registry is first used (registry order: the
benchmark's default order). Directions and modes agree with pyiqa's ``DEFAULT_CONFIGS`` (tested).

Batch sizes (one thread, CPU time, ``python -m bench iqa``): SSIM is faster one image at a time (2-15 ms per
128x96 image vs 23-26 ms batched), PSNR in batches of 8 (0.08-0.18 ms vs 0.1-0.4 ms with 32); GMSD (8 and 32
within the timing noise) and PIQE keep the default 32. Values do not depend on the batch size.
"""
from __future__ import annotations

from embeval.distortion.measures import PSNR_CAP_DB
from embeval_analysis.iqa.metric_registry import Metric, register_metric

PYIQA_CACHE_WEIGHTS = "its pretrained weights in pyiqa's cache"
FR_FUSION_INPUTS = ("psnr", "ssim", "gmsd")  # cheap ones: NLPD costs ~1 s per image on the CPU

BUILTIN: tuple[Metric, ...] = (
    # zero-shot through pyiqa, no file needed
    Metric("psnr", "FR", description="peak signal-to-noise ratio (dB; identical frames capped at 60)", batch_size=8,
           cap=PSNR_CAP_DB, bench=True),
    Metric("ssim", "FR", description="structural similarity", batch_size=1, bench=True),
    Metric("gmsd", "FR", higher_is_better=False, description="gradient magnitude similarity deviation", bench=True),
    Metric("nlpd", "FR", higher_is_better=False, description="normalised Laplacian pyramid distance (~1 s per image)"),
    Metric("vif", "FR", description="visual information fidelity"),
    Metric("fsim", "FR", description="feature similarity"),
    Metric("piqe", "NR", higher_is_better=False, description="perception-based image quality evaluator", bench=True),
    # zero-shot through pyiqa, a file the user provides
    Metric("niqe", "NR", higher_is_better=False, weights="niqe_modelparameters.mat", bench=True,
           description="natural image quality evaluator"),
    Metric("brisque", "NR", higher_is_better=False, weights="brisque_svm_weights.pth", bench=True,
           description="BRISQUE with its pretrained SVR"),
    Metric("ilniqe", "NR", higher_is_better=False, weights="ILNIQE_templateModel.mat", description="integrated local NIQE"),
    Metric("nrqm", "NR", weights="NRQM_model.mat", description="Ma et al.'s no-reference quality metric"),
    # the Embodied-IQA paper's learned pyiqa metrics: zero-shot with their pretrained files, or fine-tuned
    Metric("lpips", "FR", higher_is_better=False, weights="alexnet + LPIPS weights", finetune=True,
           description="learned perceptual image patch similarity"),
    Metric("dists", "FR", higher_is_better=False, weights="vgg16 + DISTS weights", finetune=True,
           description="deep image structure and texture similarity"),
    Metric("dbcnn", "NR", weights=PYIQA_CACHE_WEIGHTS, finetune=True, description="deep bilinear CNN"),
    Metric("hyperiqa", "NR", weights=PYIQA_CACHE_WEIGHTS, finetune=True, description="HyperIQA"),
    Metric("topiq_nr", "NR", weights=PYIQA_CACHE_WEIGHTS, finetune=True, description="TOPIQ, no reference"),
    Metric("topiq_fr", "FR", weights=PYIQA_CACHE_WEIGHTS, finetune=True, description="TOPIQ, full reference"),
    Metric("clipiqa", "NR", weights=PYIQA_CACHE_WEIGHTS, finetune=True, no_random_init="CLIP weights",
           description="CLIP-IQA"),
    Metric("liqe", "NR", weights=PYIQA_CACHE_WEIGHTS, finetune=True, no_random_init="CLIP weights",
           description="LIQE (CLIP-based)"),
    Metric("ahiq", "FR", weights=PYIQA_CACHE_WEIGHTS, finetune=True, description="attention-based hybrid IQA"),
    Metric("ckdn", "FR", weights=PYIQA_CACHE_WEIGHTS, finetune=True, description="conditional knowledge distillation"),
    Metric("qalign", "NR", weights=PYIQA_CACHE_WEIGHTS, finetune=True, no_random_init="the mPLUG-Owl2 checkpoint",
           description="Q-Align (large multimodal model)"),
    # trained on each split's training part (embeval_analysis.iqa.bench)
    Metric("cnniqa", "NR", "trained", trainer="cnniqa", bench=True, description="pyiqa CNNIQA trained from scratch"),
    Metric("brisque-svr", "NR", "trained", trainer="features", features=("nss",), bench=True,
           description="BRISQUE NSS features (pyiqa) + SVR retrained on the target"),
    # the normal scores of the target's ranks (heavy-tailed Decision score): held-out SRCC 0.44 -> 0.60 on the
    # demo database together with the signal statistics (docs/iqa.md)
    Metric("nr-fusion", "NR", "trained", trainer="features", features=("nss", "colour", "stats", "signal"),
           target_transform="rank", epsilon=0.1, bench=True,
           description="BRISQUE NSS + colour moments + image and signal statistics + SVR on the target's normal scores"),
    Metric("fr-fusion", "FR", "trained", trainer="fusion", fusion_of=FR_FUSION_INPUTS, bench=True,
           description="SVR over " + "/".join(FR_FUSION_INPUTS)),
)

for _metric in BUILTIN:
    register_metric(_metric)
del _metric
