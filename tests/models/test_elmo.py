"""ELMo: character ids, shapes and masks, no leakage in either LM direction (and the naive
variant's leak), scalar-mix maths, highway init, parameter counts, LM training, bad input."""

import math

import pytest
import torch

from course_lib.data.chars import (
    BEGINNING_OF_SENTENCE_CHAR,
    BEGINNING_OF_WORD_CHAR,
    END_OF_SENTENCE_CHAR,
    END_OF_WORD_CHAR,
    PADDING_CHAR,
    char_ids_to_words,
    word_to_char_ids,
    words_to_char_ids,
)
from course_lib.models.elmo import Elmo, ElmoConfig, ElmoLanguageModel, Highway, ScalarMix
from course_lib.objectives.losses import elmo_lm_loss
from course_lib.recipes.elmo import compare_naive_bidirectional, train_elmo

TOL = 1e-5


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """These models are tiny: one thread is faster, and far faster on a shared, busy CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


SENTENCES = [
    ["the", "cat", "sat", "on", "the", "mat"],
    ["a", "dog", "barked"],
    ["traffic", "jam"],
    ["apple", "jam", "is", "sweet"],
]


def tiny(**kw):
    base = dict(
        char_embed_dim=8,
        filters=((1, 4), (2, 8), (3, 8)),
        n_highway=1,
        projection_dim=16,
        lstm_cell_dim=32,
        n_layers=2,
        dropout=0.0,
        vocab_size=40,
    )
    base.update(kw)
    return ElmoConfig(**base)


def model(**kw):
    return ElmoLanguageModel(tiny(**kw)).eval()


def batch(sentences=SENTENCES):
    ids, mask = words_to_char_ids(sentences, add_sentence_boundaries=True)
    vocab = {}
    for s in sentences:
        for w in ["<S>", *s, "</S>"]:
            vocab.setdefault(w, len(vocab))
    words = torch.zeros(mask.shape, dtype=torch.long)
    for i, s in enumerate(sentences):
        words[i, : len(s) + 2] = torch.tensor([vocab[w] for w in ["<S>", *s, "</S>"]])
    return ids, words, mask


def perturb(ids, b, t, word="zebra"):
    out = ids.clone()
    out[b, t] = torch.tensor(word_to_char_ids(word))
    return out


# ----------------------------------------------------------------------------------------- char ids


def test_char_ids_layout_markers_and_round_trip():
    ids = word_to_char_ids("jam")
    assert len(ids) == 50
    assert ids[0] == BEGINNING_OF_WORD_CHAR + 1
    assert ids[1:4] == [ord("j") + 1, ord("a") + 1, ord("m") + 1]
    assert ids[4] == END_OF_WORD_CHAR + 1
    assert set(ids[5:]) == {PADDING_CHAR + 1}
    assert word_to_char_ids("<S>")[:3] == [
        BEGINNING_OF_WORD_CHAR + 1,
        BEGINNING_OF_SENTENCE_CHAR + 1,
        END_OF_WORD_CHAR + 1,
    ]
    assert word_to_char_ids("</S>")[1] == END_OF_SENTENCE_CHAR + 1
    assert min(ids) >= 1 and max(word_to_char_ids("ÿ€")) <= 261

    sentences = [["Café", "naïve", "日本"], ["x"]]
    char_ids, mask = words_to_char_ids(sentences, add_sentence_boundaries=True)
    assert char_ids.shape == (2, 5, 50) and char_ids.dtype == torch.long
    assert mask.tolist() == [[True] * 5, [True, True, True, False, False]]
    assert (char_ids[1, 3:] == 0).all()  # padding tokens are all zeros
    assert char_ids_to_words(char_ids, mask) == [["<S>", *sentences[0], "</S>"], ["<S>", "x", "</S>"]]
    assert char_ids_to_words(char_ids) == char_ids_to_words(char_ids, mask)  # mask derived from zeros


def test_over_long_words_are_truncated_keeping_the_markers():
    long = "a" * 60 + "b"
    ids = word_to_char_ids(long)
    assert len(ids) == 50
    assert ids[0] == BEGINNING_OF_WORD_CHAR + 1 and ids[49] == END_OF_WORD_CHAR + 1
    assert ids[1:49] == [ord("a") + 1] * 48
    char_ids, _ = words_to_char_ids([[long]])
    assert char_ids_to_words(char_ids) == [["a" * 48]]
    # a cut inside a multi-byte character drops the broken tail on decoding
    word = "é" * 30  # 60 bytes -> 48 bytes kept = 24 characters
    assert char_ids_to_words(words_to_char_ids([[word]])[0]) == [["é" * 24]]
    word = "a" + "é" * 30  # 61 bytes -> 48 kept: 'a' + 23 é + half of one
    assert char_ids_to_words(words_to_char_ids([[word]])[0]) == [["a" + "é" * 23]]
    # a shorter token width
    assert word_to_char_ids("abcdef", max_chars=5) == [259, 98, 99, 100, 260]


@pytest.mark.parametrize(
    "arg, match",
    [
        ([], "empty batch"),
        ([["a"], []], "sentence 1 is empty"),
        (["a", "b"], "a batch"),
        ([["a", ""]], "empty word"),
        ([["a", 3]], "words must be str"),
        ("just text", "a batch"),
    ],
)
def test_words_to_char_ids_bad_input(arg, match):
    with pytest.raises(ValueError, match=match):
        words_to_char_ids(arg)


def test_words_to_char_ids_rejects_too_few_chars():
    with pytest.raises(ValueError, match="at least 3"):
        words_to_char_ids([["a"]], max_chars=2)


# ----------------------------------------------------------------------------------------- shapes, masks


def test_shapes_layer_zero_and_padding_zeros():
    m = model()
    ids, _, mask = batch()
    st = m.encode(ids, mask)
    layers = m(ids, mask)
    assert layers.shape == (3, 4, 8, 32)
    assert torch.equal(layers[0, ..., :16], layers[0, ..., 16:])  # [x; x]
    assert torch.equal(layers[1], torch.cat([st.forward[0], st.backward[0]], -1))
    assert torch.equal(layers[2], torch.cat([st.forward[1], st.backward[1]], -1))
    assert (layers[:, ~mask] == 0).all() and (layers[:, mask].abs().sum(-1) > 0).all()
    assert st.lengths.tolist() == [8, 5, 4, 6]
    assert torch.equal(m(ids), layers)  # mask derived from all-zero tokens
    assert torch.equal(m(ids.int(), mask.long()), layers)  # int32 ids and 0/1 masks are accepted


def test_padding_never_changes_real_positions():
    m = model()
    ids, _, mask = batch()
    together = m(ids, mask)
    for b, s in enumerate(SENTENCES):
        alone_ids, alone_mask = words_to_char_ids([s], add_sentence_boundaries=True)
        alone = m(alone_ids, alone_mask)
        n = alone.shape[2]
        assert (together[:, b, :n] - alone[:, 0]).abs().max() <= TOL
    # an all-padding row is allowed: zero output, and the other rows are unchanged
    ids2 = torch.cat([ids, torch.zeros_like(ids[:1])])
    out = m(ids2)
    assert (out[:, -1] == 0).all()
    assert (out[:, :-1] - together).abs().max() <= TOL
    # even a batch that is nothing but padding runs and gives zeros (also through a layer-normed mix)
    nothing = torch.zeros(2, 3, 50, dtype=torch.long)
    assert (m(nothing) == 0).all()
    assert (Elmo(m, do_layer_norm=True)(nothing)[0] == 0).all()


def test_backward_stack_starts_at_the_last_real_token_and_residual():
    m = model()
    ids, _, mask = batch()
    st = m.encode(ids, mask)
    b = 2  # a padded row (4 real tokens of 8)
    n = int(mask[b].sum())
    x = st.token[b : b + 1, :n]
    f1 = m.bilm.forward_layers[0](x)[0]
    b1 = m.bilm.backward_layers[0](x.flip(1))[0].flip(1)  # the reversed sentence, on its own
    assert (st.forward[0][b, :n] - f1[0]).abs().max() <= TOL
    assert (st.backward[0][b, :n] - b1[0]).abs().max() <= TOL
    f2 = m.bilm.forward_layers[1](f1)[0] + f1  # residual from layer 1
    b2 = m.bilm.backward_layers[1](b1.flip(1))[0].flip(1) + b1
    assert (st.forward[1][b, :n] - f2[0]).abs().max() <= TOL
    assert (st.backward[1][b, :n] - b2[0]).abs().max() <= TOL
    no_res = ElmoLanguageModel(tiny(residual=False)).eval()
    no_res.load_state_dict(m.state_dict())
    assert (no_res.encode(ids, mask).forward[1][b, :n] - (f2 - f1)[0]).abs().max() <= TOL


# ----------------------------------------------------------------------------------------- leakage


@pytest.mark.parametrize("t", [1, 3, 5])
def test_each_direction_never_sees_what_it_predicts(t):
    m = model()
    ids, _, mask = batch()
    b = 0  # 8 real tokens
    base = m.encode(ids, mask)
    new = m.encode(perturb(ids, b, t), mask)
    for layer in range(2):
        f0, f1 = base.forward[layer][b], new.forward[layer][b]
        b0, b1 = base.backward[layer][b], new.backward[layer][b]
        assert (f0[:t] - f1[:t]).abs().max() <= TOL  # forward: positions before t are blind to t
        assert (b0[t + 1 :] - b1[t + 1 :]).abs().max() <= TOL  # backward: positions after t too
        assert (f0[t:] - f1[t:]).abs().amax(-1).min() > 1e-4  # ...while t and after do change
        assert (b0[: t + 1] - b1[: t + 1]).abs().amax(-1).min() > 1e-4
    # other sentences of the batch are untouched
    assert (torch.stack(base.forward)[:, 1:] - torch.stack(new.forward)[:, 1:]).abs().max() <= TOL


def test_predictions_use_only_the_other_side():
    """The forward logits for word t do not move when words t, t+1, ... all change (and the backward
    logits for t do not move when words 0..t change)."""
    m = model()
    ids, _, mask = batch()
    fwd, bwd, fv, bv = m.lm_logits(ids, mask)
    assert fv[0].tolist() == [False] + [True] * 7 and bv[0].tolist() == [True] * 7 + [False]
    assert fv[2].tolist() == [False, True, True, True] + [False] * 4
    t = 3
    future = ids.clone()
    for s in range(t, 8):
        future = perturb(future, 0, s, word=f"w{s}")
    fwd2, bwd2, _, _ = m.lm_logits(future, mask)
    assert (fwd[0, : t + 1] - fwd2[0, : t + 1]).abs().max() <= TOL
    assert (fwd[0, t + 1 :] - fwd2[0, t + 1 :]).abs().amax(-1).min() > 1e-5
    past = ids.clone()
    for s in range(0, t + 1):
        past = perturb(past, 0, s, word=f"v{s}")
    _, bwd3, _, _ = m.lm_logits(past, mask)
    assert (bwd[0, t:] - bwd3[0, t:]).abs().max() <= TOL
    assert (bwd[0, :t] - bwd3[0, :t]).abs().amax(-1).min() > 1e-5


def test_naive_bidirectional_variant_leaks_the_answer():
    m = model(naive_bidirectional=True)
    assert m.bilm.forward_layers[1].input_size == 32  # reads both directions
    ids, _, mask = batch()
    t = 4
    base = m.encode(ids, mask)
    new = m.encode(perturb(ids, 0, t), mask)
    # layer 1 is still honest; layer 2's forward state at t - 1 (which predicts t) sees token t
    assert (base.forward[0][0, :t] - new.forward[0][0, :t]).abs().max() <= TOL
    assert (base.forward[1][0, t - 1] - new.forward[1][0, t - 1]).abs().max() > 1e-4
    assert (base.backward[1][0, t + 1] - new.backward[1][0, t + 1]).abs().max() > 1e-4
    fwd, _, _, _ = m.lm_logits(ids, mask)
    fwd2, _, _, _ = m.lm_logits(perturb(ids, 0, t), mask)
    assert (fwd[0, t] - fwd2[0, t]).abs().max() > 1e-5  # the prediction of word t depends on word t


def test_prefix_loss_equals_the_forward_loss_of_an_honest_model():
    """Deleting everything after a word does not change an honest forward LM's prediction of it
    (the trained naive model fails this: test_naive_model_cheats_honest_model_does_not)."""
    ids, words, mask = batch()
    honest = model()
    assert torch.allclose(
        honest.prefix_forward_loss(ids, words, mask), honest.lm_loss(ids, words, mask).forward, atol=1e-5
    )


# ----------------------------------------------------------------------------------------- scalar mix


def test_scalar_mix_matches_brute_force():
    torch.manual_seed(1)
    layers = torch.randn(3, 2, 5, 4)
    mix = ScalarMix(3)
    assert torch.equal(mix.scalar_parameters.detach(), torch.zeros(3)) and mix.gamma.item() == 1.0
    assert torch.allclose(mix(layers), layers.mean(0), atol=1e-6)  # w = 0 -> a plain average
    with torch.no_grad():
        mix.scalar_parameters.copy_(torch.tensor([0.5, -1.0, 2.0]))
        mix.gamma.fill_(1.7)
    w = [0.5, -1.0, 2.0]
    z = sum(torch.exp(torch.tensor(v)) for v in w)
    expected = torch.zeros(2, 5, 4)
    for j in range(3):
        expected += torch.exp(torch.tensor(w[j])) / z * layers[j]
    expected *= 1.7
    assert torch.allclose(mix(layers), expected, atol=1e-6)
    assert torch.allclose(mix(list(layers)), expected, atol=1e-6)
    mix(layers).sum().backward()
    assert mix.scalar_parameters.grad.abs().sum() > 0 and mix.gamma.grad is not None


def test_scalar_mix_layer_norm_uses_only_real_elements_of_each_whole_layer():
    torch.manual_seed(2)
    layers = torch.randn(2, 3, 4, 5) * 3 + 1
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.bool)
    mix = ScalarMix(2, do_layer_norm=True, initial_scalar_parameters=[0.3, -0.2])
    s = torch.softmax(torch.tensor([0.3, -0.2]), 0)
    expected = torch.zeros(3, 4, 5)
    for j in range(2):
        real = torch.stack([layers[j, b, t] for b in range(3) for t in range(4) if mask[b, t]])  # [n_real, 5]
        mean = real.mean()
        var = ((real - mean) ** 2).mean()  # population variance over every real element
        expected += s[j] * (layers[j] - mean) / torch.sqrt(var + 1e-12)
    out = mix(layers, mask)
    assert torch.allclose(out[mask], expected[mask], atol=1e-5)
    changed = layers.clone()
    changed[:, ~mask] = 1e3  # padding values do not enter the statistics
    assert torch.allclose(mix(changed, mask)[mask], out[mask], atol=1e-5)
    # per-layer, not per-token: a token's vector is not itself zero-mean
    assert out[mask].mean(-1).abs().max() > 1e-2
    with pytest.raises(ValueError, match="needs the mask"):
        mix(layers)


def test_scalar_mix_bad_input():
    with pytest.raises(ValueError, match="mixture_size=3"):
        ScalarMix(3, initial_scalar_parameters=[0.0, 1.0])
    with pytest.raises(ValueError, match="mixes 3"):
        ScalarMix(3)(torch.randn(2, 1, 2, 4))


# ----------------------------------------------------------------------------------------- modules, sizes


def test_highway_carry_bias_and_formula():
    hw = Highway(6, n_layers=2)
    for layer in hw.layers:
        assert torch.equal(layer.bias[6:].detach(), torch.ones(6))
    x = torch.randn(3, 6)
    y = x
    for layer in hw.layers:
        a, b = layer.weight[:6], layer.weight[6:]
        g = torch.sigmoid(y @ b.T + layer.bias[6:])
        y = g * y + (1 - g) * torch.relu(y @ a.T + layer.bias[:6])
    assert torch.allclose(hw(x), y, atol=1e-6)


def test_lstm_bias_and_forget_gate_init():
    m = model()
    for cell in [*m.bilm.forward_layers, *m.bilm.backward_layers]:
        assert torch.equal(cell.bias_hh_l0, torch.zeros(128)) and not cell.bias_hh_l0.requires_grad
        assert torch.equal(cell.bias_ih_l0.detach()[32:64], torch.ones(32))
        assert cell.bias_ih_l0.detach()[:32].abs().sum() == 0


@pytest.mark.parametrize("name, expected", [("original", 93_600_864), ("small", 13_593_312)])
def test_parameter_counts_match_allennlp(name, expected):
    """allennlp reports 93.6M / 28.0M / 13.6M: the char CNN + biLM, without the softmax."""
    with torch.device("meta"):
        m = ElmoLanguageModel(getattr(ElmoConfig, name)(vocab_size=1000))
    assert m.num_parameters() == expected
    assert m.num_parameters(include_softmax=True) == expected + 1000 * m.config.projection_dim + 1000
    trainable = sum(
        p.numel() for n, p in m.named_parameters() if p.requires_grad and not n.startswith("softmax")
    )
    assert trainable == expected


def test_component_counts_by_hand():
    c = ElmoConfig.small()
    with torch.device("meta"):
        m = ElmoLanguageModel(c)
    count = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731
    assert count(m.char_cnn.char_embedding) == 262 * 16
    assert count(m.char_cnn.convs) == sum(16 * w * n + n for w, n in c.filters)
    assert count(m.char_cnn.highway) == 2048 * 4096 + 4096
    one_lstm = 128 * 4096 + 128 * 4096 + 4096 + 1024 * 128  # W_ih, W_hh, one bias, projection
    assert count(m.bilm) - 4 * 4096 == 4 * one_lstm  # minus the frozen zero biases


def test_config_validation():
    with pytest.raises(ValueError, match="cannot exceed lstm_cell_dim"):
        tiny(projection_dim=64, lstm_cell_dim=32)
    with pytest.raises(ValueError, match="widest filter"):
        tiny(filters=((60, 4),))
    with pytest.raises(ValueError, match="activation"):
        tiny(activation="gelu")
    with pytest.raises(ValueError, match="dropout"):
        tiny(dropout=1.0)
    # equal projection and cell width: a plain LSTM (nn.LSTM needs proj_size < hidden_size)
    m = ElmoLanguageModel(tiny(projection_dim=32, lstm_cell_dim=32)).eval()
    ids, _, mask = batch()
    assert m(ids, mask).shape == (3, 4, 8, 64)


# ----------------------------------------------------------------------------------------- bad input


def test_bad_model_inputs():
    m = model()
    ids, words, mask = batch()
    with pytest.raises(ValueError, match="empty input"):
        m(ids[:0])
    with pytest.raises(ValueError, match="empty input"):
        m(ids[:, :0])
    bad = ids.clone()
    bad[0, 0, 0] = 262
    with pytest.raises(
        ValueError, match=r"char_ids must lie in \[0, n_characters=262\), got values in \[0, 262"
    ):
        m(bad)
    bad[0, 0, 0] = -1
    with pytest.raises(ValueError, match=r"got values in \[-1, "):
        m(bad)
    with pytest.raises(ValueError, match="max_chars_per_token=50"):
        m(ids[..., :40])
    with pytest.raises(ValueError, match="integer"):
        m(ids.float())
    with pytest.raises(ValueError, match=r"\[batch, seq"):
        m(ids[0])
    gap = mask.clone()
    gap[0, 2] = False
    with pytest.raises(ValueError, match="right-padded"):
        m(ids, gap)
    with pytest.raises(ValueError, match="right-padded"):  # an all-zero token between real ones
        m(perturb(ids, 0, 0).index_fill(1, torch.tensor([2]), 0))
    with pytest.raises(ValueError, match="shape"):
        m(ids, mask[:, :3])
    with pytest.raises(ValueError, match=r"word_ids must lie in \[0, vocab_size=40\)"):
        m.lm_loss(ids, words + 40, mask)
    with pytest.raises(ValueError, match="word_ids must have shape"):
        m.lm_loss(ids, words[:, :3], mask)
    one, one_mask = words_to_char_ids([["a"], ["b"]])
    with pytest.raises(ValueError, match="fewer than 2 tokens"):
        m.lm_loss(one, torch.zeros(2, 1, dtype=torch.long), one_mask)
    with pytest.raises(ValueError, match="fewer than 2 tokens"):
        m.prefix_forward_loss(one, torch.zeros(2, 1, dtype=torch.long), one_mask)


# ----------------------------------------------------------------------------------------- training, Elmo


def test_lm_losses_fall_on_a_tiny_batch():
    torch.manual_seed(0)
    m = ElmoLanguageModel(tiny())
    ids, words, mask = batch()
    data = [{"char_ids": ids, "word_ids": words, "mask": mask}]
    with torch.no_grad():
        start = m.eval().lm_loss(ids, words, mask)
    hist = train_elmo(m, data, steps=40, lr=3e-2, warmup=2, progress=False, eval_batch=data[0])
    end = m.lm_loss(ids, words, mask)
    assert end.forward < 0.3 * start.forward and end.backward < 0.3 * start.backward
    assert hist.loss[-1] < 0.3 * hist.loss[0]
    assert set(hist.metrics) == {"forward_loss", "backward_loss"}
    assert set(hist.evals) == {"forward_loss", "backward_loss", "prefix_forward_loss"}
    assert abs(hist.evals["prefix_forward_loss"][-1] - hist.evals["forward_loss"][-1]) < 1e-4
    loss, metrics = elmo_lm_loss(m, data[0])
    assert abs(loss.item() - (metrics["forward_loss"] + metrics["backward_loss"]) / 2) < 1e-5


def test_naive_model_cheats_honest_model_does_not():
    """All four sentences start with <S> and end with </S> and then four different words, so an
    honest LM must pay at least ln 4 on each of those 4 of the 19 predictions per direction. The
    naive model goes below that floor: it reads the answer. With the future deleted it is lost."""
    ids, words, mask = batch()
    data = [{"char_ids": ids, "word_ids": words, "mask": mask}]
    floor = 4 * math.log(4) / 19
    res = compare_naive_bidirectional(
        data, config=tiny(), steps=60, lr=3e-2, warmup=2, eval_batch=data[0], progress=False, device="cpu"
    )
    assert set(res.histories) == set(res.models) == {"elmo", "naive"}
    naive, honest = res.histories["naive"].evals, res.histories["elmo"].evals
    assert honest["forward_loss"][-1] >= floor and honest["backward_loss"][-1] >= floor
    assert abs(honest["prefix_forward_loss"][-1] - honest["forward_loss"][-1]) < 1e-4
    assert naive["forward_loss"][-1] < floor * 0.8 and naive["backward_loss"][-1] < floor * 0.8
    assert naive["prefix_forward_loss"][-1] > naive["forward_loss"][-1] + 0.5


def test_elmo_feature_extractor_is_frozen_and_mixes():
    lm = model()
    ids, _, mask = batch()
    expected_layers = lm(ids, mask)
    elmo = Elmo(lm, n_outputs=2, dropout=0.0)
    assert elmo.output_dim == 32
    assert all(not p.requires_grad for p in lm.parameters())
    assert {n for n, p in elmo.named_parameters() if p.requires_grad} == {
        "mixes.0.scalar_parameters",
        "mixes.0.gamma",
        "mixes.1.scalar_parameters",
        "mixes.1.gamma",
    }
    elmo.train()
    assert not lm.training and elmo.mixes[0].training
    reps = elmo(ids, mask)
    assert len(reps) == 2 and reps[0].shape == (4, 8, 32)
    assert torch.allclose(reps[0], expected_layers.mean(0), atol=1e-6)
    reps[0].sum().backward()
    assert elmo.mixes[0].gamma.grad is not None and elmo.mixes[1].gamma.grad is None
    normed = Elmo(model(), do_layer_norm=True, dropout=0.0)(ids, mask)[0]
    assert (normed[~mask] == 0).all()


def test_contextual_vectors_differ_for_the_same_word():
    """'jam' in 'traffic jam' and 'apple jam': one static vector, two contextual ones."""
    lm = model()
    ids, _, mask = batch()
    layers = lm(ids, mask)
    jam_traffic, jam_apple = layers[:, 2, 2], layers[:, 3, 2]  # position 2 after <S>
    assert torch.allclose(jam_traffic[0], jam_apple[0])  # layer 0: the char CNN, context-free
    assert not torch.allclose(jam_traffic[1], jam_apple[1], atol=1e-4)


def test_char_ids_agree_with_the_data_layer():
    """course_lib.data.elmo_char_ids mirrors words_to_char_ids: the same ids and masks."""
    from course_lib.data import elmo_char_ids

    sentences = [["Café", "jam", "x" * 70, "日本語"], ["a"], ["traffic", "jam", "é" * 40]]
    ours = words_to_char_ids(sentences, add_sentence_boundaries=True)
    theirs = elmo_char_ids(sentences, add_bos_eos=True)
    assert torch.equal(ours[0], theirs[0]) and torch.equal(ours[1], theirs[1])


def test_runs_under_bf16_autocast():
    """The course's GPU policy is bf16 autocast; CPU autocast exercises the same mixed-dtype paths."""
    m = ElmoLanguageModel(tiny()).train()
    ids, words, mask = batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        layers = m(ids, mask)
        out = m.lm_loss(ids, words, mask)
        mixed = Elmo(m, do_layer_norm=True, freeze=False)(ids, mask)[0]
    assert layers.shape == (3, 4, 8, 32) and (layers[:, ~mask] == 0).all()
    assert out.loss.dtype == torch.float32 and torch.isfinite(out.loss)
    (out.loss + mixed.float().sum()).backward()
    assert m.softmax.weight.grad is not None and m.char_cnn.convs[0].weight.grad is not None


def _brute_force_bilm(m: ElmoLanguageModel, ids: torch.Tensor, mask: torch.Tensor):
    """The whole biLM written out one word and one time step at a time, from the paper's
    equations and nothing of the library but the weights: the char CNN (embed, convolve, max
    over the word, activation, highway, project), then each direction's LSTM with a
    projection, h_t = W_hr (o_t * tanh(c_t)), c_t = f_t * c_{t-1} + i_t * g_t, read left to
    right and right to left within each sentence, with residual connections above layer 1."""
    c = m.config
    act = {"relu": torch.relu, "tanh": torch.tanh}[c.activation]
    cnn = m.char_cnn
    batch_size, seq, _ = ids.shape
    token = torch.zeros(batch_size, seq, c.projection_dim, dtype=torch.float64)
    for b in range(batch_size):
        for t in range(seq):
            if not mask[b, t]:
                continue
            e = cnn.char_embedding.weight.double()[ids[b, t]]  # [chars, char_embed_dim]
            feats = []
            for conv in cnn.convs:
                w, bias = conv.weight.double(), conv.bias.double()  # [filters, char_embed_dim, width]
                width = w.shape[-1]
                starts = range(e.shape[0] - width + 1)
                windows = [(w * e[k : k + width].T[None]).sum((1, 2)) + bias for k in starts]
                feats.append(torch.stack(windows).max(0).values)
            h = act(torch.cat(feats))
            for layer in cnn.highway.layers:
                z = layer.weight.double() @ h + layer.bias.double()
                gate = torch.sigmoid(z[c.n_filters :])
                h = gate * h + (1 - gate) * torch.relu(z[: c.n_filters])
            token[b, t] = cnn.projection.weight.double() @ h + cnn.projection.bias.double()

    def run(cell, xs):  # one sentence, one direction: xs [length, width]
        W, U = cell.weight_ih_l0.double(), cell.weight_hh_l0.double()
        bias = (cell.bias_ih_l0 + cell.bias_hh_l0).double()
        P = cell.weight_hr_l0.double() if hasattr(cell, "weight_hr_l0") else None
        n = c.lstm_cell_dim
        h = torch.zeros(P.shape[0] if P is not None else n, dtype=torch.float64)
        cell_state = torch.zeros(n, dtype=torch.float64)
        out = []
        for x in xs:
            z = W @ x + U @ h + bias
            i, f, o = torch.sigmoid(z[:n]), torch.sigmoid(z[n : 2 * n]), torch.sigmoid(z[3 * n :])
            g = torch.tanh(z[2 * n : 3 * n])  # PyTorch's gate order: i, f, g, o
            cell_state = f * cell_state + i * g
            h = o * torch.tanh(cell_state)
            h = P @ h if P is not None else h
            out.append(h)
        return torch.stack(out)

    forwards, backwards = [], []
    for b in range(batch_size):
        n = int(mask[b].sum())
        f_in = b_in = token[b, :n]
        f_layers, b_layers = [], []
        for layer, (f_cell, b_cell) in enumerate(zip(m.bilm.forward_layers, m.bilm.backward_layers)):
            f = run(f_cell, f_in)
            bw = run(b_cell, b_in.flip(0)).flip(0)  # right to left, starting at the last real word
            if c.residual and layer > 0:
                f, bw = f + f_in, bw + b_in
            f_layers.append(f)
            b_layers.append(bw)
            f_in, b_in = f, bw
        forwards.append(f_layers)
        backwards.append(b_layers)
    return token, forwards, backwards


def test_bilm_matches_a_brute_force_loop_over_words_and_time_steps():
    """A numerical check of ELMo's biLM (Hugging Face has no ELMo to compare with): the library's
    vectorised forward (unique words, nn.LSTM, reversal within each length) equals the
    equations computed word by word and step by step in float64, padding included."""
    torch.manual_seed(0)
    m = model()
    with torch.no_grad():  # non-zero biases everywhere, so that no term can hide
        for name, p in m.named_parameters():
            if "bias" in name:
                p.normal_(0, 0.3)
    ids, _, mask = batch()
    with torch.no_grad():
        st = m.encode(ids, mask)
        token, forwards, backwards = _brute_force_bilm(m, ids, mask)
    torch.testing.assert_close(st.token.double(), token, atol=TOL, rtol=TOL)
    for b in range(ids.shape[0]):
        n = int(mask[b].sum())
        for layer in range(m.config.n_layers):
            close = dict(atol=TOL, rtol=TOL)
            torch.testing.assert_close(st.forward[layer][b, :n].double(), forwards[b][layer], **close)
            torch.testing.assert_close(st.backward[layer][b, :n].double(), backwards[b][layer], **close)
            assert (st.forward[layer][b, n:] == 0).all() and (st.backward[layer][b, n:] == 0).all()
