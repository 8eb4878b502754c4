"""Analysis of trained models: probes, layer vectors (and, as the probing chapters arrive,
minimal pairs and attention-head scores).

This layer sits above the models and the data (it runs models on data); the recipes and the
chapters import it.
"""

from .layers import layer_vectors
from .probes import linear_probe, normalise_layers, train_probe

__all__ = ["layer_vectors", "linear_probe", "normalise_layers", "train_probe"]
