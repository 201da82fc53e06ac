"""bench/gpu_throughput.py, the GPU throughput check, on the CPU with the tiny OpenVLA-shaped config: every row is
there, embeval's batched path returns exactly the bare model's decoded tokens, the static-cache batch-1 path gives
the same action, and a 7B model without CUDA is refused in one line."""
import pytest

pytest.importorskip("transformers")

from bench import gpu_throughput as G  # noqa: E402


@pytest.fixture(scope="module")
def rows():
    return G.run("tiny", "cpu", "float32", batches=(1, 2), episodes=2, reps=1)


def test_rows_and_agreement(rows):
    by = {r["case"]: r for r in rows}
    assert [c for c in by if c.startswith("bare")] == ["bare generate, batch 1", "bare generate, batch 2"]
    for b in (1, 2):
        ours = by[f"embeval act_slots, batch {b}"]
        assert ours["max_abs_diff_vs_bare"] == 0.0  # the same tokens, decoded the same way
        assert 0 < ours["share_of_bare"] and ours["obs_per_s"] > 0
    ep = by["act2answer episodes, num_envs 2"]
    assert ep["episodes"] == 2 and 2 <= ep["steps"] <= 16 and ep["episodes_per_s"] > 0
    assert by["policy node batch 1, dynamic cache"]["ms_per_action"] > 0
    static = by["policy node batch 1, static cache"]
    assert static["same_action"] is True and static["warmup_s"] > 0
    assert all(r["device"] == "cpu" and r["model"].startswith("tiny") for r in rows)


def test_model_is_openvla_shaped():
    """The 7B config has the published shape: CLIP ViT-L/14 at 224 px and Llama-2-7B (checked without building it)."""
    vis, txt = G.SIZES["7b"]
    assert (vis["hidden_size"], vis["num_hidden_layers"], vis["patch_size"], vis["image_size"]) == (1024, 24, 14, 224)
    assert (txt["hidden_size"], txt["num_hidden_layers"], txt["intermediate_size"], txt["vocab_size"]) == (4096, 32, 11008, 32064)
    # the parameters counted by hand: Llama-2-7B with OpenVLA's padded vocabulary, ViT-L/14 (all 24 layers are
    # kept; the features come from layer -2), the two-layer projector: 7.06 B, the figure
    emb = 2 * 32064 * 4096
    layer = 4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096
    llama = emb + 32 * layer + 4096
    vit_layer = 4 * (1024 * 1024 + 1024) + 2 * 1024 * 4096 + 4096 + 1024 + 4 * 1024
    vit = 24 * vit_layer + 3 * 14 * 14 * 1024 + 257 * 1024 + 1024 + 4 * 1024
    proj = 1024 * 4096 + 4096 + 4096 * 4096 + 4096
    assert round((llama + vit + proj) / 1e9, 2) == 7.06
    # ... and by transformers on the meta device (no memory): the same number
    _, model = G.build_openvla_shaped("7b", "meta", "bfloat16")
    assert sum(p.numel() for p in model.parameters()) == llama + vit + proj


def test_7b_without_cuda_is_refused(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the 7B run is allowed")
    with pytest.raises(SystemExit, match="--size 7b needs CUDA"):
        G.main(["--size", "7b", "--device", "cpu"])
    with pytest.raises(SystemExit):
        G.main(["--size", "tiny", "--batch", "0"])
    assert "--batch takes 1..256" in capsys.readouterr().err


def test_random_frames_where_pybullet_is_missing(monkeypatch):
    """A GPU image without pybullet measures on random frames of the cell's camera shape and says so."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pybullet" else real(name, *a))
    obs, source = G._observations(3)
    assert source == "random" and len(obs) == 3 and obs[0].images["third_person"].shape == (96, 128, 3)
    with pytest.raises(SystemExit):
        G.main(["--size", "tiny", "--device", "cpu", "--episodes", "2"])


def test_families_check_on_the_cpu():
    """bench/gpu_families.py: a family's batched answers equal batch 1's; an unknown family is a row, not a stop."""
    from bench import gpu_families as F

    rows = F.run("cpu", "float32", batch=2, only=["paligemma", "no_such_family"])
    ok, bad = rows
    assert ok["family"] == "paligemma" and ok["ids_equal_batch1"] and ok["max_logit_diff"] < 1e-4, ok
    assert ok["items_per_s_batch2"] > 0 and ok["items_per_s_batch1"] > 0
    assert bad["family"] == "no_such_family" and bad["error"].startswith("KeyError")
