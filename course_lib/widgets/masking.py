r"""The masking widget: watch BERT's masking recipe at work.

**Masking widget.** Type a sentence, set ``mlm_probability`` (the masking rate), redraw. Each
token (besides ``[CLS]`` and ``[SEP]``) is chosen with probability :math:`p`; a chosen token then becomes
``[MASK]`` (80%), a random token (10%) or stays itself (10%), exactly as in pretraining
(:func:`course_lib.objectives.masking.mask_tokens`). The table shows what the model reads and, at every
chosen position, its top-:math:`k` predictions

.. math:: p(x_i = w \mid \tilde x) = \mathrm{softmax}(\mathrm{MLMHead}(h_i))_w .

The logic (``MaskingWidget.draw``) runs without a notebook; ``widget()``
precomputes the draws a reader can reach (every rate on the slider, a few seeds, a few
sentences) and the page's JavaScript (``js/masking.js``) shows them, so the widget responds
in the HTML book without a kernel.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from ..objectives import KEPT, MASKED, RANDOM
from ..objectives.masking import MLM_PROBABILITY
from ..objectives.pretraining import make_masker

__all__ = ["TokenRow", "MaskingDraw", "MaskingWidget"]

_ACTION_NAMES = {0: "", MASKED: "[MASK]", RANDOM: "random", KEPT: "kept"}
_ACTIONS = ["", "[MASK]", "random", "kept"]  # a draw's actions in the page's data: indices into this


@dataclass
class TokenRow:
    """One token of a masking draw."""

    token: str  # the original token
    chosen: bool  # picked for prediction (its label counts in the loss)
    action: str  # "[MASK]", "random", "kept", or "" when not chosen
    shown: str  # what the model reads at this position
    predictions: list[tuple[str, float]] = field(
        default_factory=list
    )  # top-k (token, probability) when chosen

    @property
    def correct(self) -> bool | None:
        """Whether the top prediction is the original token (None when not chosen)."""
        return None if not self.chosen else bool(self.predictions) and self.predictions[0][0] == self.token


@dataclass
class MaskingDraw:
    """The outcome of one draw: a row per token plus the tensors behind it."""

    text: str
    mlm_probability: float
    seed: int
    rows: list[TokenRow]
    input_ids: Tensor  # [seq] the original ids, [CLS] ... [SEP]
    masked_ids: Tensor  # [seq] what the model reads
    actions: Tensor  # [seq] 0 not chosen, MASKED, RANDOM, KEPT

    @property
    def n_chosen(self) -> int:
        return sum(r.chosen for r in self.rows)

    def counts(self) -> dict[str, int]:
        """How many chosen tokens became [MASK], a random token, or were kept."""
        return {name: sum(r.action == name for r in self.rows) for name in ("[MASK]", "random", "kept")}

    def accuracy(self) -> float | None:
        """Share of chosen tokens whose top prediction is right (None when nothing was chosen)."""
        chosen = [r for r in self.rows if r.chosen]
        return sum(bool(r.correct) for r in chosen) / len(chosen) if chosen else None

    def to_text(self) -> str:
        """A plain-text table (what the widget shows, for printing)."""
        lines = [f"{'token':>14} {'chosen':>6} {'became':>7} {'model reads':>12}  top predictions"]
        for r in self.rows:
            preds = ", ".join(f"{t} {p:.2f}" for t, p in r.predictions)
            lines.append(f"{r.token:>14} {'yes' if r.chosen else '':>6} {r.action:>7} {r.shown:>12}  {preds}")
        acc = self.accuracy()
        c = self.counts()
        lines.append(
            f"chosen {self.n_chosen} of {len(self.rows)} tokens: {c['[MASK]']} [MASK], {c['random']} random, "
            f"{c['kept']} kept" + (f"; top-1 right at {acc:.0%} of them" if acc is not None else "")
        )
        return "\n".join(lines)

    def to_html(self) -> str:
        """An HTML table: chosen rows highlighted, right top predictions in green."""
        colours = {"[MASK]": "#dbe9ff", "random": "#ffe3c4", "kept": "#e4f5dc", "": "transparent"}
        head = (
            "<tr><th>token</th><th>chosen</th><th>became</th><th>model reads</th>"
            "<th>top predictions</th></tr>"
        )
        body = []
        for r in self.rows:
            preds = ", ".join(
                (f"<b style='color:#1a7f37'>{html.escape(t)}</b>" if t == r.token else html.escape(t))
                + f" {p:.2f}"
                for t, p in r.predictions
            )
            body.append(
                f"<tr style='background:{colours[r.action]}'><td>{html.escape(r.token)}</td>"
                f"<td>{'yes' if r.chosen else ''}</td>"
                f"<td>{html.escape(r.action)}</td><td><code>{html.escape(r.shown)}</code></td><td>{preds}</td></tr>"
            )
        c = self.counts()
        acc = self.accuracy()
        summary = (
            f"<p>chosen {self.n_chosen} of {len(self.rows)} tokens: {c['[MASK]']} [MASK], {c['random']} "
            "random, "
            f"{c['kept']} kept" + (f"; top-1 right at {acc:.0%} of them" if acc is not None else "") + "</p>"
        )
        return f"<table style='font-family:monospace;font-size:12px'>{head}{''.join(body)}</table>{summary}"


class MaskingWidget:
    """Mask a sentence as BERT's pretraining does and show the model's guesses.

    Args:
        model: a masked-LM model (``BertForPreTraining``, ``BertForMaskedLM``,
            ``RobertaForMaskedLM``) whose vocabulary is ``tokenizer``'s.
        tokenizer: a ``tokenizers.Tokenizer`` with BERT or RoBERTa special tokens.
        text, mlm_probability, seed: the starting sentence, the chance that a token is chosen
            (the masking rate) and the random seed.
        k: predictions shown per chosen token.
        mask_replace_prob, random_replace_prob: the 80/10/10 split.

    The masking is the recipe's (:func:`~course_lib.objectives.pretraining.make_masker`, kept in
    ``.masker``). ``draw()`` masks the current text and returns a :class:`MaskingDraw` (also
    kept in ``.last``); ``redraw()`` moves to the next seed first. ``widget()`` shows a
    sentence menu, an ``mlm_probability`` slider and a "redraw" button over draws precomputed
    with these methods.
    """

    def __init__(
        self,
        model,
        tokenizer,
        *,
        text: str = "The keys to the cabinet are on the table.",
        mlm_probability: float = MLM_PROBABILITY,
        seed: int = 0,
        k: int = 5,
        mask_replace_prob: float = 0.8,
        random_replace_prob: float = 0.1,
        max_len: int | None = None,
    ):
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        self.model = model
        self.tokenizer = tokenizer
        self.masker = make_masker(
            tokenizer,
            mlm_probability=float(mlm_probability),
            mask_replace_prob=mask_replace_prob,
            random_replace_prob=random_replace_prob,
        )
        self.text = text
        self.seed = int(seed)
        self.k = k
        self.max_len = max_len or getattr(getattr(model, "config", None), "max_len", 512)
        self.last: MaskingDraw | None = None
        self.draws = 0

    @property
    def mlm_probability(self) -> float:
        return self.masker.mlm_probability

    def set_text(self, text: str) -> MaskingDraw:
        self.text = text
        return self.draw()

    def set_mlm_probability(self, mlm_probability: float) -> MaskingDraw:
        self.masker = replace(self.masker, mlm_probability=float(mlm_probability))  # checks it
        return self.draw()

    def redraw(self) -> MaskingDraw:
        """A new random draw for the same sentence and ``mlm_probability``."""
        self.seed += 1
        return self.draw()

    @torch.no_grad()
    def draw(self) -> MaskingDraw:
        """Mask the current text with the current ``mlm_probability`` and seed; predict at the
        chosen positions."""
        if not self.text.strip():
            raise ValueError("type a sentence first: the text is empty")
        enc = self.tokenizer.encode(self.text)
        if len(enc.ids) > self.max_len:
            raise ValueError(
                f"the sentence has {len(enc.ids)} tokens; the model reads at most {self.max_len}"
            )
        ids = torch.tensor(enc.ids)
        g = torch.Generator().manual_seed(self.seed)
        masked, _, actions = self.masker(ids[None], generator=g, return_actions=True)
        masked, actions = masked[0], actions[0]
        chosen = actions.nonzero().flatten().tolist()
        predictions: dict[int, list[tuple[str, float]]] = {}
        if chosen:
            device = next(self.model.parameters()).device
            was_training = self.model.training
            self.model.eval()
            out = self.model(masked[None].to(device), attention_mask=torch.ones_like(masked)[None].to(device))
            self.model.train(was_training)
            logits = out.mlm_logits
            probs = torch.softmax(logits[0, chosen].float(), -1).cpu()
            top = probs.topk(min(self.k, probs.size(-1)), dim=-1)
            for pos, vals, idx in zip(chosen, top.values, top.indices):
                predictions[pos] = [(self.tokenizer.id_to_token(int(i)), float(v)) for v, i in zip(vals, idx)]
        rows = []
        for pos, (tok_id, shown_id, act) in enumerate(zip(ids.tolist(), masked.tolist(), actions.tolist())):
            rows.append(
                TokenRow(
                    token=self.tokenizer.id_to_token(tok_id),
                    chosen=act != 0,
                    action=_ACTION_NAMES[act],
                    shown=self.tokenizer.id_to_token(shown_id),
                    predictions=predictions.get(pos, []),
                )
            )
        self.last = MaskingDraw(self.text, self.mlm_probability, self.seed, rows, ids, masked, actions)
        self.draws += 1
        return self.last

    def _draw_at(self, text: str, mlm_probability: float, seed: int) -> MaskingDraw:
        """One draw for a sentence, rate and seed, leaving the widget's own state as it was."""
        saved = (self.text, self.masker, self.seed, self.last, self.draws)
        try:
            self.text, self.seed = text, int(seed)
            self.masker = replace(self.masker, mlm_probability=float(mlm_probability))
            return self.draw()
        finally:
            self.text, self.masker, self.seed, self.last, self.draws = saved

    def _sentence_draws(self, text: str, rates: list[float], n_seeds: int, vocab: dict[str, int]) -> dict:
        """Every draw of one sentence (``rates`` x seeds ``seed .. seed + n_seeds - 1``), with
        tokens as indices into ``vocab`` (which grows)."""

        def ix(token: str) -> int:
            return vocab.setdefault(token, len(vocab))

        draws = []
        for rate in rates:
            per_rate = []
            for k in range(n_seeds):
                d = self._draw_at(text, rate, self.seed + k)
                per_rate.append(
                    {
                        "a": [_ACTIONS.index(r.action) for r in d.rows],
                        "s": [ix(r.shown) for r in d.rows],
                        "p": [[[ix(t), round(p, 3)] for t, p in r.predictions] for r in d.rows],
                    }
                )
            draws.append(per_rate)
        tokens = [ix(self.tokenizer.id_to_token(i)) for i in self.tokenizer.encode(text).ids]
        return {"text": text, "tokens": tokens, "draws": draws}

    def front_data(self, texts: Sequence[str] | None = None, n_seeds: int = 6) -> dict:
        """What the page shows, precomputed: for each sentence (``texts``, default the current
        one; the current one first), each masking rate on the slider (0, 0.05, ..., 1 and the
        current one) and ``n_seeds`` seeds from the current seed on (what "redraw" steps
        through), the draw (what each position became, an index into ``actions``) and the
        model's top-k predictions (probabilities to 3 decimals; the table shows 2)."""
        texts = list(dict.fromkeys([self.text, *(texts or [])]))
        for t in texts:
            if not t.strip():
                raise ValueError("type a sentence first: one of the texts is empty")
        if n_seeds < 1:
            raise ValueError(f"n_seeds must be at least 1, got {n_seeds}")
        rates = sorted({round(i * 0.05, 2) for i in range(21)} | {round(self.mlm_probability, 4)})
        vocab: dict[str, int] = {}
        sentences = [self._sentence_draws(t, rates, n_seeds, vocab) for t in texts]
        return {
            "rates": rates,
            "rate": rates.index(round(self.mlm_probability, 4)),
            "seed": self.seed,
            "n_seeds": n_seeds,
            "vocab": list(vocab),
            "actions": _ACTIONS,
            "sentences": sentences,
        }

    def _answer(self, request: dict) -> dict:
        """With a kernel: every draw of a sentence typed in the widget (same layout, own vocab)."""
        text = str(request.get("text", ""))
        if not text.strip():
            raise ValueError("type a sentence first: the text is empty")
        vocab: dict[str, int] = {}
        rates = [float(r) for r in request.get("rates", [])]
        sentence = self._sentence_draws(text, rates, int(request.get("n_seeds", 1)), vocab)
        return {"vocab": list(vocab), "sentence": sentence}

    def widget(self, texts: Sequence[str] | None = None, n_seeds: int = 6):
        """A sentence menu (``texts``; with a kernel also a box to type one), a masking-rate
        slider and a "redraw" button over the table of the draw: an anywidget that stays live
        in the HTML book, where every draw it can show was precomputed (:meth:`front_data`)."""
        from .front import live_widget

        return live_widget("masking", self.front_data(texts, n_seeds), self._answer)
