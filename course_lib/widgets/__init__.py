"""Interactive widgets for the chapters. The logic lives here (and is tested in plain pytest);
the notebooks only display them."""

from .attention import AttentionExplorer, apply_temperature, transformer_attention

__all__ = ["AttentionExplorer", "apply_temperature", "transformer_attention"]
