"""Interactive widgets for the chapters. The logic lives here (and is tested in plain pytest);
the notebooks only display them."""

from .attention import (
    AttentionExplorer,
    apply_temperature,
    bert_attention,
    bert_attention_explorer,
    transformer_attention,
)
from .masking import MaskingDraw, MaskingWidget, TokenRow
from .parameters import ParameterCounter, SizeReport, plot_breakdown, size_config
from .permutation import (
    PAPER_ORDER,
    FactorisedProbabilities,
    PermutationView,
    PermutationWidget,
    factorised_probabilities,
    permutation_view,
    permutation_widget,
    plot_permutation_masks,
)
from .temperature import SoftenedView, TemperatureWidget, dark_knowledge, plot_softened, softened_view

__all__ = [
    "AttentionExplorer",
    "apply_temperature",
    "transformer_attention",
    "MaskingDraw",
    "MaskingWidget",
    "TokenRow",
    "bert_attention",
    "bert_attention_explorer",
    "ParameterCounter",
    "SizeReport",
    "plot_breakdown",
    "size_config",
    "PAPER_ORDER",
    "FactorisedProbabilities",
    "PermutationView",
    "PermutationWidget",
    "factorised_probabilities",
    "permutation_view",
    "permutation_widget",
    "plot_permutation_masks",
    "SoftenedView",
    "TemperatureWidget",
    "dark_knowledge",
    "plot_softened",
    "softened_view",
]
