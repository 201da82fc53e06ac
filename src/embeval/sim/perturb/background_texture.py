"""background_texture: the back and side walls (the background behind the table) textured with a procedural
pattern (seeded) of the level's RMS contrast around the wall colour."""
from __future__ import annotations

from embeval.sim.perturb import _texture
from embeval.sim.perturb.axis import Axis


def sample(rng, level, scene, task):
    return {**_texture.sample(rng, level), "mean_rgb": [round(float(v), 4) for v in scene.wall_color[:3]]}


def apply(cell, params):
    tex = cell.pb.texture(_texture.file_for(params["mean_rgb"], params))
    for wall in cell.walls:
        cell.p.changeVisualShape(wall, -1, rgbaColor=[1.0, 1.0, 1.0, 1.0], textureUniqueId=tex, physicsClientId=cell.client)


AXIS = Axis("background_texture", (_texture.CONTRAST,), sample, cell=apply, changes="image",
            description="walls behind the table textured (pattern seeded) at the level's RMS contrast, same mean colour",
            direction="pixel spread over the walls",
            note=lambda p: f"{p['pattern']} {p['contrast_pct']:.1f} %")
