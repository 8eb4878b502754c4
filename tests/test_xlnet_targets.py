"""XLNet's query stream attends from its targets' rows when target_mapping is one-hot (the
pretraining case) and through the mapping otherwise: both agree with Hugging Face."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from course_lib.models.xlnet import _one_hot_rows

pytest.importorskip("transformers")

from test_xlnet import TINY, assert_close, ids, order_masks, pair  # noqa: E402


def test_one_hot_rows_only_for_one_hot_mappings():
    tm = torch.zeros(2, 3, 5)
    tm[0, [0, 1, 2], [4, 0, 2]] = 1
    tm[1, [0, 1, 2], [1, 3, 0]] = 1
    assert _one_hot_rows(tm).tolist() == [[4, 0, 2], [1, 3, 0]]
    assert _one_hot_rows(tm.long()).tolist() == [[4, 0, 2], [1, 3, 0]]
    soft = tm.clone()
    soft[0, 0, 3] = 0.5
    assert _one_hot_rows(soft) is None
    double = tm.clone()
    double[1, 2, 4] = 1
    assert _one_hot_rows(double) is None
    assert _one_hot_rows(torch.zeros(1, 2, 4)) is None


@torch.no_grad()
def test_a_mapping_that_is_not_one_hot_still_matches_hugging_face():
    x = ids(2, 9, seed=11)
    perm_mask, target_mapping, _, _ = order_masks(2, 9, 3, seed=11)
    soft = 0.5 * target_mapping + 0.5 * target_mapping.roll(1, dims=-1)  # two positions per target
    assert _one_hot_rows(soft) is None
    hf, ours = pair(seed=11)
    types = (torch.arange(9) >= 5).long().expand(2, 9)
    for mapping in (target_mapping, soft):  # the rows path, then the mapping path
        kw = dict(perm_mask=perm_mask, target_mapping=mapping, token_type_ids=types)
        mine, theirs = ours(input_ids=x, **kw), hf(input_ids=x, **kw)
        assert mine.last_hidden_state.shape == (2, 3, TINY["d_model"])
        assert_close(mine.last_hidden_state, theirs.last_hidden_state, "query stream")
