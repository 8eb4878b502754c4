r"""Parameter counter: where a BERT's or an ALBERT's parameters are, as the sizes change.

Pick a model (BERT or ALBERT), the vocabulary :math:`V`, the embedding width :math:`E`
(ALBERT only: BERT's is :math:`H`), the hidden size :math:`H`, the layers :math:`L`, the
heads, the feed-forward size :math:`I` and ALBERT's sharing mode; the widget shows the
count of each part (embeddings, attention, feed-forward, pooler, heads) by the formulas of
:mod:`course_lib.models.sizes`,

.. math::

    N = \underbrace{(V + P + T)E + 2E\,[+EH + H]}_{\text{embeddings}}
      + n_{att}(4H^2 + 6H) + n_{ffn}(2HI + I + 3H) + \underbrace{H^2 + H}_{\text{pooler}},

as a table and as stacked bars. For an ALBERT, a second bar is the BERT with the same
:math:`V, H, L, I`: the gap is what factorising the embeddings and sharing the layers save.
Sizes that cannot make a model (a hidden size the heads do not divide, a zero) give a
message, not a crash.

The logic (:func:`size_config`, :class:`ParameterCounter`, :class:`SizeReport`,
:func:`plot_breakdown`) runs without a notebook; ``ParameterCounter.widget()`` counts with
the same formulas in the page (``js/parameters.js``, checked against this module in a
browser test), so it responds in the HTML book without a kernel.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import dataclass

from ..models.albert import SHARING_MODES, AlbertConfig
from ..models.bert import BertConfig
from ..models.sizes import HEADS, PARTS, millions, parameter_breakdown, sublayer_counts

__all__ = ["PRESETS", "MODELS", "size_config", "SizeReport", "ParameterCounter", "plot_breakdown"]

MODELS = ("BERT", "ALBERT")

# The published sizes (FFN 4H, heads H / 64); BERT's V = 30522, ALBERT's 30000 with E = 128.
PRESETS: dict[str, dict] = {
    "BERT-base": dict(model="BERT", vocab_size=30522, hidden_size=768, num_hidden_layers=12),
    "BERT-large": dict(model="BERT", vocab_size=30522, hidden_size=1024, num_hidden_layers=24),
    "ALBERT-base": dict(model="ALBERT", vocab_size=30000, hidden_size=768, num_hidden_layers=12),
    "ALBERT-large": dict(model="ALBERT", vocab_size=30000, hidden_size=1024, num_hidden_layers=24),
    "ALBERT-xlarge": dict(model="ALBERT", vocab_size=30000, hidden_size=2048, num_hidden_layers=24),
    "ALBERT-xxlarge": dict(model="ALBERT", vocab_size=30000, hidden_size=4096, num_hidden_layers=12),
}
for _p in PRESETS.values():
    _p.update(
        embedding_size=128 if _p["model"] == "ALBERT" else _p["hidden_size"],
        num_attention_heads=_p["hidden_size"] // 64,
        intermediate_size=4 * _p["hidden_size"],
        sharing="all" if _p["model"] == "ALBERT" else "none",
    )
del _p

# The sizes :func:`size_config` takes, and their defaults: ALBERT-base's (V = 30000, E = 128).
_SIZES = {
    "vocab_size": 30000,
    "embedding_size": 128,
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "num_hidden_groups": 1,
    "inner_group_num": 1,
}
_ALBERT_ONLY = ("embedding_size", "num_hidden_groups", "inner_group_num")  # BERT's embedding width is H


def size_config(model: str = "ALBERT", *, sharing: str = "all", **sizes: int) -> BertConfig:
    """The config the widget's settings describe, or a ``ValueError`` that says what is wrong.

    ``sizes``: any of ``vocab_size``, ``embedding_size``, ``hidden_size``,
    ``num_hidden_layers``, ``num_attention_heads``, ``intermediate_size``,
    ``max_position_embeddings``, ``type_vocab_size``, ``num_hidden_groups`` and
    ``inner_group_num`` (Hugging Face's names); the others keep ALBERT-base's values.
    ``model="BERT"`` gives a :class:`~course_lib.models.bert.BertConfig`: its embedding width
    is ``hidden_size``, so ``embedding_size``, ``sharing`` and the groups are not used.
    ``model="ALBERT"`` gives an :class:`~course_lib.models.albert.AlbertConfig`.
    """
    unknown = sorted(set(sizes) - set(_SIZES))
    if unknown:
        raise TypeError(f"size_config() got unexpected keyword arguments {unknown}; sizes: {list(_SIZES)}")
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {model!r}")
    sizes = {**_SIZES, **sizes}
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive whole number, got {value!r}")
    hidden_size, num_attention_heads = sizes["hidden_size"], sizes["num_attention_heads"]
    if hidden_size % num_attention_heads:
        raise ValueError(
            f"hidden_size={hidden_size} is not divisible by num_attention_heads={num_attention_heads}: "
            "each head works in hidden_size / heads dimensions "
            f"(try {_nearby_heads(hidden_size, num_attention_heads)})"
        )
    if model == "BERT":
        return BertConfig(**{k: v for k, v in sizes.items() if k not in _ALBERT_ONLY})
    if sharing not in SHARING_MODES:
        raise ValueError(f"sharing must be one of {SHARING_MODES}, got {sharing!r}")
    return AlbertConfig(**sizes, sharing=sharing)


def _nearby_heads(hidden_size: int, heads: int) -> str:
    """Head counts near ``heads`` that divide ``hidden_size`` (for the error message)."""
    divisors = [d for d in range(1, hidden_size + 1) if hidden_size % d == 0]
    below = [d for d in divisors if d < heads]
    above = [d for d in divisors if d > heads]
    options = ([below[-1]] if below else []) + ([above[0]] if above else [])
    return " or ".join(f"{d} heads" for d in options)


_PART_LABELS = {
    "embeddings": "embeddings",
    "attention": "attention",
    "ffn": "feed-forward",
    "pooler": "pooler",
    "heads": "heads",
}
_COLOURS = {
    "embeddings": "#4c72b0",
    "attention": "#dd8452",
    "ffn": "#55a868",
    "pooler": "#8172b3",
    "heads": "#937860",
}


@dataclass
class SizeReport:
    """One setting's counts: its config, its breakdown and, for an ALBERT, the BERT with the
    same ``V, H, L, I`` (``reference``) for comparison."""

    name: str  # "BERT" or "ALBERT (sharing all)"
    config: BertConfig
    breakdown: dict[str, int]
    reference: dict[str, int] | None = None  # the same-size BERT's breakdown (ALBERT only)

    @property
    def total(self) -> int:
        return self.breakdown["total"]

    def sublayers(self) -> tuple[int, int]:
        """Distinct attention and feed-forward sub-layers
        (:func:`~course_lib.models.sizes.sublayer_counts`)."""
        return sublayer_counts(self.config)

    def rows(self) -> list[tuple[str, int, float, int | None]]:
        """``(part, count, share of the total, the reference BERT's count or None)`` for each
        part, then the total."""
        out = []
        for part in (*PARTS, "total"):
            n = self.breakdown[part]
            ref = self.reference[part] if self.reference is not None else None
            out.append((part, n, n / self.total if self.total else 0.0, ref))
        return out

    def _label(self, part: str) -> str:
        n_att, n_ffn = self.sublayers()
        L = self.config.num_hidden_layers
        if part == "attention":
            return f"attention ({n_att} distinct for {L} layers)"
        if part == "ffn":
            return f"feed-forward ({n_ffn} distinct for {L} layers)"
        return _PART_LABELS.get(part, part)

    def summary(self) -> str:
        text = f"{self.name}: {self.total:,} parameters ({millions(self.total)}, {millions(self.total, 2)})"
        if self.reference is not None:
            ref = self.reference["total"]
            text += (
                f"; the BERT of the same sizes has {ref:,} ({millions(ref)}): {self.total / ref:.1%} of it"
            )
        return text

    def to_text(self) -> str:
        """A plain-text table (what the widget shows, for printing)."""
        ref_head = f" {'same-size BERT':>15}" if self.reference is not None else ""
        lines = [f"{'part':<40} {'parameters':>13} {'share':>6}{ref_head}"]
        for part, n, share, ref in self.rows():
            ref_col = f" {ref:>15,}" if ref is not None else ""
            lines.append(f"{self._label(part):<40} {n:>13,} {share:>6.1%}{ref_col}")
        lines.append(self.summary())
        return "\n".join(lines)

    def to_html(self) -> str:
        """An HTML table, one row per part (coloured as in :func:`plot_breakdown`), then the total."""
        ref_head = "<th>same-size BERT</th>" if self.reference is not None else ""
        head = f"<tr><th>part</th><th>parameters</th><th>share</th>{ref_head}</tr>"
        body = []
        for part, n, share, ref in self.rows():
            swatch = f"<span style='color:{_COLOURS[part]}'>&#9632;</span> " if part in _COLOURS else "<b>"
            label = html.escape(self._label(part)) + ("" if part in _COLOURS else "</b>")
            ref_col = f"<td style='text-align:right'>{ref:,}</td>" if ref is not None else ""
            body.append(
                f"<tr><td>{swatch}{label}</td><td style='text-align:right'>{n:,}</td>"
                f"<td style='text-align:right'>{share:.1%}</td>{ref_col}</tr>"
            )
        return (
            f"<table style='font-family:monospace;font-size:12px'>{head}{''.join(body)}</table>"
            f"<p>{html.escape(self.summary())}</p>"
        )


def plot_breakdown(breakdowns: Mapping[str, Mapping[str, int]], *, ax=None):
    """Stacked horizontal bars, one per named breakdown, in millions of parameters; returns
    the figure."""
    import matplotlib.pyplot as plt

    if not breakdowns:
        raise ValueError("plot_breakdown needs at least one breakdown")
    names = list(breakdowns)
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 0.7 * len(names) + 1.3))
    for i, name in enumerate(names):
        left = 0.0
        for part in PARTS:
            width = breakdowns[name][part] / 1e6
            ax.barh(i, width, left=left, color=_COLOURS[part], label=_PART_LABELS[part] if i == 0 else None)
            left += width
        ax.text(left, i, f" {millions(breakdowns[name]['total'], 2)}", va="center", fontsize=9)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlabel("parameters (millions)")
    ax.set_xlim(0, max(b["total"] for b in breakdowns.values()) / 1e6 * 1.18 or 1)
    ax.legend(loc="lower right", fontsize=8, frameon=False)
    ax.figure.tight_layout()
    return ax.figure


class ParameterCounter:
    """The sizes of a BERT or an ALBERT, and where their parameters are.

    Args:
        preset: a name in :data:`PRESETS` to start from (default ALBERT-base); ``settings``
            (the keyword arguments of :func:`size_config`) override it.
        pooler: whether the body has its pooler (the published counts include it).
        heads: ``None``, ``"mlm"`` or ``"pretraining"`` (as in
            :func:`~course_lib.models.sizes.parameter_breakdown`).

    ``update(**changes)`` applies new settings and returns the :class:`SizeReport` (also kept in
    ``.last``); bad settings raise a ``ValueError`` and leave the previous ones in place.
    ``widget()`` shows the controls over the table and the bars.
    """

    def __init__(
        self, preset: str = "ALBERT-base", *, pooler: bool = True, heads: str | None = None, **settings
    ):
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; choose one of {list(PRESETS)}")
        self.settings = {**PRESETS[preset], **settings}
        self.pooler = pooler
        self.heads = heads
        self.last: SizeReport | None = None
        self.draws = 0
        self.report()  # check the starting point

    def report(self) -> SizeReport:
        """The counts for the current settings."""
        return self._report(self.settings, self.pooler, self.heads)

    def _report(self, settings: dict, pooler: bool, heads: str | None) -> SizeReport:
        if heads not in HEADS:
            raise ValueError(f"heads must be one of {HEADS}, got {heads!r}")
        config = size_config(**settings)
        breakdown = parameter_breakdown(config, pooler=pooler, heads=heads)
        if isinstance(config, AlbertConfig):
            bert = size_config("BERT", **{k: v for k, v in settings.items() if k != "model"})
            name = f"ALBERT (E={config.embedding_size}, sharing {config.sharing})"
            return SizeReport(name, config, breakdown, parameter_breakdown(bert, pooler=pooler, heads=heads))
        return SizeReport("BERT", config, breakdown)

    def update(self, *, pooler: bool | None = None, heads: str | None = "keep", **changes) -> SizeReport:
        """Change some settings (``size_config``'s names, ``pooler``, ``heads``) and recount.
        On a ``ValueError`` nothing changes."""
        unknown = set(changes) - {"model", "sharing", *_SIZES}
        if unknown:
            raise ValueError(f"unknown settings {sorted(unknown)}")
        settings = {**self.settings, **changes}
        pooler = self.pooler if pooler is None else pooler
        heads = self.heads if heads == "keep" else heads
        report = self._report(settings, pooler, heads)  # raises before anything changes
        self.settings, self.pooler, self.heads = settings, pooler, heads
        self.last = report
        return report

    def use_preset(self, preset: str) -> SizeReport:
        """Switch every size to a published model's."""
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; choose one of {list(PRESETS)}")
        return self.update(**PRESETS[preset])

    def draw(self, report: SizeReport | None = None):
        """The bars of a report (default: the current settings'), next to its same-size BERT."""
        report = report or self.report()
        bars = {report.name: report.breakdown}
        if report.reference is not None:
            bars["BERT, same V, H, L, I"] = report.reference
        self.draws += 1
        return plot_breakdown(bars)

    def front_data(self) -> dict:
        """What the page counts from: the presets, the current settings, and the sizes the
        controls do not change (positions, token types, ALBERT's groups, tied decoder)."""
        config = self.report().config
        return {
            "presets": PRESETS,
            "settings": self.settings,
            "pooler": self.pooler,
            "heads": self.heads,
            "sharing_modes": list(SHARING_MODES),
            "fixed": {
                "max_position_embeddings": config.max_position_embeddings,
                "type_vocab_size": config.type_vocab_size,
                "num_hidden_groups": getattr(config, "num_hidden_groups", 1),
                "inner_group_num": getattr(config, "inner_group_num", 1),
                "tie_word_embeddings": bool(getattr(config, "tie_word_embeddings", True)),
            },
        }

    def widget(self):
        """Preset, model, size and sharing controls over the table and the bars: an anywidget
        that counts in the page with the formulas of :func:`parameter_breakdown` (no kernel)."""
        from .front import live_widget

        return live_widget("parameters", self.front_data())
