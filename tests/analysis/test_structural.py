"""Structural probes, trees and scores (course_lib.analysis.structural), word-level states of
BERT-family encoders (analysis.layers) and the head analysis (analysis.heads): every formula
against a hand computation or a brute-force version."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from course_lib.analysis.heads import coreference_pairs, dependency_pairs, head_accuracy, offset_baseline
from course_lib.analysis.layers import encoder_word_attentions, encoder_word_vectors
from course_lib.analysis.structural import (
    DepthProbe,
    DistanceProbe,
    chain_distances,
    depth_loss,
    depth_scores,
    distance_loss,
    distance_scores,
    fit_structural_probe,
    minimum_spanning_tree,
    pad_sentences,
    predict,
    probe_loss,
    pythagorean_embedding,
    spearman,
    tree_edges,
    uuas,
)
from course_lib.data.corpus import Sentence, generate_corpus, tree_depths, tree_distances
from course_lib.data.tokenizers import train_wordpiece
from course_lib.models.bert import BertConfig, BertModel
from course_lib.objectives.tagging import tagging_inputs

# --------------------------------------------------------------------------- trees and scores


def _brute_force_mst(d: np.ndarray) -> set[tuple[int, int]]:
    n = len(d)
    all_edges = [(i, j) for i in range(n) for j in range(i + 1, n)]
    best, best_w = None, math.inf
    for edges in itertools.combinations(all_edges, n - 1):
        parent = list(range(n))

        def find(x):
            while parent[x] != x:
                x = parent[x]
            return x

        ok = True
        for i, j in edges:
            a, b = find(i), find(j)
            if a == b:
                ok = False
                break
            parent[a] = b
        w = sum(d[i, j] for i, j in edges)
        if ok and w < best_w:
            best, best_w = set(edges), w
    return best


def test_minimum_spanning_tree_equals_brute_force_on_small_graphs():
    rng = np.random.default_rng(0)
    for n in range(1, 7):
        for _ in range(5):
            a = rng.random((n, n))
            d = a + a.T  # symmetric, distinct weights
            assert minimum_spanning_tree(torch.tensor(d)) == (_brute_force_mst(d) if n > 1 else set())


def test_minimum_spanning_tree_of_gold_distances_is_the_tree_and_of_chain_distances_the_chain():
    for s in generate_corpus(30, seed=3):
        assert minimum_spanning_tree(torch.from_numpy(tree_distances(s.heads)).float()) == tree_edges(s.heads)
    assert minimum_spanning_tree(chain_distances(5)) == {(0, 1), (1, 2), (2, 3), (3, 4)}
    with pytest.raises(ValueError, match="square"):
        minimum_spanning_tree(torch.zeros(2, 3))


def test_uuas_on_known_trees_and_punctuation():
    star = [-1, 0, 0, 0]  # word 0 heads every other word
    chain = [-1, 0, 1, 2]
    # the chain's distances predict the chain: on the star only edge (0, 1) is right
    assert uuas([chain_distances(4)], [star]) == pytest.approx(1 / 3)
    assert uuas([chain_distances(4)], [chain]) == 1.0
    # two sentences pooled over edges, not averaged: 1/3 and 3/3 -> 4/6
    assert uuas([chain_distances(4), chain_distances(4)], [star, chain]) == pytest.approx(4 / 6)
    # punctuation (word 3, a leaf of the chain) leaves both trees: 2 gold edges, both right
    assert uuas([chain_distances(4)], [chain], [[False, False, False, True]]) == 1.0
    with pytest.raises(ValueError, match="shape"):
        uuas([chain_distances(3)], [chain])


def test_spearman_matches_a_hand_computation_with_ties():
    # ranks of a: 1, 2.5, 2.5, 4; of b: 1, 3, 2, 4 -> r = 4.5 / sqrt(4.5 * 5)
    assert float(spearman(torch.tensor([1.0, 2, 2, 3]), torch.tensor([1.0, 3, 2, 4]))) == pytest.approx(
        4.5 / math.sqrt(22.5)
    )
    assert float(spearman(torch.tensor([3.0, 1, 2]), torch.tensor([30.0, 10, 20]))) == pytest.approx(1.0)
    assert float(spearman(torch.tensor([3.0, 1, 2]), torch.tensor([-3.0, -1, -2]))) == pytest.approx(-1.0)
    assert float(spearman(torch.ones(4), torch.arange(4.0))) == 0.0  # a constant row ranks nothing
    rows = spearman(torch.tensor([[1.0, 2, 3], [3, 2, 1]]), torch.tensor([[1.0, 2, 3], [1, 2, 3]]))
    assert rows.tolist() == pytest.approx([1.0, -1.0])


def test_distance_and_depth_scores_on_gold_and_on_hand_made_predictions():
    sents = [s for s in generate_corpus(60, seed=1) if 5 <= len(s) <= 50]
    heads = [s.heads for s in sents]
    punct = [s.punct_mask for s in sents]
    gold_d = [torch.from_numpy(tree_distances(h)).float() for h in heads]
    gold_depth = [torch.from_numpy(tree_depths(h)).float() for h in heads]
    assert distance_scores(gold_d, heads, punct) == {"uuas": 1.0, "dspr": pytest.approx(1.0)}
    assert depth_scores(gold_depth, heads, punct) == {"root_accuracy": 1.0, "nspr": pytest.approx(1.0)}
    # DSpr: per word, then per length, then over lengths
    two = [[-1, 0, 1, 2, 3], [-1, 0, 0, 0, 0, 0]]
    pred = [chain_distances(5), chain_distances(6)]
    by_len = [float(spearman(p, torch.from_numpy(tree_distances(h))).mean()) for p, h in zip(pred, two)]
    assert distance_scores(pred, two)["dspr"] == pytest.approx(sum(by_len) / 2)
    # root accuracy: the shallowest kept word; word 0 is punctuation in the second sentence
    depths = [torch.tensor([0.0, 1, 2, 3, 4]), torch.tensor([-5.0, 9, 1, 2, 3, 4])]
    out = depth_scores(depths, [[-1, 0, 1, 2, 3], [2, 2, -1, 2, 2, 2]], [[False] * 5, [True] + [False] * 5])
    assert out["root_accuracy"] == 1.0
    out = depth_scores(depths, [[-1, 0, 1, 2, 3], [2, 2, -1, 2, 2, 2]])
    assert out["root_accuracy"] == 0.5  # with word 0 kept, it is the shallowest and not the root
    with pytest.raises(ValueError, match="no sentence of 5 to 50"):
        distance_scores([chain_distances(3)], [[-1, 0, 1]])


# --------------------------------------------------------------------------- probes and losses


def test_probes_equal_their_definitions():
    torch.manual_seed(0)
    h = torch.randn(2, 5, 6)
    dp, hp = DistanceProbe(6, rank=3), DepthProbe(6, rank=4)
    B, C = dp.proj.detach(), hp.proj.detach()
    with torch.no_grad():
        d, depth = dp(h), hp(h)
    for b, i, j in itertools.product(range(2), range(5), range(5)):
        assert float(d[b, i, j]) == pytest.approx(float(((B @ (h[b, i] - h[b, j])) ** 2).sum()), abs=1e-5)
    for b, i in itertools.product(range(2), range(5)):
        assert float(depth[b, i]) == pytest.approx(float(((C @ h[b, i]) ** 2).sum()), abs=1e-5)
    assert DistanceProbe(6).proj.shape == (6, 6)  # full rank by default
    with pytest.raises(ValueError, match="rank"):
        DistanceProbe(6, rank=0)


def test_losses_are_l1_normalised_by_sentence_length_and_ignore_padding():
    pred = torch.tensor([[[0.0, 2, 9], [2, 0, 9], [9, 9, 9]], [[0.0, 1, 3], [1, 0, 1], [3, 1, 0]]])
    gold = torch.tensor([[[0.0, 1, 0], [1, 0, 0], [0, 0, 0]], [[0.0, 1, 2], [1, 0, 1], [2, 1, 0]]])
    lengths = torch.tensor([2, 3])
    # sentence 1 (2 words): |2-1| twice over 2^2; sentence 2: |3-2| twice over 3^2; the 9s are padding
    assert float(distance_loss(pred, gold, lengths)) == pytest.approx((2 / 4 + 2 / 9) / 2)
    dpred, dgold = torch.tensor([[1.0, 3, 7], [0, 1, 1]]), torch.tensor([[0.0, 1, 0], [0, 1, 2]])
    assert float(depth_loss(dpred, dgold, lengths)) == pytest.approx((3 / 2 + 1 / 3) / 2)
    with pytest.raises(ValueError, match="batch, n, n"):
        distance_loss(pred[0], gold[0], lengths)


def test_probe_loss_is_the_training_objective_over_every_sentence():
    """probe_loss: the mean over sentences of each sentence's own loss, padding ignored, and 0
    for a probe that reproduces the tree exactly (the Pythagorean embedding, B = I)."""
    torch.manual_seed(0)
    heads = [[1, -1, 1], [-1, 0, 1, 1, 0], [1, 2, -1, 2]]
    vectors = [torch.randn(len(h), 6) for h in heads]
    for kind, probe in (("distance", DistanceProbe(6, 3)), ("depth", DepthProbe(6, 3))):
        loss_fn = distance_loss if kind == "distance" else depth_loss
        one_by_one = []
        for v, h in zip(vectors, heads):
            x, gold, lengths = pad_sentences([v], [h], kind)
            one_by_one.append(float(loss_fn(probe(x), gold, lengths)))
        assert probe_loss(probe, vectors, heads) == pytest.approx(sum(one_by_one) / len(one_by_one), rel=1e-6)
    exact = DistanceProbe(5, 5)
    with torch.no_grad():
        exact.proj.copy_(torch.eye(5))
    assert probe_loss(exact, [_pythagorean(h, 5) for h in heads], heads) == pytest.approx(0.0, abs=1e-6)


def _pythagorean(heads, dim: int) -> torch.Tensor:
    """The library's exact tree embedding, padded to ``dim`` coordinates."""
    a = pythagorean_embedding(heads)
    return torch.nn.functional.pad(a, (0, dim - a.size(1)))


def test_the_pythagorean_embedding_has_the_tree_distances_and_depths_as_squared_norms():
    for s in generate_corpus(60, seed=9):
        a = pythagorean_embedding(s.heads)
        sq = ((a.unsqueeze(0) - a.unsqueeze(1)) ** 2).sum(-1)
        assert torch.equal(sq, torch.from_numpy(tree_distances(s.heads)).float())
        assert torch.equal((a * a).sum(-1), torch.from_numpy(tree_depths(s.heads)).float())
    # plain (not squared) distances are not tree distances: on a chain of 3, |a_0 - a_2| = sqrt 2
    a = pythagorean_embedding([-1, 0, 1])
    assert float((a[0] - a[2]).norm()) == pytest.approx(math.sqrt(2))


def test_a_probe_recovers_a_planted_tree_and_not_one_that_is_absent():
    sents = [s for s in generate_corpus(300, seed=2) if len(s) <= 24]
    heads = [s.heads for s in sents]
    gen = torch.Generator().manual_seed(0)
    mix = torch.randn(24 + 8, 40, generator=gen) / 5  # trees in 24 dimensions + 8 noise, mixed into 40
    planted = [
        torch.cat([_pythagorean(h, 24), torch.randn(len(h), 8, generator=gen)], 1) @ mix for h in heads
    ]
    noise = [torch.randn(len(h), 40, generator=gen) for h in heads]
    train, test = slice(0, 200), slice(200, None)
    scores = {}
    for name, vecs in (("planted", planted), ("noise", noise)):
        history = []
        probe = fit_structural_probe(
            "distance", vecs[train], heads[train], rank=32, steps=400, lr=1e-2, history=history
        )
        scores[name] = distance_scores(predict(probe, vecs[test]), heads[test], lengths=(2, 50))
        depth = fit_structural_probe("depth", vecs[train], heads[train], rank=32, steps=400, lr=1e-2)
        scores[name].update(depth_scores(predict(depth, vecs[test]), heads[test], lengths=(2, 50)))
        if name == "planted":
            assert np.mean(history[-20:]) < 0.25 * np.mean(history[:20])
    assert scores["planted"]["uuas"] > 0.95 and scores["planted"]["root_accuracy"] > 0.95
    assert scores["planted"]["dspr"] > 0.85 and scores["planted"]["nspr"] > 0.85
    assert scores["noise"]["uuas"] < 0.6 and scores["noise"]["root_accuracy"] < 0.5
    # the same inputs and seed give the same probe
    a = fit_structural_probe("depth", planted[:20], heads[:20], steps=5)
    b = fit_structural_probe("depth", planted[:20], heads[:20], steps=5)
    assert torch.equal(a.proj, b.proj)


def test_pad_sentences_and_input_errors():
    heads = [[-1, 0], [1, -1, 1]]
    vecs = [torch.ones(2, 3), torch.ones(3, 3)]
    x, gold, lengths = pad_sentences(vecs, heads, "distance")
    assert x.shape == (2, 3, 3) and lengths.tolist() == [2, 3]
    assert gold[1].tolist() == [[0, 1, 2], [1, 0, 1], [2, 1, 0]] and gold[0, 2].tolist() == [0, 0, 0]
    assert pad_sentences(vecs, heads, "depth")[1].tolist() == [[0, 1, 0], [1, 0, 1]]
    with pytest.raises(ValueError, match="kind"):
        pad_sentences(vecs, heads, "angle")
    with pytest.raises(ValueError, match="2 sentences of vectors but 1 trees"):
        fit_structural_probe("depth", vecs, heads[:1])
    with pytest.raises(ValueError, match=r"sentence 1: vectors of shape \(2, 3\) for a tree of 3 words"):
        fit_structural_probe("depth", [vecs[0], vecs[0]], heads)
    with pytest.raises(ValueError, match="one width"):
        fit_structural_probe("depth", [vecs[0], torch.ones(3, 4)], heads)
    with pytest.raises(ValueError, match="root"):
        fit_structural_probe("depth", vecs, [[-1, 0], [-1, -1, 1]])


# --------------------------------------------------------------------------- word-level states


@pytest.fixture(scope="module")
def small_bert():
    sents = generate_corpus(200, seed=0)
    tok = train_wordpiece(sents, vocab_size=120)  # small: many words split into pieces
    config = BertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=128,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    return BertModel(config).eval(), tok


def _manual_word_states(model, tok, words):
    enc = tagging_inputs(tok, [words], piece_words=True)
    out = model(
        input_ids=enc["input_ids"],
        token_type_ids=enc["token_type_ids"],
        output_hidden_states=True,
        output_attentions=True,
    )
    pw = enc["piece_word"][0]
    hidden = torch.stack(
        [torch.stack([h[0, pw == w].mean(0) for w in range(len(words))]) for h in out.hidden_states]
    )
    att = torch.stack(
        [
            torch.stack(
                [
                    torch.stack(
                        [
                            torch.stack(
                                [a[0, head][pw == i][:, pw == j].sum(1).mean(0) for j in range(len(words))]
                            )
                            for i in range(len(words))
                        ]
                    )
                    for head in range(a.size(1))
                ]
            )
            for a in out.attentions
        ]
    )
    return hidden, att, pw


def test_word_vectors_and_attentions_pool_the_pieces_of_each_word_in_padded_batches(small_bert):
    model, tok = small_bert
    words = [list(s.tokens) for s in generate_corpus(6, seed=5)]
    vecs = encoder_word_vectors(model, tok, words, batch_size=4)  # batches with padding
    atts = encoder_word_attentions(model, tok, words, batch_size=4)
    split = 0
    for w, v, a in zip(words, vecs, atts):
        hidden, att, pw = _manual_word_states(model, tok, w)
        split += int((pw >= 0).sum()) - len(w)
        assert v.shape == (3, len(w), 16) and a.shape == (2, 2, len(w), len(w))
        torch.testing.assert_close(v, hidden, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(a, att, atol=1e-5, rtol=1e-5)
        assert float(a.sum(-1).max()) <= 1 + 1e-5  # [CLS]/[SEP] left out: rows sum to at most 1
    assert split > 0  # the small vocabulary split some words into several pieces
    with pytest.raises(ValueError, match="does not fit in max_len=8"):
        encoder_word_vectors(model, tok, words, max_len=8)
    with pytest.raises(ValueError, match="has no words"):
        encoder_word_vectors(model, tok, [["a"], []])


def test_word_vectors_of_a_hugging_face_encoder_equal_the_course_copy(small_bert):
    transformers = pytest.importorskip("transformers")
    model, tok = small_bert
    hf = transformers.BertModel(
        transformers.BertConfig(**{**model.config.to_dict(), "attn_implementation": "eager"})
    )
    hf.eval()
    ours = BertModel.from_hf(hf).eval()
    words = [list(s.tokens) for s in generate_corpus(5, seed=7)]
    for a, b in zip(encoder_word_vectors(hf, tok, words), encoder_word_vectors(ours, tok, words)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    for a, b in zip(encoder_word_attentions(hf, tok, words), encoder_word_attentions(ours, tok, words)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    with pytest.raises(TypeError, match="BERT-family"):
        encoder_word_vectors(torch.nn.Linear(2, 2), tok, words)


# --------------------------------------------------------------------------- heads


def test_head_accuracy_pairs_and_the_offset_baseline():
    s = Sentence(
        tokens=("the", "dog", "saw", "it"),
        pos=("DET", "NOUN", "VERB", "PRON"),
        heads=(1, 2, -1, 2),
        deprels=("det", "nsubj", "root", "obj"),
        coref=((3, 1),),
    )
    assert dependency_pairs(s, "det") == [(0, 1)]
    assert dependency_pairs(s, "nsubj", direction="head") == [(2, 1)]
    assert coreference_pairs(s) == [(3, 1)]
    with pytest.raises(ValueError, match="direction"):
        dependency_pairs(s, "det", direction="up")
    with pytest.raises(ValueError, match="gold tree"):
        dependency_pairs(Sentence(tokens=("a",)), "det")
    att = torch.full((2, 3, 4, 4), 0.1)
    att[0, 1, 0, 1] = 0.9  # layer 0, head 1: "the" -> "dog"
    att[1, 2, 3, 1] = 0.9  # layer 1, head 2: "it" -> "dog"
    att[1, 0, 0, 0] = 0.9  # layer 1, head 0: "the" -> itself
    acc, n = head_accuracy([att, att], [dependency_pairs(s, "det"), []])
    assert n == 1 and acc[0, 1] == 1.0 and acc[1, 0] == 0.0 and acc[1, 2] == 0.0
    assert head_accuracy([att], [coreference_pairs(s)])[0][1, 2] == 1.0
    # argmax with ties takes the first word: a uniform row "attends" to word 0
    assert head_accuracy([torch.full((1, 1, 4, 4), 0.25)], [[(3, 0), (2, 1)]])[0].item() == 0.5
    with pytest.raises(ValueError, match="outside its 4 words"):
        head_accuracy([att], [[(0, 7)]])
    with pytest.raises(ValueError, match="no pairs"):
        head_accuracy([att], [[]])
    pairs = [[(0, 1), (2, 3)], [(4, 5), (1, 0)]]  # three pairs at +1, one at -1
    assert offset_baseline(pairs, [4, 6]) == (1, 0.75)


def test_corpus_relations_have_pairs_for_the_chapter():
    sents = generate_corpus(400, seed=0)
    for rel in ("nsubj", "det", "amod", "obj", "case"):
        assert sum(len(dependency_pairs(s, rel)) for s in sents) >= 50, rel
    assert sum(len(coreference_pairs(s)) for s in sents) >= 5


# --------------------------------------------------------------------------- layers and plots


def test_probe_layers_finds_the_layer_that_holds_the_tree_and_takes_elmo_layers():
    from course_lib.analysis.layers import layer_vectors
    from course_lib.analysis.structural import probe_layers
    from course_lib.models.elmo import ElmoConfig, ElmoLanguageModel

    sents = [s for s in generate_corpus(260, seed=4) if len(s) <= 24]
    gen = torch.Generator().manual_seed(1)
    mix = torch.randn(24, 24, generator=gen) / 3
    # layer 0: noise; layer 1: the planted tree
    vecs = [
        torch.stack([torch.randn(len(s), 24, generator=gen), _pythagorean(s.heads, 24) @ mix]) for s in sents
    ]
    rows = probe_layers(vecs[:160], sents[:160], vecs[160:], sents[160:], steps=300, lengths=(2, 50))
    assert [r["layer"] for r in rows] == [0, 1]
    assert rows[1]["uuas"] > 0.9 > 0.5 > rows[0]["uuas"]
    assert rows[1]["root_accuracy"] > 0.9 and set(rows[0]) == {
        "layer",
        "uuas",
        "dspr",
        "root_accuracy",
        "nspr",
    }
    only = probe_layers(
        vecs[:160], sents[:160], vecs[160:], sents[160:], layers=[1], kinds=("distance",), steps=50
    )
    assert len(only) == 1 and set(only[0]) == {"layer", "uuas", "dspr"}
    elmo = ElmoLanguageModel(
        ElmoConfig(
            char_embed_dim=8, filters=((1, 4), (2, 8)), projection_dim=8, lstm_cell_dim=16, vocab_size=40
        )
    ).eval()
    ev = layer_vectors(elmo, sents[:30])
    assert ev[0].shape == (3, len(sents[0]), 16)
    assert len(probe_layers(ev[:20], sents[:20], ev[20:], sents[20:30], steps=5, lengths=(2, 50))) == 3
    with pytest.raises(ValueError, match="gold tree"):
        probe_layers(vecs[:2], [Sentence(tokens=tuple(sents[0].tokens))] * 2, vecs[:2], sents[:2])
    with pytest.raises(ValueError, match="2 test sentences of vectors but 3 test sentences"):
        probe_layers(vecs[:2], sents[:2], vecs[:2], sents[:3])


def test_plot_tree_arcs_draws_gold_above_and_predicted_below():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course_lib.viz import plot_tree_arcs

    words = ["the", "dog", "saw", "a", "cat"]
    gold = tree_edges([1, 2, -1, 4, 2])
    pred = {(0, 1), (1, 2), (2, 3), (3, 4)}
    ax = plot_tree_arcs(words, gold, pred, title="gold above, probe below")
    arcs = ax.patches
    assert len(arcs) == len(gold) + len(pred)
    above = [a for a in arcs if a.center[1] > 0]
    below = [a for a in arcs if a.center[1] < 0]
    assert len(above) == 4 and len(below) == 4
    wrong = [a for a in below if a.get_linestyle() == "--"]
    assert len(wrong) == 1 and wrong[0].center[0] == 2.5  # (2, 3) is not a gold edge
    assert [t.get_text() for t in ax.texts] == words
    plt.close("all")
    with pytest.raises(ValueError, match="does not join two of the 5 words"):
        plot_tree_arcs(words, {(0, 5)})
