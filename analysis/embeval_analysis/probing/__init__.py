"""Layerwise probing of Act2Answer items: hidden states -> linear probes -> retention.

    from embeval_analysis.probing import collect_features, probe_layers, retention, plot_layer_accuracy
"""
from embeval_analysis.probing.features import Features, collect_features
from embeval_analysis.probing.plot import plot_layer_accuracy
from embeval_analysis.probing.probes import (
           LayerProbe,
           ProbeReport,
           chance_normalized_retention,
           probe_layers,
           probe_transfer,
           retention,
)

__all__ = [
           "Features",
           "LayerProbe",
           "ProbeReport",
           "chance_normalized_retention",
           "collect_features",
           "plot_layer_accuracy",
           "probe_layers",
           "probe_transfer",
           "retention",
]
