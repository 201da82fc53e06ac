"""Layerwise probing of Act2Answer items: hidden states -> linear probes -> retention.

    from embeval_analysis.probing import collect_features, probe_layers, retention, plot_layer_accuracy
"""
from embeval_analysis.probing.features import Features, collect_features
from embeval_analysis.probing.probes import LayerProbe, ProbeReport, chance_normalized_retention, probe_layers, retention
from embeval_analysis.probing.plot import plot_layer_accuracy

__all__ = ["Features", "collect_features", "LayerProbe", "ProbeReport", "probe_layers", "retention",
           "chance_normalized_retention", "plot_layer_accuracy"]
