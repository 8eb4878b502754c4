"""nn/checks.py: the one place every model checks its token ids (shape, dtype, ranges)."""

import pytest
import torch

from course_lib.nn.checks import check_id_ranges, check_same_shape, check_token_batch


def test_token_batch_shape_dtype_and_length():
    check_token_batch(torch.zeros(2, 3, dtype=torch.long))
    check_token_batch(torch.zeros(2, 3, dtype=torch.int32), min_length=3)
    with pytest.raises(ValueError, match=r"input_ids must be \[batch, seq_len\], got shape \(3,\)"):
        check_token_batch(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"with seq_len >= 2, got shape \(2, 1\)"):
        check_token_batch(torch.zeros(2, 1, dtype=torch.long), min_length=2)
    for dtype in (torch.float32, torch.bool):
        with pytest.raises(ValueError, match="must hold integer token ids"):
            check_token_batch(torch.zeros(2, 3, dtype=dtype))


def test_same_shape_names_the_tensor():
    ids = torch.zeros(2, 3, dtype=torch.long)
    check_same_shape(ids, attention_mask=torch.ones(2, 3), token_type_ids=None)
    with pytest.raises(
        ValueError, match=r"attention_mask must have the shape of input_ids \(2, 3\) \(1 = real"
    ):
        check_same_shape(ids, attention_mask=torch.ones(2, 4))
    with pytest.raises(
        ValueError, match=r"token_type_ids must have the shape of input_ids \(2, 3\), got \(3, 2\)"
    ):
        check_same_shape(ids, token_type_ids=torch.zeros(3, 2))


def test_id_ranges_name_table_and_values():
    ids = torch.tensor([[0, 4], [2, 3]])
    check_id_ranges(("input_ids", ids, "vocab_size", 5), ("empty", ids[:0], "t", 1))
    with pytest.raises(
        ValueError, match=r"input_ids must lie in \[0, vocab_size=4\), got values in \[0, 4\]"
    ):
        check_id_ranges(("input_ids", ids, "vocab_size", 4))
    with pytest.raises(
        ValueError, match=r"token_type_ids must lie in \[0, type_vocab_size=2\), got values in \[-1, 0\]"
    ):
        check_id_ranges(
            ("input_ids", ids, "vocab_size", 5),
            ("token_type_ids", torch.tensor([[-1, 0]]), "type_vocab_size", 2),
        )
