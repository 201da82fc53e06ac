"""table_texture: the table top replaced by a procedural pattern (wood grain, checker, speckle or fabric, seeded)
of the level's RMS contrast around the table's own mean colour (its colour stays, its texture changes)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from embeval.sim.perturb import _texture
from embeval.sim.perturb.axis import Axis


def table_mean_rgb(scene) -> np.ndarray:
    """The table top's mean colour (0..1): its texture's mean times its colour, or its colour."""
    rgb = np.asarray(scene.table_color[:3], float)
    if scene.table_texture:
        from embeval.image_io import read_image
        from embeval.sim.textures import resolve

        rgb = rgb * read_image(resolve(scene.table_texture), "table texture").reshape(-1, 3).mean(axis=0) / 255.0
    return rgb


def sample(rng, level, scene, task):
    return {**_texture.sample(rng, level), "mean_rgb": table_mean_rgb(scene).round(4).tolist()}


def apply(scene, task, params):
    return replace(scene, table_texture=_texture.file_for(params["mean_rgb"], params), table_color=(1.0, 1.0, 1.0, 1.0)), task


AXIS = Axis("table_texture", (_texture.CONTRAST,), sample, scene=apply, changes="image",
            description="table top retextured (pattern seeded) at the level's RMS contrast, same mean colour",
            direction="pixel spread over the table top",
            note=lambda p: f"{p['pattern']} {p['contrast_pct']:.1f} %")
