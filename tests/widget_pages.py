"""A tiny Jupyter Book with one page per course widget, built with the course's offline assets.

The browser test (``tests/widgets/test_widget_pages.py``) opens these pages from ``file://`` with the
network refused and drives the widgets. Building the whole book takes an hour of chapters;
this book has the same ``_config.yml`` (theme options, vendored MathJax, RequireJS, ipywidgets
HTML manager and anywidget front end), and pages whose only cell builds a widget from small
fake data with the functions below. The test calls the same functions to get the Python
objects whose results the pages must show.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent

PERM_TOKENS = ["New", "York", "is", "a", "big", "city"]
PERM_IDS = [5, 17, 2, 9, 21, 11]
PERM_ORDER = [2, 0, 1, 4, 3, 5]  # 0-based: the page starts on it (its probabilities precomputed)
N_SAMPLES = 4

TEMP_LABELS = ["cat", "dog", "car", "truck", "cow"]
TEMP_LOGITS = [1.0, 6.0, -2.0, -1.0, 3.0]


def tiny_xlnet(seed: int = 0):
    """A 2-layer XLNet with large random weights (predictions that depend on the context)."""
    from course_lib.models.xlnet import XLNetConfig, XLNetLMHeadModel

    torch.manual_seed(seed)
    model = XLNetLMHeadModel(
        XLNetConfig(vocab_size=32, d_model=16, n_layer=2, n_head=2, d_inner=32, dropout=0.0)
    )
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g) * 0.5
            p.copy_(1 + noise if "norm.weight" in name else noise)
    return model.eval()


def permutation_demo():
    from course_lib.widgets import PermutationWidget

    return PermutationWidget(PERM_TOKENS, model=tiny_xlnet(), ids=PERM_IDS, order=PERM_ORDER)


def temperature_demo():
    from course_lib.widgets import TemperatureWidget

    return TemperatureWidget(TEMP_LOGITS, TEMP_LABELS, true_index=1, temperature=1.0)


MASK_TEXTS = ["The cat sleeps on the mat.", "A dog barks at the old house."]
MASK_SEEDS = 3


def tiny_bert():
    """A WordPiece tokenizer of 400 tokens and a 2-layer random BERT over it."""
    from course_lib.data import generate_documents, train_wordpiece
    from course_lib.models.bert import BertConfig, BertForMaskedLM

    tok = train_wordpiece(generate_documents(40, seed=1), vocab_size=400)
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        num_attention_heads=2,
        num_hidden_layers=2,
        intermediate_size=64,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return BertForMaskedLM(cfg).eval(), tok


def masking_demo():
    from course_lib.widgets import MaskingWidget

    model, tok = tiny_bert()
    return MaskingWidget(model, tok, text=MASK_TEXTS[0], mlm_probability=0.3, seed=0, k=3)


def attention_demo():
    """Two kinds of attention with random weights (rows that sum to 1, the decoder's causal)."""
    from course_lib.widgets import AttentionExplorer

    g = torch.Generator().manual_seed(0)
    enc = [torch.softmax(torch.randn(2, 4, 4, generator=g) * 2, -1) for _ in range(2)]
    causal = torch.ones(3, 3).tril().bool()
    dec = [
        torch.softmax((torch.randn(2, 3, 3, generator=g) * 2).masked_fill(~causal, -1e9), -1)
        for _ in range(3)
    ]
    labels = {"encoder": (["a", "b", "c", "d"],) * 2, "decoder": (["<s>", "x", "y"],) * 2}
    return AttentionExplorer({"encoder": enc, "decoder": dec}, labels)


from course_lib.widgets import ParameterCounter  # noqa: E402, F401  (the parameters page uses it)

# page name -> the code of its one cell
PAGES = {
    "permutation": f"permutation_demo().widget(n_samples={N_SAMPLES})",
    "temperature": "temperature_demo().widget()",
    "masking": f"masking_demo().widget(texts={MASK_TEXTS[1:]!r}, n_seeds={MASK_SEEDS})",
    "attention": "attention_demo().widget()",
    "parameters": 'ParameterCounter("ALBERT-base").widget()',
}


def write_book(folder: Path, vendor: Path) -> None:
    """The book's sources in ``folder``: the course's ``_config.yml`` (assets pointed at
    ``vendor``), a table of contents, an index page and one notebook per widget."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    config["title"] = "widget pages"
    config["execute"] = {**config.get("execute", {}), "execute_notebooks": "force"}
    config["exclude_patterns"] = ["_build", "**.ipynb_checkpoints"]
    config["sphinx"]["config"]["html_extra_path"] = [str(vendor)]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    (folder / "_toc.yml").write_text(
        "format: jb-book\nroot: index\nchapters:\n" + "".join(f"  - file: {name}\n" for name in PAGES)
    )
    (folder / "index.md").write_text("# Widget pages\n\nOne page per course widget.\n")
    setup = f"import sys\nsys.path.insert(0, {str(HERE)!r})\nfrom widget_pages import *"
    for name, code in PAGES.items():
        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nb.cells = [
            nbformat.v4.new_markdown_cell(f"# The {name} widget"),
            nbformat.v4.new_code_cell(setup),
            nbformat.v4.new_code_cell(code),
        ]
        nbformat.write(nb, folder / f"{name}.ipynb")


def build(folder: Path) -> tuple[Path, float]:
    """Write and build the book in ``folder`` (the course's assets fetched into its
    ``_build/vendor`` first); return the HTML folder and the build's seconds."""
    from course_lib.tools.book import fetch_assets

    vendor = fetch_assets(ROOT / "_build" / "vendor", quiet=True)
    write_book(folder, vendor)
    exe = Path(sys.executable).parent / "jupyter-book"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("MPLBACKEND", None)
    t0 = time.perf_counter()
    shutil.rmtree(folder / "_build", ignore_errors=True)
    out = subprocess.run(
        [str(exe) if exe.exists() else "jupyter-book", "build", str(folder), "-W", "--keep-going"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise RuntimeError(f"the widget pages did not build:\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}")
    return folder / "_build" / "html", time.perf_counter() - t0


if __name__ == "__main__":  # python tests/widget_pages.py /tmp/widget-book: build and print the index
    html, seconds = build(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/widget-book"))
    print(f"built in {seconds:.0f} s: file://{html / 'index.html'}")


# ---------------------------------------------------------------------------------------
# One action per widget, for any page (the chapters' too: tests/tools/test_book.py)
# ---------------------------------------------------------------------------------------

_SET_RANGE = "s => { s.value = s.max; s.dispatchEvent(new Event('input', {bubbles: true})); }"
_SET_RANGE_MIN = "s => { s.value = s.min; s.dispatchEvent(new Event('input', {bubbles: true})); }"


def _act(page, w, kind: str) -> None:
    if kind == "permutation":
        w.locator(".course-w-ltr").click()
        w.locator(".course-w-sample").click()
    elif kind == "masking":
        w.locator(".course-w-rate").evaluate(_SET_RANGE)  # every token chosen
        w.locator(".course-w-redraw").click()
    elif kind == "temperature":
        w.locator(".course-w-slider").evaluate(_SET_RANGE)  # T = 10^1.5: much flatter
    elif kind == "attention":
        w.locator(".course-w-temp").evaluate(_SET_RANGE_MIN)  # T = 0.1: much sharper
    elif kind == "parameters":
        w.locator(".course-w-num_hidden_layers").fill("3")
        w.locator(".course-w-num_hidden_layers").press("Enter")
    else:
        raise ValueError(f"no action for widget kind {kind!r}")


def poke_widgets(page) -> list[tuple[str, bool]]:
    """Each course widget on ``page``: its kind and whether one action on its controls (a
    sampled order, a masking rate, a temperature, a layer count) changed what it shows."""
    out = []
    widgets = page.locator(".course-w")
    for k in range(widgets.count()):
        w = widgets.nth(k)
        cls = w.get_attribute("class") or ""
        kind = next(c[len("course-w-") :] for c in cls.split() if c.startswith("course-w-"))
        w.scroll_into_view_if_needed()
        before = w.locator(".course-w-out, .course-w-table, .course-w-grids").evaluate_all(
            "els => els.map(e => e.innerHTML).join('|')"
        )
        _act(page, w, kind)
        after = w.locator(".course-w-out, .course-w-table, .course-w-grids").evaluate_all(
            "els => els.map(e => e.innerHTML).join('|')"
        )
        out.append((kind, bool(before) and before != after))
    return out
