"""Every course widget stays live in the built HTML, offline, without a kernel: a tiny book
(``tests/widget_pages.py``: the course's ``_config.yml`` and offline assets, one page per
widget) opened from ``file://`` in headless Chromium with the network refused; each test
drives a widget's controls and checks what the page shows against the Python reference.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import time

import numpy as np
import pytest
import widget_pages as wp

from course_lib.widgets import factorised_probabilities, permutation_view, softened_view
from course_lib.widgets.front import PAGE_BUDGET
from course_lib.widgets.permutation import ITSELF, VISIBLE


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    if importlib.util.find_spec("jupyter_book") is None:
        _needed("jupyter-book (pip install '.[book]')")
    html, seconds = wp.build(tmp_path_factory.mktemp("widget-book"))
    print(f"\nwidget pages built in {seconds:.0f} s")
    return html


def _needed(what: str) -> None:
    """Skip without ``what`` (fail instead with COURSE_REQUIRE_BROWSER=1, as tests/tools/test_book.py
    does)."""
    msg = f"{what} is needed for the widget pages' browser test"
    if os.environ.get("COURSE_REQUIRE_BROWSER") == "1":
        pytest.fail(msg)
    pytest.skip(msg)


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # pragma: no cover
        _needed("playwright")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        _needed("headless Chromium (Debian package 'chromium')")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


class Opened:
    """A page opened from file:// with every other request refused, and what went wrong."""

    def __init__(self, browser, path, ready: str):
        self.page = browser.new_page()
        self.problems: list[str] = []
        self.page.route(
            "**/*",
            lambda r: (
                r.continue_()
                if r.request.url.startswith("file://")
                else (self.problems.append(f"blocked {r.request.url}"), r.abort())
            ),
        )
        self.page.on("console", lambda m: m.type == "error" and self.problems.append(f"console: {m.text}"))
        self.page.on("pageerror", self._page_error)
        self.page.on("requestfailed", lambda r: self.problems.append(f"failed: {r.url}"))
        t0 = time.perf_counter()
        self.page.goto(path.as_uri())
        self.page.wait_for_selector(ready, timeout=30000)
        self.load_s = time.perf_counter() - t0
        print(f"\n{path.name}: widget live {self.load_s:.2f} s after opening")

    def _page_error(self, e) -> None:
        # Jupyter Book 1 writes sphinx-thebe's one-line config script twice into every page
        # (the theme's, not the widgets': the second `const THEBE_JS_URL` throws); known and
        # harmless here (no thebe launch button), so it is the one page error let through.
        if "THEBE_JS_URL" not in str(e):
            self.problems.append(f"page error: {e}")

    def text(self, selector: str) -> str:
        return self.page.inner_text(selector)

    def close(self):
        self.page.unroute_all(behavior="ignoreErrors")
        self.page.close()


def set_range(page, selector: str, value) -> None:
    """Move a range input as a drag would (its value, then an ``input`` event)."""
    page.eval_on_selector(
        selector, f"s => {{ s.value = '{value}'; s.dispatchEvent(new Event('input', {{bubbles: true}})); }}"
    )


def page_state(html_file):
    """The widget state the page embeds, and its size in bytes."""
    text = html_file.read_text()
    m = re.search(r'<script type="application/vnd.jupyter.widget-state\+json">(.*?)</script>', text, re.S)
    assert m, f"{html_file.name} embeds no widget state"
    return json.loads(m.group(1)), len(m.group(1).encode())


def grid_codes(page, name: str, n: int) -> np.ndarray:
    cells = page.evaluate(
        f"Array.from(document.querySelectorAll('.course-w-{name} td')).map(td => "
        "[+td.dataset.i, +td.dataset.j, +td.dataset.code])"
    )
    codes = np.full((n, n), -1)
    for i, j, c in cells:
        codes[i, j] = c
    return codes


def expected_codes(view) -> tuple[np.ndarray, np.ndarray]:
    content = np.where(view.content, VISIBLE, 0)
    content[np.eye(view.n, dtype=bool) & view.content] = ITSELF
    return content, np.where(view.query, VISIBLE, 0)


def step_rows(page) -> list[list[str]]:
    return page.evaluate(
        "Array.from(document.querySelectorAll('.course-w-steps tr')).slice(1).map(r => "
        "Array.from(r.cells).map(c => c.textContent))"
    )


def test_page_weight_within_budget(pages):
    for name in wp.PAGES:
        state, size = page_state(pages / f"{name}.html")
        print(f"{name}: widget state {size:,} bytes")
        assert size <= PAGE_BUDGET, f"{name}: {size:,} bytes of widget state, over {PAGE_BUDGET:,}"
        assert any(s["state"].get("_esm") for s in state["state"].values()), "no anywidget in the page"


def test_permutation_widget_is_live(pages, browser):
    w = wp.permutation_demo()
    model, ids, n = w.model, w.ids, w.n
    o = Opened(browser, pages / "permutation.html", ".course-w-permutation .course-w-steps")
    page = o.page

    def check(order, with_probs: bool):
        view = permutation_view(wp.PERM_TOKENS, order)
        content, query = expected_codes(view)
        assert np.array_equal(grid_codes(page, "content", n), content), order
        assert np.array_equal(grid_codes(page, "query", n), query), order
        assert page.input_value(".course-w-order") == " ".join(str(i + 1) for i in order)
        rows = step_rows(page)
        expected = [r.split("\t") for r in _rows_text(view)]
        assert [r[:3] for r in rows] == expected
        summary = o.text(".course-w-summary")
        if with_probs:
            fp = factorised_probabilities(model, ids, order)
            assert [float(r[3]) for r in rows] == pytest.approx(fp.probabilities, abs=1.5e-4)
            assert (
                f"log {fp.log_prob:.4f}" in summary
                or abs(float(summary.split("log ")[1][:-1]) - fp.log_prob) < 2e-4
            )
            assert page.locator(".course-w-needs-kernel").count() == 0
        else:
            assert len(rows[0]) == 3 and "run the notebook" in o.text(".course-w-needs-kernel")
        assert summary.startswith(
            f"order {' -> '.join(str(i + 1) for i in order)} (positions counted from 1)"
        )

    check(wp.PERM_ORDER, True)  # the starting order, as precomputed
    for k in range(1, wp.N_SAMPLES + 2):  # "sample" walks through the sampled orders, then wraps
        page.click(".course-w-sample")
        from course_lib.objectives import sample_orders

        check(sample_orders([n], (k - 1) % wp.N_SAMPLES + 1)[0].tolist(), True)
    page.click(".course-w-ltr")
    check(list(range(n)), True)
    page.fill(".course-w-order", "6 5 4 3 2 1")  # typed: masks and table in the page, no probabilities
    page.press(".course-w-order", "Enter")
    check(list(range(n))[::-1], False)
    page.fill(".course-w-order", "3, 2 -> 4 1 6 5")
    page.press(".course-w-order", "Enter")
    check([2, 1, 3, 0, 5, 4], False)
    # sorting by the order: rows and columns follow it; the cells are the same
    page.check(".course-w-sort")
    rows = page.evaluate(
        "Array.from(document.querySelectorAll('.course-w-content tr')).slice(1)"
        ".map(r => r.cells[0].textContent)"
    )
    assert rows == [f"{i + 1} {wp.PERM_TOKENS[i]}" for i in [2, 1, 3, 0, 5, 4]]
    check([2, 1, 3, 0, 5, 4], False)
    # a bad order: the message Python gives, the last good order stays
    from course_lib.widgets.permutation import parse_order

    for bad in ("3 3 4 1 6 5", "1 2 9", "a b", ""):
        with pytest.raises(ValueError) as info:
            parse_order(bad, n)
        page.fill(".course-w-order", bad)
        page.press(".course-w-order", "Enter")
        assert o.text(".course-w-permutation .course-w-message") == str(info.value).replace('"', "'")
    assert o.problems == [], o.problems
    assert o.load_s < 20
    o.close()


def _rows_text(view) -> list[str]:
    out = []
    for t, i in enumerate(view.order):
        ctx = view.context[i]
        seen = " ".join(view.tokens[j] for j in ctx) if ctx else "(nothing)"
        out.append(f"{t + 1}\t{view.label(i)}\t{seen}")
    return out


def test_temperature_widget_is_live(pages, browser):
    w = wp.temperature_demo()
    o = Opened(browser, pages / "temperature.html", ".course-w-temperature .course-w-soft")
    page = o.page

    def check(t: float):
        ref = softened_view(wp.TEMP_LOGITS, wp.TEMP_LABELS, temperatures=[t], true_index=1)
        cells = page.evaluate(
            "Array.from(document.querySelectorAll('.course-w-soft tr')[1].cells).map(c => c.textContent)"
        )
        assert cells[0] == f"T = {t:g}"
        assert [float(x) for x in cells[1:-1]] == pytest.approx(ref.probs[0].tolist(), abs=1.01e-3)
        assert float(cells[-1]) == pytest.approx(float(ref.entropy[0]), abs=0.0101)
        w.set_temperature(t)
        assert o.text(".course-w-temperature .course-w-summary") == w.summary()

    check(1.0)
    page.fill(".course-w-t", "4")
    page.press(".course-w-t", "Enter")
    check(4.0)
    # the slider (log10 T): move it to its right end, T = 10^1.5
    set_range(page, ".course-w-slider", "1.5")
    check(float(np.float64(10) ** 1.5))
    page.fill(".course-w-t", "-1")
    page.press(".course-w-t", "Enter")
    assert "positive" in o.text(".course-w-temperature .course-w-message")
    assert o.problems == [], o.problems
    o.close()


def test_masking_widget_is_live(pages, browser):
    w = wp.masking_demo()
    o = Opened(browser, pages / "masking.html", ".course-w-masking .course-w-draw")
    page = o.page

    def check(text: str, rate: float, seed: int):
        ref = type(w)(w.model, w.tokenizer, text=text, mlm_probability=rate, seed=seed, k=w.k).draw()
        rows = page.evaluate(
            "Array.from(document.querySelectorAll('.course-w-draw tr')).slice(1).map(r => "
            "Array.from(r.cells).map(c => c.textContent))"
        )
        expected = [
            [
                r.token,
                "yes" if r.chosen else "",
                r.action,
                r.shown,
                ", ".join(f"{t} {p:.2f}" for t, p in r.predictions),
            ]
            for r in ref.rows
        ]
        assert rows == expected, (text, rate, seed)
        assert o.text(".course-w-masking .course-w-summary") == ref.to_text().splitlines()[-1]

    check(wp.MASK_TEXTS[0], 0.3, 0)
    seen = set()
    for k in range(1, wp.MASK_SEEDS + 1):  # redraw: the next seed, then back to the first
        page.click(".course-w-redraw")
        check(wp.MASK_TEXTS[0], 0.3, k % wp.MASK_SEEDS)
        seen.add(o.text(".course-w-draw"))
    assert len(seen) > 1, "redraw never changed the draw"
    for rate in (1.0, 0.0, 0.65):  # the slider (an index into the rates 0, 0.05, ..., 1)
        set_range(page, ".course-w-rate", round(rate / 0.05))
        check(wp.MASK_TEXTS[0], rate, 0)
    page.select_option(".course-w-sentence", "1")  # another precomputed sentence
    check(wp.MASK_TEXTS[1], 0.65, 0)
    page.click(".course-w-redraw")
    check(wp.MASK_TEXTS[1], 0.65, 1)
    page.fill(".course-w-typed", "My own sentence.")  # needs the model: the page says so
    page.press(".course-w-typed", "Enter")
    assert "run the notebook" in o.text(".course-w-masking .course-w-message")
    assert o.problems == [], o.problems
    o.close()


def test_attention_widget_is_live(pages, browser):
    ex = wp.attention_demo()
    o = Opened(browser, pages / "attention.html", ".course-w-attention .course-w-map")
    page = o.page

    def check(kind: str, layer: int, head: int, t: float = 1.0):
        m = ex.matrix(kind, layer, head, t)
        cells = page.evaluate(
            "Array.from(document.querySelectorAll('.course-w-map td')).map(td => "
            "[+td.dataset.q, +td.dataset.k, +td.dataset.v])"
        )
        shown = np.zeros_like(m)
        for q, k, v in cells:
            shown[q, k] = v
        assert len(cells) == m.size and np.allclose(shown, m, atol=5e-4), (kind, layer, head, t)

    check("encoder", 0, 0)
    set_range(page, ".course-w-head", 1)
    check("encoder", 0, 1)
    set_range(page, ".course-w-layer", 1)
    check("encoder", 1, 1)
    set_range(page, ".course-w-temp", "-0.3")  # T = 10^-0.3: sharper
    check("encoder", 1, 1, 10**-0.3)
    page.select_option(".course-w-kind", "decoder")
    set_range(page, ".course-w-layer", 2)
    check("decoder", 2, 1, 10**-0.3)
    assert page.eval_on_selector(".course-w-layer", "s => s.max") == "2"
    set_range(page, ".course-w-temp", "0")
    set_range(page, ".course-w-head", 0)
    check("decoder", 2, 0)
    assert o.problems == [], o.problems
    o.close()


def test_parameter_counter_is_live(pages, browser):
    from course_lib.widgets import ParameterCounter
    from course_lib.widgets.parameters import PRESETS

    o = Opened(browser, pages / "parameters.html", ".course-w-parameters .course-w-counts")
    page = o.page

    def check(report):
        rows = page.evaluate(
            "Array.from(document.querySelectorAll('.course-w-counts tr')).slice(1).map(r => "
            "Array.from(r.cells).map(c => c.textContent.trim()))"
        )
        expected = []
        for part, n, share, ref in report.rows():
            label = report._label(part)
            expected.append([label, f"{n:,}", f"{share:.1%}"] + ([f"{ref:,}"] if ref is not None else []))
        assert [[r[0].lstrip("■ ")] + r[1:] for r in rows] == expected
        assert o.text(".course-w-parameters .course-w-summary") == report.summary()
        assert o.text(".course-w-parameters .course-w-message") == ""

    def set_value(name: str, value) -> None:
        page.fill(f".course-w-{name}", str(value))
        page.press(f".course-w-{name}", "Enter")

    counter = ParameterCounter("ALBERT-base")
    check(counter.report())
    page.select_option(".course-w-sharing", "ffn")
    check(counter.update(sharing="ffn"))
    set_value("hidden_size", 770)  # 12 heads do not divide 770: Python's message
    with pytest.raises(ValueError) as info:
        counter.update(hidden_size=770)
    assert o.text(".course-w-parameters .course-w-message") == str(info.value)
    set_value("num_attention_heads", 10)
    check(counter.update(hidden_size=770, num_attention_heads=10))
    for preset in PRESETS:  # every published size
        page.select_option(".course-w-preset", preset)
        check(ParameterCounter(preset).report())
    page.select_option(".course-w-model", "ALBERT")  # BERT-xxlarge sizes as an ALBERT
    check(ParameterCounter("ALBERT-xxlarge").report())
    page.select_option(".course-w-heads", "pretraining")
    page.uncheck(".course-w-pooler")
    assert "pooler" in o.text(".course-w-parameters .course-w-message")
    page.check(".course-w-pooler")
    check(ParameterCounter("ALBERT-xxlarge", heads="pretraining").report())
    assert o.problems == [], o.problems
    o.close()


def test_one_action_changes_every_widget(pages, browser):
    """What the whole book's browser test (tests/tools/test_book.py) does on each chapter."""
    for name in wp.PAGES:
        o = Opened(browser, pages / f"{name}.html", ".course-w")
        assert wp.poke_widgets(o.page) == [(name, True)]
        assert o.problems == [], o.problems
        o.close()
