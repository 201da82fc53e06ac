"""The distortion engine as it was before the speed work (commit 06200fc), frozen as the
reference: tests/core/distortion/test_distortion_speed_equivalence.py checks that every type of
:mod:`embeval.distortion` gives the same output (bit-exact) as ``distortion_v0.distort``."""
from distortion_v0.registry import DISTORTIONS, distort  # noqa: F401
from distortion_v0 import blur, luminance, chrominance, noise, compression, spatial, other  # noqa: E402,F401  (fill the registry)
