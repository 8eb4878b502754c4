r"""ELMo: Embeddings from Language Models (Peters et al., 2018), as built by allennlp.

A static embedding gives "jam" one vector in "a traffic jam" and in "apple jam". ELMo
instead reads the whole sentence with a bidirectional language model (biLM) and gives each
token a vector that depends on its context.

**Token vectors from characters.** Every word is spelled as at most 50 byte-level character
ids (see :func:`course_lib.data.chars.words_to_char_ids`). A character CNN embeds the
characters, convolves them with filters of several widths, keeps the maximum of each filter
over the word, applies a ReLU, then highway layers and a linear projection:

.. math::

    y = g \odot x + (1 - g) \odot \mathrm{relu}(A x + a), \qquad g = \sigma(B x + b),

with the carry bias :math:`b` initialised to 1, so each highway layer starts close to the
identity. The result :math:`x_k` (width ``projection_dim``) is the context-free vector of
token :math:`k`.

**Two language models.** A forward LSTM stack reads left to right and models
:math:`p(t_1, \dots, t_N) = \prod_k p(t_k \mid t_1, \dots, t_{k-1})`; a *separate* backward
stack reads right to left and models :math:`\prod_k p(t_k \mid t_{k+1}, \dots, t_N)`. Each
layer is an LSTM whose output is projected back to ``projection_dim`` (LSTMP), and layer 2
adds a residual connection from layer 1. Both directions share the token CNN and the
softmax, and training maximises

.. math::

    \sum_{k=1}^{N} \log p(t_k \mid t_{<k}; \Theta_x, \overrightarrow{\Theta}_{LSTM}, \Theta_s)
    + \log p(t_k \mid t_{>k}; \Theta_x, \overleftarrow{\Theta}_{LSTM}, \Theta_s).

The forward state at position :math:`k` predicts token :math:`k+1`; the backward state at
:math:`k` predicts token :math:`k-1`. Neither stack ever reads the other, which is exactly
why the model is only "shallowly" bidirectional: no layer conditions on both sides at once.

**Seeing itself.** If layer 2 of each direction read *both* directions' layer-1 outputs (as
a stacked ``nn.LSTM(bidirectional=True)`` does), the forward state at :math:`k` would see
token :math:`k+1` through the backward stream and could copy the answer. The flag
``ElmoConfig.naive_bidirectional`` builds that broken model for the demonstration
(:func:`course_lib.recipes.elmo.compare_naive_bidirectional`): its training loss falls far below the honest
model's, and even below what any honest LM can reach, while its predictions are useless once
the future is really hidden (:meth:`ElmoLanguageModel.prefix_forward_loss`).

**Task-specific mixing.** For a sentence, the biLM provides :math:`L + 1` layers
:math:`h_{k,0} = [x_k; x_k]` and :math:`h_{k,j} = [\overrightarrow{h}_{k,j};
\overleftarrow{h}_{k,j}]`. A downstream task learns its own combination (the scalar mix)

.. math::

    \mathrm{ELMo}_k^{task} = \gamma^{task} \sum_{j=0}^{L} s_j^{task} h_{k,j},
    \qquad s^{task} = \mathrm{softmax}(w^{task}),

with :math:`w` initialised to 0 and :math:`\gamma` to 1; optionally every layer is first
normalised by its mean and variance over the non-masked elements of the whole layer tensor.
This is feature-based transfer: the biLM is frozen and its mixed vectors are fed to a task
model (:class:`Elmo`), unlike BERT, whose whole network is fine-tuned.

Paper / allennlp vs ours:

======================================  =====================================================
paper / allennlp                        this module
======================================  =====================================================
sampled softmax over the 1B Word        full softmax over a small word vocabulary
Benchmark vocabulary (~800k words)
sum of both directions' log-likelihoods the mean of the two directions' mean cross-entropies
                                        (same optimum; reads as nats per token)
cell and projection clipping at 3       omitted: ``torch.nn.LSTM`` runs the recurrence in
                                        C++ / cuDNN and cannot clip inside it (no per-step
                                        Python loop); gradient clipping in ``fit`` instead
one bias vector per LSTM gate           ``nn.LSTM`` has two (``b_ih + b_hh``); ``b_hh`` is
                                        held at zero and frozen, so the trainable parameters
                                        match allennlp exactly
forget-gate bias initialised to 1       same
dropout 0.1 in biLM training            ``ElmoConfig.dropout`` on every LSTM input and on
                                        the softmax input
sentences wrapped in ``<S>`` ``</S>``   ``words_to_char_ids(..., add_sentence_boundaries=
                                        True)``; the markers stay in the output
======================================  =====================================================

Shapes are batch-first: character ids ``[batch, seq, max_chars_per_token]``, masks
``[batch, seq]`` (bool, True = real token; real tokens first, padding after), layer
representations ``[n_layers + 1, batch, seq, 2 * projection_dim]``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data.chars import (
    MAX_CHARS_PER_TOKEN,
    N_CHARACTERS,
)
from ..nn.checks import check_id_ranges

__all__ = [
    "ElmoConfig",
    "Highway",
    "CharCNN",
    "BiLM",
    "BiLMStates",
    "normalise_layers",
    "ScalarMix",
    "ElmoLanguageModel",
    "ElmoLMLoss",
    "Elmo",
]

# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------

_ALLENNLP_FILTERS = ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024))  # 2048 filters

_ACTIVATIONS = {"relu": F.relu, "tanh": torch.tanh}


@dataclass
class ElmoConfig:
    """Sizes of an ELMo biLM. Defaults are a small model that trains on a CPU in minutes.

    ``ElmoConfig.original()`` and ``.small()`` are two of allennlp's released sizes.
    """

    n_characters: int = N_CHARACTERS  # 256 bytes + 5 specials + padding id 0
    max_chars_per_token: int = MAX_CHARS_PER_TOKEN  # characters per word (longer words are truncated)
    char_embed_dim: int = 16  # width of a character embedding
    filters: tuple[tuple[int, int], ...] = (
        (1, 32),
        (2, 32),
        (3, 64),
        (4, 128),
        (5, 128),
    )  # (width, count); 384 in all
    n_highway: int = 1  # highway layers after the CNN
    activation: str = "relu"  # after max-pooling each filter ("relu" in allennlp; "tanh" also possible)
    projection_dim: int = 128  # token vector width = every LSTM's projected output width
    lstm_cell_dim: int = 512  # LSTM memory cells (projected down to projection_dim)
    n_layers: int = 2  # LSTM layers per direction
    residual: bool = True  # add layer l-1's output to layer l's (l >= 2)
    dropout: float = 0.1  # on every LSTM input and on the softmax input
    vocab_size: int = 8000  # words in the LM softmax (shared by both directions)
    forget_bias: float = 1.0  # initial forget-gate bias
    naive_bidirectional: bool = False  # layer l >= 2 reads BOTH directions: leaks the answer (demo only)

    def __post_init__(self):
        self.filters = tuple((int(w), int(n)) for w, n in self.filters)
        if self.n_characters < 262:
            raise ValueError(
                f"n_characters must be at least 262 (the character-id convention), got {self.n_characters}"
            )
        if not self.filters:
            raise ValueError("filters must list at least one (width, count) pair")
        for w, n in self.filters:
            if w < 1 or n < 1:
                raise ValueError(f"every filter needs width >= 1 and count >= 1, got ({w}, {n})")
        widest = max(w for w, _ in self.filters)
        if self.max_chars_per_token < max(3, widest):
            raise ValueError(
                f"max_chars_per_token={self.max_chars_per_token} must be at least 3 and at least the widest "
                f"filter ({widest})"
            )
        if self.activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {self.activation!r}")
        if self.projection_dim > self.lstm_cell_dim:
            raise ValueError(
                f"projection_dim={self.projection_dim} cannot exceed lstm_cell_dim={self.lstm_cell_dim} (an "
                "LSTMP projects down)"
            )
        for name in ("char_embed_dim", "projection_dim", "lstm_cell_dim", "n_layers", "vocab_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.n_highway < 0:
            raise ValueError(f"n_highway must be >= 0, got {self.n_highway}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def n_filters(self) -> int:
        return sum(n for _, n in self.filters)

    @property
    def output_dim(self) -> int:
        """Width of every layer representation: ``2 * projection_dim``."""
        return 2 * self.projection_dim

    @classmethod
    def original(cls, **overrides) -> ElmoConfig:
        """allennlp's original ELMo: 2 highway layers, 4096 cells projected to 512 (93.6M without softmax)."""
        return cls(
            **{
                **dict(filters=_ALLENNLP_FILTERS, n_highway=2, projection_dim=512, lstm_cell_dim=4096),
                **overrides,
            }
        )

    @classmethod
    def small(cls, **overrides) -> ElmoConfig:
        """allennlp's small ELMo: 1 highway layer, 1024 cells projected to 128 (13.6M without softmax)."""
        return cls(
            **{
                **dict(filters=_ALLENNLP_FILTERS, n_highway=1, projection_dim=128, lstm_cell_dim=1024),
                **overrides,
            }
        )


# ---------------------------------------------------------------------------------------------
# Input checks
# ---------------------------------------------------------------------------------------------


def _lengths_from_mask(mask: Tensor) -> Tensor:
    """Lengths of right-padded sequences; ValueError if a mask has a gap (real after padding)."""
    lengths = mask.sum(1)
    positions = torch.arange(mask.shape[1], device=mask.device)
    if not torch.equal(mask, positions[None, :] < lengths[:, None]):
        raise ValueError(
            "mask must be right-padded: real tokens first, then padding (no padding token between real ones)"
        )
    return lengths


def _check_inputs(char_ids: Tensor, mask: Tensor | None, config: ElmoConfig) -> tuple[Tensor, Tensor, Tensor]:
    """Validate ``char_ids`` and ``mask``; return ``(char_ids as int64, mask as bool, lengths)``."""
    if not isinstance(char_ids, Tensor) or char_ids.dtype not in (torch.int64, torch.int32, torch.int16):
        raise ValueError("char_ids must be an integer tensor (see words_to_char_ids)")
    if char_ids.dim() != 3:
        raise ValueError(
            f"char_ids must be [batch, seq, max_chars_per_token], got shape {tuple(char_ids.shape)}"
        )
    batch, seq, chars = char_ids.shape
    if batch == 0 or seq == 0:
        raise ValueError(
            f"empty input: char_ids has shape {tuple(char_ids.shape)}; need at least one sentence of one "
            "token"
        )
    if chars != config.max_chars_per_token:
        raise ValueError(
            f"char_ids has {chars} characters per token, the model expects "
            f"max_chars_per_token={config.max_chars_per_token}"
        )
    check_id_ranges(("char_ids", char_ids, "n_characters", config.n_characters))
    if mask is None:
        mask = (char_ids > 0).any(-1)
    else:
        if mask.shape != (batch, seq):
            raise ValueError(f"mask must have shape {(batch, seq)} (batch, seq), got {tuple(mask.shape)}")
        mask = mask.to(device=char_ids.device, dtype=torch.bool)
    lengths = _lengths_from_mask(mask)
    return char_ids.long(), mask, lengths


# ---------------------------------------------------------------------------------------------
# Character CNN
# ---------------------------------------------------------------------------------------------


class Highway(nn.Module):
    r"""Highway layers: :math:`y = g \odot x + (1 - g) \odot f(A x + a)`, :math:`g = \sigma(B x + b)`.

    One ``Linear(dim, 2 * dim)`` per layer computes :math:`[A x + a; B x + b]`; the carry
    bias :math:`b` starts at 1 (allennlp), so the gate initially passes most of :math:`x`.
    """

    def __init__(self, dim: int, *, n_layers: int = 1, activation: str = "relu", carry_bias: float = 1.0):
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}")
        self.dim = dim
        self.activation = _ACTIVATIONS[activation]
        self.layers = nn.ModuleList(nn.Linear(dim, 2 * dim) for _ in range(n_layers))
        with torch.no_grad():
            for layer in self.layers:
                layer.bias[dim:].fill_(carry_bias)

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            transform, gate = layer(x).chunk(2, dim=-1)
            g = torch.sigmoid(gate)
            x = g * x + (1 - g) * self.activation(transform)
        return x


class CharCNN(nn.Module):
    """Word vectors from characters: embed, convolve, max over the word, activation, highway, project.

    ``forward(char_ids [batch, seq, chars], mask [batch, seq]) -> [batch, seq, projection_dim]``;
    padding tokens get the zero vector and cost no computation, and a word repeated in the
    batch is computed once.
    """

    def __init__(self, config: ElmoConfig):
        super().__init__()
        c = config
        self.config = c
        self.char_embedding = nn.Embedding(c.n_characters, c.char_embed_dim, padding_idx=0)
        self.convs = nn.ModuleList(nn.Conv1d(c.char_embed_dim, n, kernel_size=w) for w, n in c.filters)
        self.activation = _ACTIVATIONS[c.activation]
        self.highway = Highway(c.n_filters, n_layers=c.n_highway, activation="relu")
        self.projection = nn.Linear(c.n_filters, c.projection_dim)

    def embed_words(self, chars: Tensor) -> Tensor:
        """``[n_words, chars] -> [n_words, projection_dim]`` (no masking)."""
        e = self.char_embedding(chars).transpose(1, 2)  # [n, char_embed_dim, chars]
        pooled = [conv(e).max(dim=-1).values for conv in self.convs]  # max over character positions
        h = self.activation(torch.cat(pooled, dim=-1))  # [n, n_filters]
        return self.projection(self.highway(h))

    def forward(self, char_ids: Tensor, mask: Tensor) -> Tensor:
        batch, seq, _ = char_ids.shape
        # Only real tokens, and each distinct word once (text repeats "the", "of", ...).
        unique, inverse = torch.unique(char_ids[mask], dim=0, return_inverse=True)
        words = self.embed_words(unique)[inverse]
        out = words.new_zeros(batch, seq, words.shape[-1])
        return out.masked_scatter(mask.unsqueeze(-1), words)


# ---------------------------------------------------------------------------------------------
# The biLM
# ---------------------------------------------------------------------------------------------


def _reverse_within_length(x: Tensor, lengths: Tensor) -> Tensor:
    """Reverse each sequence of ``x [batch, seq, ...]`` within its own length; padding stays at the end.

    Position ``t < len`` goes to ``len - 1 - t``. The map is its own inverse.
    """
    seq = x.shape[1]
    positions = torch.arange(seq, device=x.device).unsqueeze(0)  # [1, seq]
    source = lengths.unsqueeze(1) - 1 - positions
    source = torch.where(source >= 0, source, positions)  # padding maps to itself
    index = source.view(*source.shape, *([1] * (x.dim() - 2))).expand_as(x)
    return x.gather(1, index)


class BiLMStates(NamedTuple):
    """Everything the biLM computes for a batch (padding positions are zero)."""

    token: Tensor  # [batch, seq, projection_dim]: the char-CNN token vectors x_k
    forward: tuple[Tensor, ...]  # n_layers tensors [batch, seq, projection_dim], left-to-right states
    backward: tuple[Tensor, ...]  # n_layers tensors [batch, seq, projection_dim], right-to-left states
    mask: Tensor  # [batch, seq] bool, True = real token
    lengths: Tensor  # [batch] number of real tokens

    def layers(self) -> Tensor:
        """``[n_layers + 1, batch, seq, 2 * projection_dim]``: ``[x; x]``, then ``[fwd; bwd]`` per layer."""
        first = torch.cat([self.token, self.token], dim=-1)
        rest = [torch.cat([f, b], dim=-1) for f, b in zip(self.forward, self.backward)]
        rest = [r.to(first.dtype) for r in rest]
        return torch.stack([first, *rest])


class BiLM(nn.Module):
    r"""Two separate stacks of projected LSTMs: one reads left to right, the other right to left.

    Layer :math:`l \ge 2` adds a residual connection from layer :math:`l-1` of the same
    direction. The backward stack reads each sentence reversed *within its own length*, so
    it starts at the sentence's last real token, never at padding; padding comes after the
    real tokens in both directions, so it can never reach a real position.

    With ``config.naive_bidirectional`` layer :math:`l \ge 2` of both directions reads the
    concatenation of both directions' layer :math:`l-1` outputs: the forward state at
    :math:`k` then sees token :math:`k+1` (through the backward stream) — the leak.
    """

    def __init__(self, config: ElmoConfig):
        super().__init__()
        c = config
        self.config = c
        proj = c.projection_dim if c.projection_dim < c.lstm_cell_dim else 0  # nn.LSTM needs proj < cells

        def lstm(layer: int) -> nn.LSTM:
            width = 2 * c.projection_dim if (c.naive_bidirectional and layer > 0) else c.projection_dim
            cell = nn.LSTM(width, c.lstm_cell_dim, batch_first=True, proj_size=proj)
            with torch.no_grad():
                cell.bias_ih_l0.zero_()
                cell.bias_ih_l0[c.lstm_cell_dim : 2 * c.lstm_cell_dim].fill_(
                    c.forget_bias
                )  # gates i, f, g, o
                cell.bias_hh_l0.zero_()
            cell.bias_hh_l0.requires_grad_(False)  # redundant with bias_ih: one bias per gate, as in allennlp
            return cell

        self.forward_layers = nn.ModuleList(lstm(i) for i in range(c.n_layers))
        self.backward_layers = nn.ModuleList(lstm(i) for i in range(c.n_layers))
        self.dropout = nn.Dropout(c.dropout)

    def _run(self, cell: nn.LSTM, x: Tensor) -> Tensor:
        with warnings.catch_warnings():
            # On CPU, nn.LSTM with proj_size runs PyTorch's own kernel instead of oneDNN and warns
            # once per process; that is about speed, not correctness.
            warnings.filterwarnings("ignore", message="LSTM with projections is not supported with oneDNN")
            out, _ = cell(self.dropout(x))
        return out

    def forward(
        self, x: Tensor, mask: Tensor, lengths: Tensor
    ) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...]]:
        """``x [batch, seq, projection_dim]`` -> (forward states, backward states), one per layer."""
        keep = mask.unsqueeze(-1)
        fwd_in, bwd_in = x, x
        forwards, backwards = [], []
        for layer, (f_cell, b_cell) in enumerate(zip(self.forward_layers, self.backward_layers)):
            if self.config.naive_bidirectional and layer > 0:
                both = torch.cat([fwd_in, bwd_in], dim=-1)
                f_src, b_src = both, both
            else:
                f_src, b_src = fwd_in, bwd_in
            f = self._run(f_cell, f_src)
            b = _reverse_within_length(self._run(b_cell, _reverse_within_length(b_src, lengths)), lengths)
            if self.config.residual and layer > 0:
                f, b = f + fwd_in, b + bwd_in
            f, b = f * keep, b * keep
            forwards.append(f)
            backwards.append(b)
            fwd_in, bwd_in = f, b
        return tuple(forwards), tuple(backwards)


# ---------------------------------------------------------------------------------------------
# Scalar mix
# ---------------------------------------------------------------------------------------------


def normalise_layers(layers: Tensor, mask: Tensor | None = None, *, eps: float = 1e-12) -> Tensor:
    r"""Each layer scaled as a whole: :math:`(h_j - \mu_j) / \sqrt{\sigma_j^2 + \epsilon}`.

    ``layers``: ``[n_layers, *positions, dim]`` (e.g. ``[layers, batch, seq, dim]`` or
    ``[layers, n_words, dim]``); the mean :math:`\mu_j` and population variance
    :math:`\sigma_j^2` of layer ``j`` run over all its elements (every position and feature
    together, not per token), or, with a boolean ``mask`` of shape ``positions``, over the
    elements of the real positions only (padding does not enter the statistics; a mask with no
    real position gives mean and variance 0). ScalarMix's ``do_layer_norm``; chapter 1
    normalises frozen layer vectors with it before probing them.
    """
    dims = tuple(range(1, layers.dim()))
    if mask is None:
        mean = layers.mean(dim=dims, keepdim=True)
        var = layers.var(dim=dims, keepdim=True, unbiased=False)
    else:
        if mask.shape != layers.shape[1:-1]:
            raise ValueError(f"mask must have shape {tuple(layers.shape[1:-1])}, got {tuple(mask.shape)}")
        m = mask.to(device=layers.device, dtype=layers.dtype)[None, ..., None]  # [1, *positions, 1]
        n = (m.sum() * layers.shape[-1]).clamp_min(1.0)
        mean = (layers * m).sum(dim=dims, keepdim=True) / n
        var = (((layers - mean) * m) ** 2).sum(dim=dims, keepdim=True) / n
    return (layers - mean) / torch.sqrt(var + eps)


class ScalarMix(nn.Module):
    r""":math:`\gamma \sum_j \mathrm{softmax}(w)_j \, h_j`, with :math:`w` initialised to 0 and
    :math:`\gamma` to 1.

    With ``do_layer_norm`` each layer tensor :math:`h_j` is first normalised as a whole
    (:func:`normalise_layers`): :math:`(h_j - \mu_j) / \sqrt{\sigma_j^2 + \epsilon}`, where the
    mean and variance run over all non-masked elements of the layer (every real token and every
    feature together), not per token. The statistics are computed in float32.
    """

    def __init__(
        self,
        mixture_size: int,
        *,
        do_layer_norm: bool = False,
        initial_scalar_parameters: Sequence[float] | None = None,
        trainable: bool = True,
        eps: float = 1e-12,
    ):
        super().__init__()
        if mixture_size < 1:
            raise ValueError(f"mixture_size must be positive, got {mixture_size}")
        init = [0.0] * mixture_size if initial_scalar_parameters is None else list(initial_scalar_parameters)
        if len(init) != mixture_size:
            raise ValueError(
                f"initial_scalar_parameters has {len(init)} values for mixture_size={mixture_size}"
            )
        self.mixture_size = mixture_size
        self.do_layer_norm = do_layer_norm
        self.eps = eps
        self.scalar_parameters = nn.Parameter(
            torch.tensor(init, dtype=torch.float32), requires_grad=trainable
        )
        self.gamma = nn.Parameter(torch.ones(()), requires_grad=trainable)

    @property
    def weights(self) -> Tensor:
        """The normalised layer weights :math:`s = \\mathrm{softmax}(w)`."""
        return torch.softmax(self.scalar_parameters, dim=0)

    def forward(self, layers: Tensor | Sequence[Tensor], mask: Tensor | None = None) -> Tensor:
        """``layers``: ``[mixture_size, batch, seq, dim]`` (or a list of ``[batch, seq, dim]``)
        -> ``[batch, seq, dim]``."""
        if not isinstance(layers, Tensor):
            layers = torch.stack(list(layers))
        if layers.shape[0] != self.mixture_size:
            raise ValueError(f"got {layers.shape[0]} layers, this ScalarMix mixes {self.mixture_size}")
        s = self.weights.to(layers.device)
        if self.do_layer_norm:
            if mask is None:
                raise ValueError("do_layer_norm needs the mask: statistics run over non-masked elements only")
            layers = normalise_layers(layers.float(), mask, eps=self.eps)
        mixed = (s.to(layers.dtype).view(-1, 1, 1, 1) * layers).sum(0)
        return self.gamma.to(mixed.dtype) * mixed


# ---------------------------------------------------------------------------------------------
# The language model and the task-facing ELMo
# ---------------------------------------------------------------------------------------------


class ElmoLMLoss(NamedTuple):
    loss: Tensor  # mean of the two directions' losses
    forward: Tensor  # mean cross-entropy of the forward LM (nats per predicted token)
    backward: Tensor  # mean cross-entropy of the backward LM
    n_predictions: int  # predicted tokens per direction


class ElmoLanguageModel(nn.Module):
    """The biLM: character CNN, forward and backward LSTM stacks, one shared word softmax.

    * ``forward(char_ids, mask=None)`` -> ``[n_layers + 1, batch, seq, 2 * projection_dim]``
    * :meth:`lm_loss` -> the two directions' cross-entropies
    * :meth:`lm_logits` -> next/previous-word logits aligned with the words they predict
    """

    config_class = ElmoConfig

    def __init__(self, config: ElmoConfig | None = None):
        super().__init__()
        self.config = config or ElmoConfig()
        self.char_cnn = CharCNN(self.config)
        self.bilm = BiLM(self.config)
        self.dropout = nn.Dropout(self.config.dropout)
        self.softmax = nn.Linear(
            self.config.projection_dim, self.config.vocab_size
        )  # shared by both directions

    @property
    def output_dim(self) -> int:
        return self.config.output_dim

    def num_parameters(self, *, include_softmax: bool = False) -> int:
        """Parameters of the char CNN + biLM (+ softmax if asked), allennlp's convention.

        The frozen, always-zero second LSTM bias ``bias_hh_l0`` is not counted (allennlp's
        LSTM cell has one bias per gate), so the counts match allennlp's exactly.
        """
        total = 0
        for name, p in self.named_parameters():
            if name.endswith("bias_hh_l0") or (name.startswith("softmax.") and not include_softmax):
                continue
            total += p.numel()
        return total

    def encode(self, char_ids: Tensor, mask: Tensor | None = None) -> BiLMStates:
        """Run the char CNN and both LSTM stacks; ``mask`` defaults to "token has any non-zero id"."""
        char_ids, mask, lengths = _check_inputs(char_ids, mask, self.config)
        token = self.char_cnn(char_ids, mask)
        forwards, backwards = self.bilm(token, mask, lengths)
        return BiLMStates(token, forwards, backwards, mask, lengths)

    def forward(self, char_ids: Tensor, mask: Tensor | None = None) -> Tensor:
        """All layer representations ``[n_layers + 1, batch, seq, 2 * projection_dim]`` (padding = 0)."""
        return self.encode(char_ids, mask).layers()

    def lm_logits(
        self, char_ids: Tensor, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Logits aligned with the word they predict: ``(fwd, bwd, fwd_valid, bwd_valid)``.

        ``fwd[:, t]`` is the forward LM's distribution over word ``t``, computed from the
        forward state at ``t - 1`` (so from words ``< t`` only); ``bwd[:, t]`` is the backward
        LM's, from the backward state at ``t + 1`` (words ``> t``). Positions without a
        prediction (the first / last real word, padding) hold zeros and are False in the
        ``*_valid`` masks ``[batch, seq]``.
        """
        st = self.encode(char_ids, mask)
        batch, seq = st.mask.shape
        f_top, b_top = st.forward[-1], st.backward[-1]
        valid = st.mask[:, 1:]  # word t+1 exists (and so does t)
        zeros = f_top.new_zeros(batch, 1, self.config.vocab_size)
        fwd = torch.cat([zeros, self.softmax(self.dropout(f_top[:, :-1]))], dim=1)
        bwd = torch.cat([self.softmax(self.dropout(b_top[:, 1:])), zeros.to(b_top.dtype)], dim=1)
        pad = torch.zeros(batch, 1, dtype=torch.bool, device=st.mask.device)
        fwd_valid = torch.cat([pad, valid], dim=1)
        bwd_valid = torch.cat([valid, pad], dim=1)
        fwd = fwd * fwd_valid.unsqueeze(-1)
        bwd = bwd * bwd_valid.unsqueeze(-1)
        return fwd, bwd, fwd_valid, bwd_valid

    def _check_word_ids(self, word_ids: Tensor, shape: tuple[int, int]) -> None:
        if word_ids.shape != shape:
            raise ValueError(f"word_ids must have shape {shape} (batch, seq), got {tuple(word_ids.shape)}")
        if word_ids.dtype.is_floating_point:
            raise ValueError("word_ids must be an integer tensor")

    def lm_loss(self, char_ids: Tensor, word_ids: Tensor, mask: Tensor | None = None) -> ElmoLMLoss:
        """Cross-entropy of both directions. ``word_ids [batch, seq]`` index the softmax vocabulary.

        The forward state at ``t`` predicts ``word_ids[:, t + 1]``, the backward state at ``t``
        predicts ``word_ids[:, t - 1]``; only pairs of real tokens count. The softmax runs only
        on those states.
        """
        st = self.encode(char_ids, mask)
        self._check_word_ids(word_ids, tuple(st.mask.shape))
        word_ids = word_ids.to(char_ids.device).long()
        valid = st.mask[:, 1:]
        n = int(valid.sum())
        if n == 0:
            raise ValueError("nothing to predict: every sentence in the batch has fewer than 2 tokens")
        check_id_ranges(("word_ids", word_ids[st.mask], "vocab_size", self.config.vocab_size))
        f_states = st.forward[-1][:, :-1][valid]  # [n, projection_dim], states at t predicting t + 1
        b_states = st.backward[-1][:, 1:][valid]  # states at t + 1 predicting t
        f_targets = word_ids[:, 1:][valid]
        b_targets = word_ids[:, :-1][valid]
        f_loss = F.cross_entropy(self.softmax(self.dropout(f_states)).float(), f_targets)
        b_loss = F.cross_entropy(self.softmax(self.dropout(b_states)).float(), b_targets)
        return ElmoLMLoss((f_loss + b_loss) / 2, f_loss, b_loss, n)

    @torch.no_grad()
    def prefix_forward_loss(self, char_ids: Tensor, word_ids: Tensor, mask: Tensor | None = None) -> Tensor:
        """Forward-LM loss when each word is predicted from its prefix alone (everything after it deleted).

        For an honest forward LM this equals :meth:`lm_loss`'s forward term (in eval mode): it
        never looked at the future anyway. A model that peeks at the next word (the naive
        variant) is found out here. Runs ``seq`` truncated copies of the batch at once.
        """
        char_ids, mask, _ = _check_inputs(char_ids, mask, self.config)
        self._check_word_ids(word_ids, tuple(mask.shape))
        word_ids = word_ids.to(char_ids.device).long()
        batch, seq, chars = char_ids.shape
        if seq < 2 or not bool(mask[:, 1:].any()):
            raise ValueError("nothing to predict: every sentence in the batch has fewer than 2 tokens")
        pos = torch.arange(seq, device=char_ids.device)
        keep = pos[None, :] <= pos[:, None]  # [prefix end e, position t]: t <= e
        ids = (char_ids.unsqueeze(0) * keep[:, None, :, None]).reshape(seq * batch, seq, chars)
        m = (mask.unsqueeze(0) & keep[:, None, :]).reshape(seq * batch, seq)
        top = self.encode(ids, m).forward[-1].view(seq, batch, seq, -1)
        states = top[pos, :, pos]  # [e, batch, dim]: the state at the end of prefix e
        states = states[:-1].transpose(0, 1)  # [batch, seq - 1, dim]: predicts word e + 1
        valid = mask[:, 1:]
        logits = self.softmax(states[valid]).float()
        return F.cross_entropy(logits, word_ids[:, 1:][valid])


class Elmo(nn.Module):
    """Task-facing ELMo: a (frozen) biLM and ``n_outputs`` scalar mixes of its layers.

    ``forward(char_ids, mask=None) -> list of n_outputs tensors [batch, seq, 2 * projection_dim]``
    (allennlp's ``num_output_representations``: e.g. one for a task model's input, one for
    its output layer). With ``freeze=True`` (feature-based transfer, the paper's recipe) the
    biLM's weights are not trained, it runs without gradients and stays in eval mode; only
    the scalar mixes (and the task model) learn. Dropout ``dropout`` is applied to each mix.
    """

    def __init__(
        self,
        lm: ElmoLanguageModel,
        *,
        n_outputs: int = 1,
        do_layer_norm: bool = False,
        dropout: float = 0.5,
        freeze: bool = True,
    ):
        super().__init__()
        if n_outputs < 1:
            raise ValueError(f"n_outputs must be positive, got {n_outputs}")
        self.lm = lm
        self.freeze = freeze
        if freeze:
            for p in lm.parameters():
                p.requires_grad_(False)
            lm.eval()
        self.mixes = nn.ModuleList(
            ScalarMix(lm.config.n_layers + 1, do_layer_norm=do_layer_norm) for _ in range(n_outputs)
        )
        self.dropout = nn.Dropout(dropout)

    @property
    def output_dim(self) -> int:
        return self.lm.output_dim

    def train(self, mode: bool = True) -> Elmo:
        super().train(mode)
        if self.freeze:
            self.lm.eval()  # a frozen biLM keeps its dropout off
        return self

    def layers(self, char_ids: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """The biLM's ``[n_layers + 1, batch, seq, dim]`` representations and the mask."""
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.freeze):
            st = self.lm.encode(char_ids, mask)
            return st.layers(), st.mask

    def forward(self, char_ids: Tensor, mask: Tensor | None = None) -> list[Tensor]:
        layers, mask = self.layers(char_ids, mask)
        keep = mask.unsqueeze(-1)
        return [self.dropout(mix(layers, mask)) * keep for mix in self.mixes]
