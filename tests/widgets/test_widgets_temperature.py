"""course_lib.widgets.temperature: softened distributions, the teacher's ranking of wrong answers,
and the widget's slider, without a browser."""

import numpy as np
import pytest
import torch

from course_lib.widgets.temperature import TemperatureWidget, dark_knowledge, plot_softened, softened_view

LABELS = ["cat", "dog", "car", "truck", "cow"]
LOGITS = [1.0, 6.0, -2.0, -1.0, 3.0]  # a confident "dog", then cow, cat, truck, car


def test_softening_flattens_without_reordering():
    view = softened_view(LOGITS, LABELS, [1.0, 2.0, 5.0, 100.0], true_index=1)
    assert np.allclose(view.probs.sum(1), 1.0)
    assert all(a < b for a, b in zip(view.entropy, view.entropy[1:]))  # higher T, flatter
    order = [list(np.argsort(-row)) for row in view.probs]
    assert all(o == order[0] for o in order)  # the same ranking at every temperature
    assert np.allclose(view.probs[-1], 1 / 5, atol=0.02)  # T -> inf: uniform
    z = torch.tensor(LOGITS, dtype=torch.float64)
    assert np.allclose(view.probs[1], torch.softmax(z / 2, 0).numpy())
    assert "entropy" in view.to_html()


def test_dark_knowledge_lists_the_wrong_answers_in_the_teachers_order():
    assert [w for w, _ in dark_knowledge(LOGITS, LABELS, 1)] == ["cow", "cat", "truck"]
    cold = dark_knowledge(LOGITS, LABELS, 1, temperature=1.0, k=4)
    warm = dark_knowledge(LOGITS, LABELS, 1, temperature=5.0, k=4)
    assert [w for w, _ in cold] == [w for w, _ in warm]
    assert warm[-1][1] / warm[0][1] > cold[-1][1] / cold[0][1]  # the small ones become visible
    with pytest.raises(ValueError, match="true_index"):
        dark_knowledge(LOGITS, LABELS, 9)
    with pytest.raises(ValueError, match="labels"):
        softened_view(LOGITS, LABELS[:3])
    with pytest.raises(ValueError, match="temperature"):
        softened_view(LOGITS, LABELS, [0.0])


def test_plot_and_widget():
    import matplotlib

    matplotlib.use("Agg")
    fig = plot_softened(softened_view(LOGITS, LABELS, true_index=1))
    assert len(fig.axes) == 1
    w = TemperatureWidget(LOGITS, LABELS, true_index=1)
    box = w.widget()
    assert "T = 1" in w.summary() and "cow" in w.view.to_html()
    assert box.data == {
        "labels": LABELS,
        "logits": pytest.approx(list(LOGITS)),
        "true_index": 1,
        "temperature": 1.0,
    }
    assert "export default" in box._esm
