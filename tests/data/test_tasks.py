"""The generated reversal task."""

import pytest
import torch

from course_lib.data.seq2seq import BOS, EOS, PAD, ReversalTask


def test_targets_are_the_reversed_sources():
    task = ReversalTask(n_symbols=6, min_len=2, max_len=7, n_heldout=50, seed=3)
    src, tgt = task.batch(200, torch.Generator().manual_seed(0))
    assert (tgt[:, 0] == BOS).all()
    for s, t in zip(src, tgt):
        text = task.decode(s)
        assert task.decode(t[1:]) == text[::-1]
        n = len(text)
        assert t[n + 1] == EOS and (t[n + 2 :] == PAD).all() and (s[n:] == PAD).all()
        assert 2 <= n <= 7


def test_heldout_sequences_never_appear_in_training():
    task = ReversalTask(
        n_symbols=3, min_len=2, max_len=3, n_heldout=20, seed=0
    )  # tiny space: clashes are common
    held = {tuple(r.tolist()) for r in task.heldout()[0]}
    src, _ = task.batch(2000, torch.Generator().manual_seed(1))
    assert not held & {tuple(r.tolist()) for r in src}


def test_encode_decode_and_errors():
    task = ReversalTask()
    assert task.decode(task.encode("abcd")) == "abcd"
    with pytest.raises(ValueError, match="alphabet"):
        task.encode("abzz")
    with pytest.raises(ValueError, match="outside"):
        task.encode("ab")
    with pytest.raises(ValueError, match="min_len"):
        ReversalTask(min_len=5, max_len=4)


def test_sequence_accuracy_ignores_what_follows_eos():
    tgt = torch.tensor([[BOS, 5, 6, EOS, PAD], [BOS, 7, EOS, PAD, PAD]])
    pred = torch.tensor([[BOS, 5, 6, EOS, 9], [BOS, 7, 8, EOS, PAD]])
    assert ReversalTask.sequence_accuracy(pred, tgt) == 0.5
    assert ReversalTask.sequence_accuracy(tgt[:, :4], tgt) == 1.0
