"""The XLNet permutation widget in plain pytest: the paper's 4-token example grid by grid,
invariants over many random orders (and against the masks and attention weights of the
model), per-step probabilities against factorised_log_prob, bad orders, the static plot, and
the ipywidgets callbacks (which run synchronously: setting ``.value`` or ``button.click()``
updates the state at once)."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from course_lib.models.xlnet import XLNetConfig, XLNetLMHeadModel, XLNetModel
from course_lib.objectives import factorised_log_prob, permutation_masks, sample_orders
from course_lib.widgets import (
    PAPER_ORDER,
    PermutationWidget,
    factorised_probabilities,
    permutation_view,
    permutation_widget,
    plot_permutation_masks,
)
from course_lib.widgets.permutation import check_order, from_one_based, parse_order

V = 30
TOKENS = ["New", "York", "is", "a", "city"]


def tiny_model(seed: int = 0, std: float = 0.5) -> XLNetLMHeadModel:
    """A 2-layer XLNet with large random weights (predictions that depend on the context),
    no dropout, eval mode."""
    torch.manual_seed(seed)
    config = XLNetConfig(vocab_size=V, d_model=16, n_layer=2, n_head=2, d_inner=32, dropout=0.0)
    model = XLNetLMHeadModel(config)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g) * std
            p.copy_(1 + noise if "norm.weight" in name else noise)
    return model.eval()


@pytest.fixture(scope="module")
def model():
    return tiny_model(1)


def random_orders(count: int, seed: int):
    """(tokens, 0-based order) for ``count`` random orders over 1..8 tokens."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(count):
        n = int(torch.randint(1, 9, (1,), generator=g))
        yield [f"t{i}" for i in range(n)], sample_orders([n], g)[0].tolist()


# ---------------------------------------------------------------------------------------
# The paper's example
# ---------------------------------------------------------------------------------------


def test_the_papers_four_token_example():
    """Order 3 -> 2 -> 4 -> 1 (1-based): 3 is predicted from nothing, 2 from {3}, 4 from
    {3, 2}, 1 from {3, 2, 4}; the content stream adds each token itself."""
    tokens = ["x1", "x2", "x3", "x4"]
    view = permutation_view(tokens, PAPER_ORDER, one_based=True)
    assert view.order == [2, 1, 3, 0] == from_one_based(PAPER_ORDER) == parse_order("3 -> 2 -> 4 -> 1", 4)
    #                   sees x1 x2 x3 x4
    content = np.array([[1, 1, 1, 1],  # x1: everything (it comes last)
                        [0, 1, 1, 0],  # x2: x3 and itself
                        [0, 0, 1, 0],  # x3: itself only (it comes first)
                        [0, 1, 1, 1]],  # x4: x2, x3 and itself
                       dtype=bool)  # fmt: skip
    query = np.array([[0, 1, 1, 1],  # x1: x2, x3, x4
                      [0, 0, 1, 0],  # x2: x3
                      [0, 0, 0, 0],  # x3: nothing
                      [0, 1, 1, 0]],  # x4: x2, x3
                     dtype=bool)  # fmt: skip
    assert view.content.dtype == bool and np.array_equal(view.content, content)
    assert np.array_equal(view.query, query)
    assert view.context == [[2, 1, 3], [2], [], [2, 1]]
    assert view.step == [3, 1, 0, 2]
    assert view.is_target == [True] * 4 and view.n == 4
    same = permutation_view(tokens, [2, 1, 3, 0])  # the same order, 0-based
    assert np.array_equal(same.content, content) and np.array_equal(same.query, query)
    lines = view.to_text().splitlines()
    assert lines[1].split() == ["1", "3", "x3", "(nothing)"]
    assert lines[4].split() == ["4", "1", "x1", "x3", "x2", "x4"]
    assert "order 3 -> 2 -> 4 -> 1" in lines[-1] and "probability" not in lines[0]
    assert view.to_html().count("<tr>") == 5


# ---------------------------------------------------------------------------------------
# Invariants
# ---------------------------------------------------------------------------------------


def test_invariants_over_many_random_orders():
    for tokens, order in random_orders(300, seed=0):
        view = permutation_view(tokens, order)
        n = len(tokens)
        eye = np.eye(n, dtype=bool)
        assert view.order == order
        assert not view.query[eye].any(), "the query stream never sees its own token"
        assert view.content[eye].all(), "the content stream always sees itself"
        assert np.array_equal(view.content, view.query | eye)
        rank = np.array(view.step)
        assert sorted(view.step) == list(range(n)) and all(rank[p] == t for t, p in enumerate(order))
        later = rank[None, :] > rank[:, None]  # later[i, j]: j comes after i in the order
        assert not (view.content & later).any() and not (view.query & later).any()
        assert np.array_equal(view.query, rank[None, :] < rank[:, None])  # exactly the earlier ones
        for i in range(n):
            assert view.context[i] == order[: rank[i]]
            assert set(np.flatnonzero(view.query[i])) == set(view.context[i])
        sorted_query = view.query[np.ix_(order, order)]
        assert np.array_equal(sorted_query, np.tril(np.ones((n, n), dtype=bool), -1))
        # the grids are the model's masks for this order
        o = torch.tensor([order])
        h, g = XLNetModel.attention_masks(torch.zeros_like(o), 0, None, None, permutation_masks(o).perm_mask)
        assert np.array_equal(view.content, h[0, 0].numpy()) and np.array_equal(view.query, g[0, 0].numpy())


@pytest.mark.parametrize("n_predict", [1, 2, 3])
def test_partial_prediction_views(n_predict):
    for tokens, order in random_orders(100, seed=n_predict):
        view = permutation_view(tokens, order, n_predict=n_predict)
        n = len(tokens)
        targets = set(order[-n_predict:])
        assert [i in targets for i in range(n)] == view.is_target
        rank = np.array(view.step)
        for i in range(n):
            if i in targets:
                assert view.context[i] == order[: rank[i]]
                assert set(np.flatnonzero(view.query[i])) == set(order[: rank[i]])
                assert set(np.flatnonzero(view.content[i])) == set(order[: rank[i] + 1])
            else:  # context: no query stream; sees the other context tokens, never a target
                assert view.context[i] is None and not view.query[i].any()
                assert set(np.flatnonzero(view.content[i])) == set(order[: n - len(targets)])


def test_grids_are_what_the_model_attends_to(model):
    """The model's own attention weights, both streams, every layer: non-zero exactly where
    the grids say a position may attend."""
    g = torch.Generator().manual_seed(5)
    for n in (4, 6):
        ids = torch.randint(0, V, (1, n), generator=g)
        order = sample_orders([n], g)
        view = permutation_view([str(i) for i in range(n)], order[0])
        m = permutation_masks(order, input_ids=ids)
        with torch.no_grad():
            out = model(ids, perm_mask=m.perm_mask, target_mapping=m.target_mapping, output_attentions=True)
        for w_h, w_g in out.attentions:
            assert np.array_equal((w_h[0] > 0).any(0).numpy(), view.content)
            assert np.array_equal((w_g[0] > 0).any(0).numpy(), view.query)


# ---------------------------------------------------------------------------------------
# Probabilities
# ---------------------------------------------------------------------------------------


def test_factorised_probabilities_match_factorised_log_prob(model):
    g = torch.Generator().manual_seed(2)
    for n in (1, 3, 5, 7):
        ids = torch.randint(0, V, (n,), generator=g)
        for _ in range(3):
            order = sample_orders([n], g)[0]
            fp = factorised_probabilities(model, ids, order)
            with torch.no_grad():
                expect = factorised_log_prob(model, ids, order).item()
            assert fp.order == order.tolist() and fp.log_probs.shape == (n,)
            assert abs(fp.log_prob - expect) < 1e-5
            assert fp.product == pytest.approx(math.exp(expect), rel=1e-5)
            assert fp.product == pytest.approx(math.prod(fp.probabilities), rel=1e-5)
            assert all(0 < p <= 1 for p in fp.probabilities)
            assert fp.by_position() == dict(zip(fp.order, fp.probabilities))
    ids = torch.tensor([3, 7, 1, 9])
    assert factorised_probabilities(model, ids, PAPER_ORDER, one_based=True).order == [2, 1, 3, 0]


def test_each_step_is_its_own_conditional(model):
    """Step t's probability is the one a call with only that target gives (same perm_mask)."""
    ids = torch.tensor([[4, 11, 2, 27, 8]])
    order = torch.tensor([[3, 0, 4, 2, 1]])
    fp = factorised_probabilities(model, ids[0], order[0].tolist())
    m = permutation_masks(order, input_ids=ids)
    for t, pos in enumerate(order[0].tolist()):
        mapping = torch.zeros(1, 1, 5)
        mapping[0, 0, pos] = 1
        with torch.no_grad():
            logits = model(ids, perm_mask=m.perm_mask, target_mapping=mapping).logits[0, 0]
        expect = torch.log_softmax(logits, -1)[ids[0, pos]].item()
        assert fp.log_probs[t].item() == pytest.approx(expect, abs=1e-5)
    assert len(set(fp.probabilities)) == 5  # the steps really differ


def test_factorised_probabilities_restore_the_mode():
    m = tiny_model(3).train()
    fp = factorised_probabilities(m, [1, 2, 3], [1, 2, 0])
    assert m.training
    assert fp.log_prob == pytest.approx(factorised_probabilities(m.eval(), [1, 2, 3], [1, 2, 0]).log_prob)


# ---------------------------------------------------------------------------------------
# Bad orders
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("order", "one_based", "message"),
    [
        ([0, 1, 2, 4], False, r"position 4 out of range: a 4-token sentence has positions 0\.\.3"),
        (
            [3, 2, 4, 5],
            True,
            r"position 5 out of range: a 4-token sentence has positions 1\.\.4 \(counted from 1",
        ),
        ([0, 1, 2, 3], True, "position 0 out of range"),
        ([0, 0, 1, 2], False, "position 0 appears more than once; the order leaves out position 3"),
        ([1, 2, 1, 2], True, "positions 1, 2 appear more than once; the order leaves out positions 3, 4"),
        ([2, 1, 0], False, "leaves out position 3: an order lists each of the 4 positions once"),
        ([], False, "empty"),
        ([0, 1.5, 2, 3], False, "whole numbers"),
        ([0, 1, 2, 3, 0], False, "position 0 appears more than once"),
    ],
)
def test_bad_orders_are_refused_with_the_reason(order, one_based, message):
    with pytest.raises(ValueError, match=message):
        check_order(order, 4, one_based=one_based)
    with pytest.raises(ValueError, match=message):
        permutation_view(["a", "b", "c", "d"], order, one_based=one_based)


def test_other_bad_input(model):
    with pytest.raises(ValueError, match="'x' is not a position"):
        parse_order("3 x 1", 3)
    with pytest.raises(ValueError, match="type an order"):
        parse_order("  ", 3)
    with pytest.raises(ValueError, match="empty"):
        permutation_view([], [])
    with pytest.raises(ValueError, match=r"\[T\] token ids"):
        factorised_probabilities(model, torch.zeros(2, 3, dtype=torch.long), [0, 1, 2])
    with pytest.raises(ValueError, match="leaves out position 3"):
        factorised_probabilities(model, [1, 2, 3, 4], [0, 1, 2])
    with pytest.raises(ValueError, match="together"):
        PermutationWidget(TOKENS, model=model)
    with pytest.raises(ValueError, match="one id per token"):
        PermutationWidget(TOKENS, model=model, ids=[1, 2, 3])
    with pytest.raises(ValueError, match="out of range"):
        PermutationWidget(TOKENS, order="1 2 3 4 6")


# ---------------------------------------------------------------------------------------
# Plot
# ---------------------------------------------------------------------------------------


def test_plot_draws_both_grids_with_one_legend():
    view = permutation_view(TOKENS, [2, 1, 3, 0, 4])
    fig = plot_permutation_masks(view)
    content, query = (a.images[0].get_array() for a in fig.axes[:2])
    assert np.array_equal(content > 0, view.content) and np.array_equal(query > 0, view.query)
    assert np.array_equal(np.diag(content), [2] * 5)  # itself: its own colour
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == [
        "1 New",
        "2 York",
        "3 is",
        "4 a",
        "5 city",
    ]
    assert len(fig.legends) == 1 and "3 → 2 → 4 → 1 → 5" in fig._suptitle.get_text()
    plt.close(fig)

    fig, axes = plt.subplots(1, 2)
    assert plot_permutation_masks(view, axes, sort_by_order=True) is fig
    query = axes[1].images[0].get_array()
    assert np.array_equal(query > 0, np.tril(np.ones((5, 5)), -1))  # in the order: the strict lower triangle
    assert axes[1].get_yticklabels()[0].get_text() == "3 is"
    with pytest.raises(ValueError, match="two axes"):
        plot_permutation_masks(view, [axes[0]])
    plt.close(fig)

    partial = plot_permutation_masks(permutation_view(TOKENS, [2, 1, 3, 0, 4], n_predict=2))
    labels = [t.get_text() for t in partial.legends[0].get_texts()]
    assert "no query stream (not predicted)" in labels and "may attend" in labels
    plt.close("all")


# ---------------------------------------------------------------------------------------
# Widget
# ---------------------------------------------------------------------------------------


def test_widget_without_a_model_carries_the_order_and_the_samples():
    w = PermutationWidget(TOKENS, seed=4)
    assert w.last.order == sample_orders([5], 4)[0].tolist() and w.probs is None
    box = w.widget(n_samples=3)
    data = box.data
    assert data["tokens"] == TOKENS and data["order"] == w.last.order and not data["has_model"]
    # "sample" in the page walks through the orders the Python widget's sample() would draw
    assert data["samples"] == [sample_orders([5], 4 + k)[0].tolist() for k in (1, 2, 3)]
    for expected in data["samples"]:
        assert w.sample().order == expected
    assert data["log_probs"] == {} and "export default" in box._esm
    assert w._answer({"key": "0 1 2 3 4", "order": [0, 1, 2, 3, 4]}) is None  # nothing to compute


def test_widget_with_a_model_precomputes_each_steps_probability(model):
    ids = torch.tensor([5, 17, 2, 9, 21])
    w = PermutationWidget(TOKENS, model=model, ids=ids, order=[4, 0, 1, 2, 3])
    data = w.widget(n_samples=4).data
    assert data["has_model"] and {"4 0 1 2 3", "0 1 2 3 4"} <= set(data["log_probs"])
    assert len(data["log_probs"]) <= 6
    for key, logp in data["log_probs"].items():
        fp = factorised_probabilities(model, ids, [int(x) for x in key.split()])
        assert logp == pytest.approx(fp.log_probs.tolist(), abs=1e-6)
    # with a kernel, an order the page does not hold is computed on request
    fp = factorised_probabilities(model, ids, PAPER_ORDER + (5,), one_based=True)
    answer = w._answer({"key": "2 1 3 0 4", "order": [2, 1, 3, 0, 4]})
    assert answer["log_probs"] == pytest.approx(fp.log_probs.tolist(), abs=1e-6)
    with pytest.raises(ValueError, match="more than once"):
        w._answer({"key": "x", "order": [0, 0, 1, 2, 3]})
    with pytest.raises(ValueError, match="the probabilities are for the order"):
        permutation_view(TOKENS, [0, 1, 2, 3, 4]).to_html(w.probs)


def test_kernel_requests_land_in_extra(model):
    box = permutation_widget(TOKENS, model=model, ids=[1, 2, 3, 4, 5], seed=1)
    box._on_request(box, {"key": "4 3 2 1 0", "order": [4, 3, 2, 1, 0]}, [])
    box._on_request(box, {"key": "bad", "order": [4, 4, 2, 1, 0]}, [])
    assert len(box.extra["4 3 2 1 0"]["log_probs"]) == 5
    assert "more than once" in box.extra["bad"]["error"]
    box._on_request(box, {"kind": "anywidget-command"}, [])  # not a request of ours: ignored
    assert set(box.extra) == {"4 3 2 1 0", "bad"}
