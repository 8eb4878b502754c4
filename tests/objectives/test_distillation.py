"""course_lib.objectives.distillation: the KD loss, its T^2 factor and weighting schedule, FitNets'
hints, TinyBERT's layer mapping and layer losses, against computations written out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.objectives.distillation import (
    HintRegressor,
    attention_loss,
    distillation_loss,
    hidden_loss,
    hint_loss,
    kd_loss,
    soft_cross_entropy,
    soft_weight,
    softened,
    uniform_layer_map,
)


def _kl_by_hand(zs, zt, T):
    total = 0.0
    for row_s, row_t in zip(zs.tolist(), zt.tolist()):
        ps = [math.exp(v / T) for v in row_s]
        pt = [math.exp(v / T) for v in row_t]
        ps = [v / sum(ps) for v in ps]
        pt = [v / sum(pt) for v in pt]
        total += sum(a * (math.log(a) - math.log(b)) for a, b in zip(pt, ps))
    return total / len(zs)


def test_kd_loss_is_t_squared_kl_of_the_softened_distributions():
    g = torch.Generator().manual_seed(0)
    zs, zt = (
        torch.randn(5, 7, generator=g, dtype=torch.float64),
        torch.randn(5, 7, generator=g, dtype=torch.float64),
    )
    for T in (1.0, 2.0, 5.0):
        want = _kl_by_hand(zs, zt, T)
        assert float(kd_loss(zs, zt, T, scale_by_t2=False)) == pytest.approx(want, rel=1e-10)
        assert float(kd_loss(zs, zt, T)) == pytest.approx(T * T * want, rel=1e-10)
    assert float(kd_loss(zt, zt, 3.0)) == pytest.approx(0.0, abs=1e-12)
    # the soft cross-entropy is the KL plus the teacher's entropy
    pt = softened(zt, 2.0)
    entropy = float(-(pt * pt.log()).sum(-1).mean())
    assert float(soft_cross_entropy(zs, zt, 2.0)) == pytest.approx(
        _kl_by_hand(zs, zt, 2.0) + entropy, rel=1e-10
    )


def test_the_t_squared_factor_keeps_the_gradient_scale():
    """Without T^2 the gradient of the soft loss shrinks as 1/T^2; with it, it stays put."""
    g = torch.Generator().manual_seed(1)
    zt = torch.randn(8, 10, generator=g, dtype=torch.float64)
    zs0 = torch.randn(8, 10, generator=g, dtype=torch.float64)

    def grad_norm(T, scale):
        zs = zs0.clone().requires_grad_(True)
        kd_loss(zs, zt, T, scale_by_t2=scale).backward()
        return float(zs.grad.norm())

    assert grad_norm(10.0, False) / grad_norm(20.0, False) == pytest.approx(4.0, rel=0.02)
    assert grad_norm(10.0, True) / grad_norm(20.0, True) == pytest.approx(1.0, rel=0.02)


def test_the_teacher_gets_no_gradient():
    zs = torch.randn(3, 4, requires_grad=True)
    zt = torch.randn(3, 4, requires_grad=True)
    kd_loss(zs, zt, 2.0).backward()
    assert zt.grad is None and zs.grad is not None


def test_distillation_loss_weights_soft_and_hard():
    g = torch.Generator().manual_seed(2)
    zs, zt = torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g)
    y = torch.tensor([0, 1, 2, 3, 4, -100])
    soft = kd_loss(zs, zt, 2.0)
    hard = torch.nn.functional.cross_entropy(zs[:5], y[:5])
    loss, parts = distillation_loss(zs, zt, y, temperature=2.0, alpha=0.3)
    assert float(loss) == pytest.approx(0.3 * float(soft) + 0.7 * float(hard), rel=1e-6)
    assert parts["soft"] == pytest.approx(float(soft)) and parts["hard"] == pytest.approx(float(hard))
    assert float(distillation_loss(zs, zt, None, alpha=1.0)[0]) == pytest.approx(float(kd_loss(zs, zt, 2.0)))
    with pytest.raises(ValueError, match="alpha must be 1"):
        distillation_loss(zs, zt, None, alpha=0.5)
    with pytest.raises(ValueError, match="alpha"):
        distillation_loss(zs, zt, y, alpha=1.5)
    with pytest.raises(ValueError, match="one shape"):
        kd_loss(zs, zt[:, :3])
    with pytest.raises(ValueError, match="temperature"):
        kd_loss(zs, zt, 0.0)


def test_soft_weight_moves_from_soft_to_hard():
    lin = [soft_weight(s, 11) for s in range(11)]
    assert lin[0] == pytest.approx(0.9) and lin[-1] == pytest.approx(0.1)
    assert all(a > b for a, b in zip(lin, lin[1:]))
    cos = [soft_weight(s, 11, schedule="cosine") for s in range(11)]
    assert cos[0] == pytest.approx(0.9) and cos[-1] == pytest.approx(0.1) and cos[5] == pytest.approx(0.5)
    assert soft_weight(7, 11, schedule="constant") == 0.9
    with pytest.raises(ValueError, match="schedule"):
        soft_weight(0, 3, schedule="step")
    with pytest.raises(ValueError, match="step"):
        soft_weight(3, 3)


def test_hints_with_a_regressor_and_a_mask():
    torch.manual_seed(0)
    guided, hint = torch.randn(2, 4, 6, requires_grad=True), torch.randn(2, 4, 10)
    r = HintRegressor(6, 10)
    pred = r(guided).detach()
    assert float(hint_loss(guided, hint, r).detach()) == pytest.approx(
        float((0.5 * (pred - hint) ** 2).mean()), rel=1e-6
    )
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    by_hand = sum(
        float((0.5 * (pred[b, t] - hint[b, t]) ** 2).sum()) for b in range(2) for t in range(4) if mask[b, t]
    )
    assert float(hint_loss(guided, hint, r, mask=mask).detach()) == pytest.approx(
        by_hand / (6 * 10), rel=1e-6
    )
    assert isinstance(HintRegressor(8, 8).proj, torch.nn.Identity)
    with pytest.raises(ValueError, match="HintRegressor"):
        hint_loss(guided, hint)
    hint_loss(guided, hint, r).backward()
    assert guided.grad is not None and r.proj.weight.grad is not None


def test_uniform_layer_map():
    assert uniform_layer_map(4, 12) == [3, 6, 9, 12]  # TinyBERT-4 from BERT-base
    assert uniform_layer_map(2, 2) == [1, 2]
    with pytest.raises(ValueError, match="multiple"):
        uniform_layer_map(5, 12)


def test_hidden_and_attention_losses():
    torch.manual_seed(0)
    hs, ht = torch.randn(2, 3, 4), torch.randn(2, 3, 8)
    proj = torch.nn.Linear(4, 8)
    with torch.no_grad():
        assert float(hidden_loss(hs, ht, proj)) == pytest.approx(
            float(((proj(hs) - ht) ** 2).mean()), rel=1e-6
        )
    with pytest.raises(ValueError, match="projection"):
        hidden_loss(hs, ht)
    a_s, a_t = torch.randn(2, 2, 3, 3), torch.randn(2, 2, 3, 3)
    assert float(attention_loss(a_s, a_t)) == pytest.approx(float(((a_s - a_t) ** 2).mean()), rel=1e-6)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    a_t_masked = a_t.clone()
    a_t_masked[0, :, :, 2] = float("-inf")  # what a masked key's score is
    total, count = 0.0, 0
    for b in range(2):
        for h in range(2):
            for i in range(3):
                for j in range(3):
                    if mask[b, i] and mask[b, j]:
                        total += float((a_s[b, h, i, j] - a_t[b, h, i, j]) ** 2)
                        count += 1
    got = attention_loss(a_s, a_t_masked, mask)
    assert math.isfinite(float(got)) and float(got) == pytest.approx(total / count, rel=1e-6)
    with pytest.raises(ValueError, match="heads"):
        attention_loss(a_s, a_t[:, :1])


def test_student_initialised_from_every_other_teacher_layer():
    from course_lib.models.bert import BertConfig, BertModel, init_from_teacher

    torch.manual_seed(0)
    shape = dict(vocab_size=30, hidden_size=16, num_attention_heads=2, intermediate_size=64)
    teacher = BertModel(BertConfig(num_hidden_layers=4, **shape))
    student = BertModel(BertConfig(num_hidden_layers=2, **shape))
    init_from_teacher(student, teacher, [0, 2])  # DistilBERT: every other layer
    for m, i in enumerate([0, 2]):
        for k, v in student.encoder.layers[m].state_dict().items():
            assert torch.equal(v, teacher.encoder.layers[i].state_dict()[k]), (m, k)
    for k, v in student.embeddings.state_dict().items():
        assert torch.equal(v, teacher.embeddings.state_dict()[k]), k
    assert not torch.equal(
        student.encoder.layers[1].ffn.linear1.weight, teacher.encoder.layers[1].ffn.linear1.weight
    )
    with pytest.raises(ValueError, match="one teacher layer per student layer"):
        init_from_teacher(student, teacher, [0])
    with pytest.raises(ValueError, match="must lie in"):
        init_from_teacher(student, teacher, [0, 4])
    narrow = BertModel(
        BertConfig(
            num_hidden_layers=2, vocab_size=30, hidden_size=8, num_attention_heads=2, intermediate_size=32
        )
    )
    with pytest.raises(ValueError, match="width"):
        init_from_teacher(narrow, teacher, [0, 2])


def test_kd_loss_fn_distils_a_teacher_with_fit():
    """A student trained with KDLoss through the shared fit() comes to agree with its teacher;
    the soft weight follows its schedule."""
    from course_lib.objectives.distillation import KDLoss
    from course_lib.train import fit

    class Net(torch.nn.Module):
        def __init__(self, width):
            super().__init__()
            self.f = torch.nn.Sequential(
                torch.nn.Linear(6, width), torch.nn.Tanh(), torch.nn.Linear(width, 4)
            )

        def forward(self, x):
            class Out:
                pass

            o = Out()
            o.logits = self.f(x)
            return o

    torch.manual_seed(0)
    teacher, student = Net(32), Net(8)
    x = torch.randn(256, 6)
    batches = [{"x": x[i : i + 32]} for i in range(0, 256, 32)]
    before = float(kd_loss(student(x).logits.detach(), teacher(x).logits, 2.0))
    loss_fn = KDLoss(teacher, temperature=2.0, total_steps=200)
    history = fit(student, batches, loss_fn, steps=200, lr=1e-2, progress=False)
    after = float(kd_loss(student(x).logits.detach(), teacher(x).logits, 2.0))
    assert after < before / 3, (before, after)
    assert history.metrics["alpha"][0] == 1.0  # no labels: soft targets only
    with_labels = KDLoss(teacher, total_steps=3)
    alphas = [
        with_labels(student, {"x": x[:4], "labels": torch.tensor([0, 1, 2, 3])})[1]["alpha"] for _ in range(4)
    ]
    assert (
        alphas[0] == pytest.approx(0.9)
        and alphas[2] == pytest.approx(0.1)
        and alphas[3] == pytest.approx(0.1)
    )
    assert teacher.training  # the teacher's mode is restored
