"""The course's widgets in a real Jupyter front end with a kernel: JupyterLab, headless Chromium.

The static book's browser test (``tests/widgets/test_widget_pages.py``) shows that every widget is live
without a kernel. This one checks the other half of the promise: opening the notebook in
JupyterLab and running it gives the same widgets, from the same code, and what the page cannot
do alone (an order's probabilities that were not precomputed, a sentence the reader types) is
computed by the kernel on request. It starts a JupyterLab server on a free local port with a
token and a kernel running this interpreter (this checkout's ``course_lib`` on its path), opens
a notebook whose cells build each widget with the builders of ``tests/widget_pages.py`` (the
classes and ``.widget()`` calls the chapters use, on small models), runs it through the
"Run > Run All Cells" menu, then drives each widget's controls and compares what the page shows
with the Python reference; the kernel-side round trips are read back from the kernel itself.

JupyterLab is not one of the course's dependencies: ``make test-jupyter`` installs it into the
build environment and runs this module; without it the module is skipped. With JupyterLab in
another environment, ``COURSE_JUPYTER_LAB=/path/to/jupyter-lab`` names its executable (its
server finds this environment's widget extensions through ``JUPYTER_PATH``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import numpy as np
import pytest
import widget_pages as wp
from test_widget_pages import expected_codes, grid_codes, set_range, step_rows

from course_lib.widgets import factorised_probabilities, permutation_view, softened_view

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parents[1]  # tests/: widget_pages.py lives there
ROOT = HERE.parent
KERNEL = "course-widgets"
TYPED_ORDER = [5, 4, 3, 2, 1, 0]  # 0-based; not among the precomputed orders
TYPED_SENTENCE = "My own sentence is here."

# name -> the cell that builds and shows the widget (the chapters' classes and .widget() calls)
CELLS = {
    "pw": f"pw = wp.permutation_demo().widget(n_samples={wp.N_SAMPLES})\npw",
    "tw": "tw = wp.temperature_demo().widget()\ntw",
    "mw": f"mw = wp.masking_demo().widget(texts={wp.MASK_TEXTS[1:]!r}, n_seeds={wp.MASK_SEEDS})\nmw",
    "aw": "aw = wp.attention_demo().widget()\naw",
    "cw": 'cw = ParameterCounter("ALBERT-base").widget()\ncw',
}


def _needed(what: str) -> None:
    """Skip without ``what``; fail instead under ``make test-jupyter`` (COURSE_REQUIRE_BROWSER=1)."""
    msg = f"{what} is needed for the widgets' JupyterLab test"
    if os.environ.get("COURSE_REQUIRE_BROWSER") == "1":
        pytest.fail(msg)
    pytest.skip(msg)


def _lab_command() -> list[str]:
    exe = os.environ.get("COURSE_JUPYTER_LAB", "").strip()
    if exe:
        if not Path(exe).is_file():
            pytest.fail(f"COURSE_JUPYTER_LAB={exe} is not a file (give the path of a jupyter-lab executable)")
        return [exe]
    if importlib.util.find_spec("jupyterlab") is None:
        # a skip even with COURSE_REQUIRE_BROWSER=1: JupyterLab is no course dependency
        pytest.skip(
            "JupyterLab is not installed here (`make test-jupyter` installs it and runs this test; "
            "or set COURSE_JUPYTER_LAB to a jupyter-lab executable)"
        )
    return [sys.executable, "-m", "jupyterlab"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_notebook(path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": "course widgets", "language": "python"}
    setup = (
        f"import sys\nsys.path.insert(0, {str(HERE)!r})\n"
        "import widget_pages as wp\nfrom course_lib.widgets import ParameterCounter"
    )
    nb.cells = [nbformat.v4.new_code_cell(setup)] + [nbformat.v4.new_code_cell(c) for c in CELLS.values()]
    nbformat.write(nb, path)


class Lab:
    """A JupyterLab server in a temporary home (its own kernelspec, settings and runtime folder)."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.port, self.token = _free_port(), secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        share = tmp / "share"
        spec = share / "kernels" / KERNEL
        spec.mkdir(parents=True)
        pythonpath = os.pathsep.join(p for p in [str(ROOT), str(HERE), os.environ.get("PYTHONPATH", "")] if p)
        (spec / "kernel.json").write_text(
            json.dumps(
                {
                    "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                    "display_name": "course widgets",
                    "language": "python",
                    "env": {"PYTHONPATH": pythonpath, "OMP_NUM_THREADS": "1"},
                }
            )
        )
        settings = tmp / "lab-settings"
        # every cell stays in the page (no virtual scrolling); no news fetched
        for plugin, values in {
            "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
            "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
        }.items():
            f = settings / f"{plugin}.jupyterlab-settings"
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(json.dumps(values))
        self.runtime = tmp / "runtime"
        self.notebooks = tmp / "notebooks"
        self.notebooks.mkdir()
        _write_notebook(self.notebooks / "widgets.ipynb")
        env = {
            **os.environ,
            # this environment's share/jupyter: the ipywidgets and anywidget lab extensions
            "JUPYTER_PATH": os.pathsep.join([str(share), str(Path(sys.prefix) / "share" / "jupyter")]),
            "JUPYTER_CONFIG_DIR": str(tmp / "config"),
            "JUPYTER_RUNTIME_DIR": str(self.runtime),
            "JUPYTERLAB_SETTINGS_DIR": str(settings),
            "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "workspaces"),
            "PYDEVD_DISABLE_FILE_VALIDATION": "1",
        }
        self.log = open(tmp / "lab.log", "w")  # closed in stop()
        self.proc = subprocess.Popen(
            [
                *_lab_command(),
                "--no-browser",
                "--ip=127.0.0.1",
                f"--port={self.port}",
                "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={self.token}",
                f"--ServerApp.root_dir={self.notebooks}",
                "--LabApp.news_url=",
                *(["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []),
            ],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.time() + 90
        while True:
            try:
                self.api("status")
                break
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    self.stop()
                    pytest.fail(f"JupyterLab did not start:\n{self.log_text()[-3000:]}")
                time.sleep(0.5)

    def api(self, path: str):
        req = urllib.request.Request(
            f"{self.url}/api/{path}", headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.loads(r.read())

    def log_text(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return (self.tmp / "lab.log").read_text()

    def kernel_client(self):
        """A client of the kernel the notebook runs in (the server's only session)."""
        from jupyter_client import BlockingKernelClient

        sessions = self.api("sessions")
        assert len(sessions) == 1, sessions
        assert sessions[0]["kernel"]["name"] == KERNEL
        client = BlockingKernelClient(
            connection_file=str(self.runtime / f"kernel-{sessions[0]['kernel']['id']}.json")
        )
        client.load_connection_file()
        client.start_channels()
        client.wait_for_ready(timeout=30)
        return client

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def kernel_value(client, expression: str):
    """``expression`` evaluated in the notebook's kernel (a JSON-able value)."""
    out: list[str] = []

    def hook(msg):
        if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
            out.append(msg["content"]["text"])

    reply = client.execute_interactive(
        f"import json as _j; print(_j.dumps({expression}))", output_hook=hook, timeout=60, store_history=False
    )
    assert reply["content"]["status"] == "ok", reply["content"]
    return json.loads("".join(out))


def type_into(page, selector: str, text: str) -> None:
    """Type ``text`` into a widget's box key by key and press Enter, as a reader does (every
    key passes where JupyterLab's command-mode shortcuts could catch it)."""
    box = page.locator(selector)
    box.click()
    box.press("Control+A")
    box.press("Backspace")
    box.press_sequentially(text)
    box.press("Enter")


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


class Session:
    def __init__(self, lab: Lab, page, problems: list[str], kernel, run_s: float):
        self.lab, self.page, self.problems, self.kernel, self.run_s = lab, page, problems, kernel, run_s

    def widget(self, kind: str):
        return self.page.locator(f".course-w-{kind}")

    def wait_text(self, selector: str, predicate, what: str, timeout: float = 60.0) -> str:
        """Wait for the text of ``selector`` to satisfy ``predicate`` (a kernel's answer arriving)."""
        deadline = time.time() + timeout
        while True:
            loc = self.page.locator(selector)
            text = loc.first.inner_text() if loc.count() else ""
            if predicate(text):
                return text
            if time.time() > deadline:
                raise AssertionError(
                    f"{what}: still {text!r} after {timeout:.0f} s\n{self.lab.log_text()[-2000:]}"
                )
            self.page.wait_for_timeout(250)


@pytest.fixture(scope="module")
def lab(tmp_path_factory, request):
    """The notebook opened in JupyterLab and run with "Run All Cells"; every widget displayed."""
    command = _lab_command()  # skips before anything starts when JupyterLab is missing
    browser = request.getfixturevalue("browser")
    server = Lab(tmp_path_factory.mktemp("jupyterlab"))
    print(f"\nJupyterLab: {' '.join(command)} on {server.url}")
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    problems: list[str] = []
    page.route(
        "**/*",
        lambda r: (
            r.continue_()
            if r.request.url.startswith(server.url)
            else (problems.append(f"blocked {r.request.url}"), r.abort())
        ),
    )
    page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    client = None
    try:
        page.goto(f"{server.url}/lab/tree/widgets.ipynb?token={server.token}")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120000)
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120000)
        t0 = time.perf_counter()
        # "Run > Run All Cells", as a reader does; a click before the kernel's session is wired
        # up in the page runs nothing, so it is repeated until the first cell has started
        for _attempt in range(4):
            page.wait_for_function(
                "Array.from(document.querySelectorAll('.jp-StatusBar-TextItem'))"
                ".some(e => e.textContent.includes('Idle'))",
                timeout=120000,
            )
            page.locator(".jp-Cell .jp-InputPrompt").first.click()  # the notebook has the focus
            page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
            page.locator(".lm-Menu-item[data-command='runmenu:run-all']").click()  # "Run All Cells"
            try:
                page.wait_for_function(
                    "!document.querySelector('.jp-Cell .jp-InputPrompt').textContent.includes('[ ]')",
                    timeout=15000,
                )
                break
            except Exception:
                page.keyboard.press("Escape")
        try:
            page.wait_for_function(
                f"document.querySelectorAll('.course-w').length >= {len(CELLS)}", timeout=240000
            )
        except Exception:
            outputs = page.evaluate(
                "Array.from(document.querySelectorAll('.jp-Cell')).map(c => c.innerText.slice(0, 600))"
            )
            page.screenshot(path=str(server.tmp / "page.png"), full_page=True)
            pytest.fail(
                f"the widgets did not appear after 'Run All Cells' ({server.tmp / 'page.png'}):\n"
                + "\n---\n".join(outputs)
                + "\npage messages:\n"
                + "\n".join(problems)
                + f"\nserver log:\n{server.log_text()[-3000:]}"
            )
        run_s = time.perf_counter() - t0
        print(f'"Run All Cells" clicked {_attempt + 1} time(s)')
        print(f"run all: {len(CELLS)} widgets shown {run_s:.1f} s after 'Run All Cells'")
        client = server.kernel_client()
        yield Session(server, page, problems, client, run_s)
    finally:
        if client is not None:
            client.stop_channels()
        page.unroute_all(behavior="ignoreErrors")
        page.close()
        server.stop()


def widget_problems(problems: list[str]) -> list[str]:
    """What went wrong in the page because of the course's widgets (JupyterLab's own start-up
    messages, e.g. a missing optional server extension, are printed, not failed on)."""
    return [p for p in problems if p.startswith(("page error", "blocked")) or "widget" in p.lower()]


def test_every_widget_renders_in_jupyterlab(lab):
    kinds = lab.page.evaluate(
        "Array.from(document.querySelectorAll('.jp-OutputArea .course-w')).map(e => e.className)"
    )
    assert sorted(k.split()[1] for k in kinds) == sorted(
        [
            "course-w-permutation",
            "course-w-temperature",
            "course-w-masking",
            "course-w-attention",
            "course-w-parameters",
        ]
    )
    # each is the kernel's widget: a live model, not a static snapshot
    assert kernel_value(lab.kernel, "[type(w).__name__ for w in (pw, tw, mw, aw, cw)]") == ["LiveWidget"] * 5
    assert lab.run_s < 240


def test_permutation_widget_with_a_kernel(lab):
    page = lab.page
    w = wp.permutation_demo()
    n = w.n

    def check(order, probs: bool):
        view = permutation_view(wp.PERM_TOKENS, order)
        content, query = expected_codes(view)
        assert np.array_equal(grid_codes(page, "content", n), content), order
        assert np.array_equal(grid_codes(page, "query", n), query), order
        assert page.input_value(".course-w-order") == " ".join(str(i + 1) for i in order)
        rows = step_rows(page)
        assert [r[1] for r in rows] == [view.label(i) for i in order]
        if probs:
            fp = factorised_probabilities(w.model, w.ids, order)
            assert [float(r[3]) for r in rows] == pytest.approx(fp.probabilities, abs=1.5e-4), order

    check(wp.PERM_ORDER, True)
    page.click(".course-w-sample")
    from course_lib.objectives import sample_orders

    check(sample_orders([n], 1)[0].tolist(), True)
    page.click(".course-w-ltr")
    check(list(range(n)), True)
    # an order the page does not hold: the masks at once, the probabilities from the kernel
    type_into(page, ".course-w-order", " ".join(str(i + 1) for i in TYPED_ORDER))
    lab.wait_text(
        ".course-w-steps tr:nth-child(2)", lambda t: t.count("\t") >= 3, "the kernel's probabilities"
    )
    check(TYPED_ORDER, True)
    assert page.locator(".course-w-needs-kernel").count() == 0
    # the request reached the Python widget, whose answer is in its synced trait `extra`
    extra = kernel_value(lab.kernel, "pw.extra")
    key = " ".join(map(str, TYPED_ORDER))
    assert list(extra) == [key]
    fp = factorised_probabilities(w.model, w.ids, TYPED_ORDER)
    assert extra[key]["log_probs"] == pytest.approx(fp.log_probs.tolist(), abs=1e-5)
    # a bad order: Python's message in the page, nothing asked of the kernel
    type_into(page, ".course-w-order", "1 2 9")
    assert "out of range" in page.inner_text(".course-w-permutation .course-w-message")
    assert list(kernel_value(lab.kernel, "pw.extra")) == [key]


def test_temperature_widget_with_a_kernel(lab):
    page = lab.page

    def check(t: float):
        ref = softened_view(wp.TEMP_LOGITS, wp.TEMP_LABELS, temperatures=[t], true_index=1)
        cells = page.evaluate(
            "Array.from(document.querySelectorAll('.course-w-soft tr')[1].cells).map(c => c.textContent)"
        )
        assert cells[0] == f"T = {t:g}"
        assert [float(x) for x in cells[1:-1]] == pytest.approx(ref.probs[0].tolist(), abs=1.01e-3)
        assert float(cells[-1]) == pytest.approx(float(ref.entropy[0]), abs=0.0101)

    check(1.0)
    set_range(page, ".course-w-slider", "1.5")  # T = 10^1.5
    check(float(np.float64(10) ** 1.5))
    type_into(page, ".course-w-t", "4")
    check(4.0)


def test_masking_widget_with_a_kernel(lab):
    page = lab.page
    w = wp.masking_demo()

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

    check(wp.MASK_TEXTS[0], 0.3, 0)
    page.click(".course-w-redraw")
    check(wp.MASK_TEXTS[0], 0.3, 1)
    set_range(page, ".course-w-rate", round(0.65 / 0.05))
    check(wp.MASK_TEXTS[0], 0.65, 1)
    # a typed sentence: drawn by the kernel, then in the menu like the precomputed ones
    type_into(page, ".course-w-typed", TYPED_SENTENCE)
    lab.wait_text(
        ".course-w-sentence option:checked",
        lambda t: TYPED_SENTENCE in t,
        "the kernel's draws of a typed sentence",
    )
    check(TYPED_SENTENCE, 0.65, 0)
    page.click(".course-w-redraw")
    check(TYPED_SENTENCE, 0.65, 1)
    assert page.inner_text(".course-w-masking .course-w-message") == ""
    assert list(kernel_value(lab.kernel, "mw.extra")) == [TYPED_SENTENCE]


def test_attention_explorer_with_a_kernel(lab):
    page = lab.page
    ex = wp.attention_demo()

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
    page.select_option(".course-w-kind", "decoder")
    set_range(page, ".course-w-layer", 2)
    set_range(page, ".course-w-temp", "-0.3")
    check("decoder", 2, 1, 10**-0.3)


def test_parameter_counter_with_a_kernel(lab):
    from course_lib.widgets import ParameterCounter

    page = lab.page

    def check(report):
        rows = page.evaluate(
            "Array.from(document.querySelectorAll('.course-w-counts tr')).slice(1).map(r => "
            "Array.from(r.cells).map(c => c.textContent.trim()))"
        )
        expected = []
        for part, n, share, ref in report.rows():
            expected.append(
                [report._label(part), f"{n:,}", f"{share:.1%}"] + ([f"{ref:,}"] if ref is not None else [])
            )
        assert [[r[0].lstrip("■ ")] + r[1:] for r in rows] == expected
        assert page.inner_text(".course-w-parameters .course-w-summary") == report.summary()

    counter = ParameterCounter("ALBERT-base")
    check(counter.report())
    type_into(page, ".course-w-num_hidden_layers", "3")
    check(counter.update(num_hidden_layers=3))
    page.select_option(".course-w-preset", "BERT-large")
    check(ParameterCounter("BERT-large").report())


def test_no_widget_errors_in_jupyterlab(lab):
    """Runs last: nothing the widgets did raised in the page or reached for the network."""
    print("\n".join(["page messages:", *lab.problems]) if lab.problems else "no console errors")
    # no key typed into a widget reached the notebook (a "1" would have made a cell a heading)
    cells = lab.page.evaluate(
        "Array.from(document.querySelectorAll('.jp-Notebook .jp-Cell'))"
        ".map(c => c.classList.contains('jp-CodeCell'))"
    )
    assert cells == [True] * (len(CELLS) + 1), "the notebook's cells changed while typing into the widgets"
    assert widget_problems(lab.problems) == [], lab.problems
