"""course_lib.analysis: the probes and the layer normalisation the chapters import."""

import pytest
import torch

from course_lib.analysis import linear_probe, normalise_layers, train_probe
from course_lib.models.elmo import ScalarMix


def two_blobs(n=200, dim=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=g)
    X = torch.randn(n, dim, generator=g) + 3.0 * y[:, None].float()
    return X, y


def test_logistic_probe_separates_separable_classes_and_is_seeded():
    X, y = two_blobs()
    predict = train_probe(X[:100], y[:100], 2, steps=100)
    assert (predict(X[100:]) == y[100:]).float().mean() > 0.95
    again = train_probe(X[:100], y[:100], 2, steps=100)
    assert torch.equal(predict(X), again(X))


def test_ridge_probe_reads_a_linear_property_and_not_noise():
    X, y = two_blobs(400)
    assert linear_probe(X, y, 2) > 0.95
    noise = torch.randint(0, 4, (400,), generator=torch.Generator().manual_seed(1))
    assert linear_probe(X, noise, 4) < 0.45  # chance is 0.25


def test_normalise_layers_is_scalar_mix_layer_norm_without_padding():
    X = torch.randn(3, 50, 8) * torch.tensor([1.0, 5.0, 0.1])[:, None, None] + 2.0
    Z = normalise_layers(X)
    assert torch.allclose(Z.mean(dim=(1, 2)), torch.zeros(3), atol=1e-5)
    assert torch.allclose(Z.var(dim=(1, 2), unbiased=False), torch.ones(3), atol=1e-4)
    mix = ScalarMix(3, do_layer_norm=True)
    with torch.no_grad():
        expected = mix(X[:, :, None], torch.ones(50, 1, dtype=torch.bool))[:, 0]
    assert torch.allclose(Z.mean(0), expected, atol=1e-5)  # equal weights 1/3, gamma 1


def test_layer_transitions_match_a_token_by_token_computation():
    from course_lib.analysis import layer_transitions
    from course_lib.models.albert import AlbertConfig, AlbertForPreTraining

    torch.manual_seed(0)
    model = AlbertForPreTraining(
        AlbertConfig(
            vocab_size=50,
            embedding_size=8,
            hidden_size=16,
            num_hidden_layers=3,
            num_attention_heads=2,
            intermediate_size=32,
            sharing="none",
        )
    )
    ids = torch.randint(5, 50, (3, 7))
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0
    mask[2, 2:] = 0
    types = (torch.arange(7) >= 3).long().expand(3, 7).clone()
    got = layer_transitions(
        model, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}, batch_size=2
    )
    model.eval()
    with torch.no_grad():
        hs = model.albert(
            ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True
        ).hidden_states
    assert len(got["l2"]) == len(got["cosine"]) == 3
    for layer in range(3):
        l2, cos, n = 0.0, 0.0, 0
        for b in range(3):
            for t in range(7):
                if mask[b, t]:
                    a, c = hs[layer][b, t], hs[layer + 1][b, t]
                    l2 += float(torch.sqrt(((c - a) ** 2).sum()))
                    cos += float((a @ c) / (a.norm() * c.norm()))
                    n += 1
        assert abs(got["l2"][layer] - l2 / n) < 1e-4
        assert abs(got["cosine"][layer] - cos / n) < 1e-5
    model.train()  # the mode is restored
    layer_transitions(model, {"input_ids": ids, "attention_mask": mask})
    assert model.training


def test_topic_matcher_reads_topics_and_only_guesses_on_order():
    import random

    from course_lib.analysis import TopicMatcher
    from course_lib.data.corpus import Document, Sentence
    from course_lib.data.documents import train_tokenizer
    from course_lib.objectives.pretraining import pretraining_examples

    words = {
        "fruit": "apple pear plum fig lime kiwi".split(),
        "cars": "engine wheel brake gear axle tyre".split(),
    }
    rng = random.Random(0)

    def doc(topic):
        return Document(
            tuple(Sentence(tuple(rng.choices(words[topic], k=6)) + (".",), topic=topic) for _ in range(8)),
            topic=topic,
        )

    docs = [doc(t) for t in ("fruit", "cars") * 20]
    tokenizer = train_tokenizer(docs[:30], kind="wordpiece", vocab_size=100)
    matcher = TopicMatcher(docs[:30], tokenizer)
    assert matcher.topics == ["cars", "fruit"]
    nsp = pretraining_examples(docs[30:], tokenizer, max_len=32, pair_task="nsp", nsp_unit="segment", seed=0)
    sop = pretraining_examples(docs[30:], tokenizer, max_len=32, pair_task="sop", nsp_unit="segment", seed=0)
    topic_a, topic_b = matcher.segment_topics(sop)
    assert torch.equal(topic_a, topic_b)  # both segments of a pair come from one document: one topic
    # NSP: a random B from the other topic is spotted; from the same topic it cannot be
    other_topic = matcher.predict(nsp).bool()
    random_b = nsp["next_sentence_label"].bool()
    assert not (other_topic & ~random_b).any()  # never "different topics" for a true continuation
    assert other_topic[random_b].float().mean() > 0.3
    assert matcher.accuracy(nsp) > 0.6
    # SOP: the prediction is always "same topic", so the accuracy is the share of in-order pairs
    assert matcher.accuracy(sop) == pytest.approx(float((sop["sentence_order_label"] == 0).float().mean()))
    unlabelled = {k: v for k, v in sop.items() if k != "sentence_order_label"}
    with pytest.raises(ValueError, match="no sentence-pair labels"):
        matcher.accuracy(unlabelled)
    with pytest.raises(ValueError, match="topic"):
        TopicMatcher([Document(docs[0].sentences, topic=None)], tokenizer)
