"""Sequence-to-sequence tasks generated in code, for training a Transformer in minutes.

:class:`ReversalTask` asks the model to write a sequence of symbols backwards. It is easy
to generate, impossible to solve without attending to the right source position, and its
solution is visible in the attention maps: decoder step ``i`` must look at source position
``n - 1 - i``, an anti-diagonal.

Token ids: ``0 = <pad>``, ``1 = <bos>``, ``2 = <eos>``, then the symbols.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

__all__ = ["ReversalTask", "PAD", "BOS", "EOS"]

PAD, BOS, EOS = 0, 1, 2
SPECIALS = ("<pad>", "<bos>", "<eos>")


@dataclass
class ReversalTask:
    """Reverse a sequence of ``n_symbols`` letters, ``min_len`` to ``max_len`` long.

    ``batch(...)`` returns ``(src, tgt)``: ``src`` is the padded input; ``tgt`` is
    ``<bos> reversed <eos>`` padded, so teacher forcing feeds ``tgt[:, :-1]`` and predicts
    ``tgt[:, 1:]``. Held-out sequences (``heldout``) never appear in training batches.
    """

    n_symbols: int = 20
    min_len: int = 4
    max_len: int = 12
    n_heldout: int = 500
    seed: int = 1234
    _heldout: tuple[Tensor, Tensor] | None = field(default=None, init=False, repr=False)
    _heldout_keys: set[bytes] = field(default_factory=set, init=False, repr=False)

    def __post_init__(self):
        if not 1 <= self.min_len <= self.max_len:
            raise ValueError(f"need 1 <= min_len <= max_len, got {self.min_len}, {self.max_len}")
        if not 2 <= self.n_symbols <= 26:
            raise ValueError(f"n_symbols must be between 2 and 26 (letters a-z), got {self.n_symbols}")
        g = torch.Generator().manual_seed(self.seed)
        self._heldout = self._draw(self.n_heldout, g)
        self._heldout_keys = {self._key(row) for row in self._heldout[0]}

    @property
    def vocab_size(self) -> int:
        return len(SPECIALS) + self.n_symbols

    @property
    def symbols(self) -> list[str]:
        return [chr(ord("a") + i) for i in range(self.n_symbols)]

    @property
    def itos(self) -> list[str]:
        """Id -> string for every id of the vocabulary."""
        return list(SPECIALS) + self.symbols

    def encode(self, text: str) -> Tensor:
        """``"abc"`` -> ids of the letters (no specials)."""
        bad = [ch for ch in text if not ("a" <= ch < chr(ord("a") + self.n_symbols))]
        if bad:
            raise ValueError(f"symbols {bad} are outside this task's alphabet a-{self.symbols[-1]}")
        if not self.min_len <= len(text) <= self.max_len:
            raise ValueError(f"length {len(text)} is outside [{self.min_len}, {self.max_len}]")
        return torch.tensor([len(SPECIALS) + ord(ch) - ord("a") for ch in text])

    def decode(self, ids) -> str:
        """Ids -> letters, skipping specials and stopping at ``<eos>``."""
        out = []
        for i in ids.tolist() if isinstance(ids, Tensor) else ids:
            if i == EOS:
                break
            if i >= len(SPECIALS):
                out.append(self.itos[i])
        return "".join(out)

    @staticmethod
    def _key(row: Tensor) -> bytes:
        return row.to(torch.uint8).numpy().tobytes()

    def _draw(self, n: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
        lengths = torch.randint(self.min_len, self.max_len + 1, (n,), generator=g)
        sym = torch.randint(len(SPECIALS), self.vocab_size, (n, self.max_len), generator=g)
        pos = torch.arange(self.max_len)
        real = pos[None, :] < lengths[:, None]
        src = torch.where(real, sym, PAD)
        # reversed within each sequence's own length: position j takes source position len-1-j
        idx = (lengths[:, None] - 1 - pos[None, :]).clamp(min=0)
        rev = torch.where(real, src.gather(1, idx), PAD)
        tgt = torch.full((n, self.max_len + 2), PAD)
        tgt[:, 0] = BOS
        tgt[:, 1 : self.max_len + 1] = rev
        tgt[torch.arange(n), lengths + 1] = EOS
        return src, tgt

    def batch(self, batch_size: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """A fresh training batch; sequences that are in the held-out set are redrawn."""
        src, tgt = self._draw(batch_size, generator or torch.Generator().manual_seed(0))
        clash = torch.tensor([self._key(r) in self._heldout_keys for r in src])
        while bool(clash.any()):
            s2, t2 = self._draw(int(clash.sum()), generator or torch.Generator().manual_seed(1))
            src[clash], tgt[clash] = s2, t2
            clash = torch.tensor([self._key(r) in self._heldout_keys for r in src])
        return src, tgt

    def heldout(self) -> tuple[Tensor, Tensor]:
        """The fixed held-out set ``(src, tgt)``."""
        assert self._heldout is not None
        return self._heldout

    @staticmethod
    def sequence_accuracy(predicted: Tensor, tgt: Tensor) -> float:
        """Fraction of sequences whose prediction matches ``tgt`` up to and including ``<eos>``."""
        n = max(predicted.size(1), tgt.size(1))
        p = torch.nn.functional.pad(predicted, (0, n - predicted.size(1)), value=PAD)
        t = torch.nn.functional.pad(tgt, (0, n - tgt.size(1)), value=PAD)
        # compare up to and including the reference's <eos>; what follows it does not count
        upto = torch.arange(n, device=t.device)[None, :] <= (t == EOS).float().argmax(1, keepdim=True)
        return float(((p == t) | ~upto).all(1).float().mean())
