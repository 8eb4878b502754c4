"""The book: notebook hygiene, the table of contents, a strict build, and a real browser.

The build runs once per session (``book_build``); it executes every chapter that the
Jupyter cache does not already hold, and trains (or loads) their models into
``$COURSE_CACHE``. Each chapter runs once: the chapters' own test (every cell runs, every
checked output as stored: what ``pytest --nbval-lax`` decides) reads the executed copies
that the build left in the Jupyter cache instead of executing the chapters again.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from course_lib.tools.book import ASSETS, build_book
from course_lib.tools.notebooks import check_chapter, compare_executed, repository_url

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))


def toc_files() -> list[str]:
    return re.findall(r"file:\s*(\S+)", (ROOT / "_toc.yml").read_text())


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_notebook_hygiene(path):
    """Set-up cell first, outputs stored only where nbval checks them, no widget state; and the
    every-machine rules (course_lib.claims): exact checks only on deterministic cells, measured
    claims as assertions, measured numbers in the prose glued from the run."""
    assert check_chapter(path) == []


def test_toc_lists_exactly_the_chapters_in_order():
    listed = [f for f in toc_files() if re.match(r"book/\d\d_", f)]
    assert listed == [f"book/{p.stem}" for p in CHAPTERS]
    for f in toc_files():
        assert (ROOT / f).with_suffix(".ipynb").exists() or (ROOT / f).with_suffix(".md").exists(), f


def test_repository_url_is_set_in_one_place():
    url = repository_url(ROOT)
    assert url.startswith("https://")
    for nb in CHAPTERS:
        assert url in nb.read_text()  # the install cell uses the same URL as the launch buttons


@pytest.fixture(scope="session")
def book_build() -> int:
    """Build the book with Sphinx warnings as errors (executing the chapters the Jupyter
    cache does not hold); return jupyter-book's exit code."""
    t0 = time.perf_counter()
    rc = build_book(ROOT, strict=True, quiet=True)
    print(f"\nbook build: {time.perf_counter() - t0:.0f} s")
    return rc


@pytest.fixture(scope="session")
def built_book(book_build):
    """The HTML folder of a strict build that succeeded."""
    assert book_build == 0, "jupyter-book build -W failed: see the output above"
    return ROOT / "_build" / "html"


def executed_chapter(path: Path):
    """The build's executed copy of a chapter, from the Jupyter cache (or a failure that says
    why there is none: the traceback of the cell that failed)."""
    import nbformat
    from jupyter_cache import get_cache

    cache = get_cache(ROOT / "_build" / ".jupyter_cache")
    nb = nbformat.read(path, as_version=4)
    try:
        return nb, cache.merge_match_into_notebook(nb)[1]
    except KeyError:
        failed = [r.traceback for r in cache.list_project_records() if Path(r.uri) == path and r.traceback]
        why = f":\n{failed[-1]}" if failed else ""
        pytest.fail(f"the book build did not execute {path.name} to the end{why}")


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_runs_and_its_checked_outputs_are_as_stored(book_build, path):
    """What ``pytest --nbval-lax book/NN.ipynb`` checks, on the build's execution: no cell
    raises (the claims are assertions) and every checked cell prints what is stored."""
    problems = compare_executed(*executed_chapter(path))
    assert not problems, "\n".join(problems)


def test_book_builds_strictly_with_every_page(built_book):
    for f in toc_files():
        assert (built_book / f).with_suffix(".html").exists(), f
    for asset in ASSETS:
        assert (built_book / asset.dest).is_dir(), f"{asset.name} was not copied into the HTML root"


def test_built_pages_load_nothing_from_the_network(built_book):
    for page in built_book.joinpath("book").glob("*.html"):
        html = page.read_text()
        external = re.findall(r'<script[^>]+src="(https?://[^"]+)"', html)
        assert external == [], f"{page.name} loads scripts from the network: {external}"


def test_widget_state_within_the_page_budget(built_book):
    """The widgets' code and precomputed data (draws, probabilities, attention maps) that a
    chapter page embeds stay within the budget of :data:`course_lib.widgets.front.PAGE_BUDGET`."""
    from course_lib.widgets.front import PAGE_BUDGET

    for page in sorted(built_book.joinpath("book").glob("*.html")):
        m = re.search(
            r'<script type="application/vnd.jupyter.widget-state\+json">(.*?)</script>',
            page.read_text(),
            re.S,
        )
        size = len(m.group(1).encode()) if m else 0
        print(f"{page.name}: widget state {size:,} bytes")
        assert size <= PAGE_BUDGET, f"{page.name}: {size:,} bytes of widget state, over {PAGE_BUDGET:,}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def browser():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    required = os.environ.get("COURSE_REQUIRE_BROWSER") == "1"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # pragma: no cover
        sync_playwright = None
    if chromium is None or sync_playwright is None:
        msg = "headless Chromium (Debian package 'chromium') and playwright are needed for the browser test"
        if required:
            pytest.fail(msg)
        pytest.skip(msg + "; `make test` installs Chromium when it runs as root")
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=chromium,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        yield b
        b.close()


@pytest.fixture(scope="session")
def served_book(built_book):
    port = _free_port()
    srv = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            str(port),
            "--directory",
            str(built_book),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    yield base
    srv.terminate()
    srv.wait(timeout=10)


def open_offline(browser, url, *, errors: bool = False):
    """Open ``url`` with every request off 127.0.0.1 refused; return (page, failures), and
    with ``errors=True`` also the console errors and page errors (but the one Jupyter Book 1
    always makes: sphinx-thebe's config script written twice, a second `const THEBE_JS_URL`)."""
    page = browser.new_page()
    failures: list[str] = []
    logged: list[str] = []
    page.on("console", lambda m: m.type == "error" and logged.append(f"console: {m.text}"))
    page.on("pageerror", lambda e: "THEBE_JS_URL" not in str(e) and logged.append(f"page error: {e}"))

    def route(r):
        if r.request.url.startswith("http://127.0.0.1:"):
            r.continue_()
        else:
            failures.append(f"blocked {r.request.url}")
            r.abort()

    page.route("**/*", route)
    page.on("response", lambda resp: resp.status >= 400 and failures.append(f"HTTP {resp.status} {resp.url}"))
    page.goto(url, wait_until="networkidle")
    return (page, failures, logged) if errors else (page, failures)


def close(page) -> None:
    """Close a page opened by :func:`open_offline` (its route handler removed first, so that
    no request still in flight is left with an unanswered route at shutdown)."""
    page.unroute_all(behavior="ignoreErrors")
    page.close()


def test_chapter_02_renders_offline(browser, served_book):
    page, failures = open_offline(browser, f"{served_book}/book/02_transformer.html")
    page.wait_for_selector("mjx-container", state="attached", timeout=20000)
    page.wait_for_selector(".course-w-attention .course-w-map", state="attached", timeout=20000)
    page.wait_for_timeout(500)
    # math: every $...$ was typeset, none left raw
    n_math = page.locator("mjx-container").count()
    assert n_math >= 40, f"only {n_math} formulas typeset"
    assert page.locator("mjx-merror").count() == 0, "MathJax reported a TeX error"
    body = page.inner_text("article.bd-article")
    assert "\\frac" not in body and "\\mathrm" not in body, "raw TeX left on the page"
    # plots: every image loaded
    images = page.evaluate(
        "Array.from(document.querySelectorAll('article.bd-article img')).map(i => [i.src, i.complete && "
        "i.naturalWidth > 0])"
    )
    assert len(images) >= 4, images  # learning curve, two head grids, positional encoding
    assert all(ok for _, ok in images), [src for src, ok in images if not ok]
    # the attention explorer, live: its controls and the map it draws in the page
    assert page.locator(".course-w-attention select.course-w-kind").count() == 1
    assert page.locator(".course-w-attention input[type=range]").count() >= 3
    assert page.locator(".course-w-map td").count() > 0, "the explorer drew no map"
    assert failures == [], failures
    close(page)


def test_intro_page_renders_offline(browser, served_book):
    page, failures = open_offline(browser, f"{served_book}/book/intro.html")
    page.wait_for_selector("mjx-container", state="attached", timeout=20000)
    assert failures == [], failures
    close(page)


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_every_chapter_renders_offline(browser, served_book, built_book, path):
    """Every chapter page, with the network refused: its formulas typeset without errors,
    every image loaded, every widget stored in the page rendered, and each course widget
    live: one action on its controls changes what it shows (no kernel; the values are
    checked against the Python reference on small pages in tests/widgets/test_widget_pages.py)."""
    import widget_pages

    html = (built_book / "book" / f"{path.stem}.html").read_text()
    page, failures, errors = open_offline(browser, f"{served_book}/book/{path.stem}.html", errors=True)
    page.wait_for_selector("mjx-container", state="attached", timeout=20000)
    assert page.locator("mjx-merror").count() == 0, "MathJax reported a TeX error"
    n_views = html.count('type="application/vnd.jupyter.widget-view+json"')
    if n_views:
        page.wait_for_selector(".course-w, .jupyter-widgets", state="attached", timeout=20000)
    page.wait_for_timeout(500)
    images = page.evaluate(
        "Array.from(document.querySelectorAll('article.bd-article img')).map(i => [i.src, i.complete && "
        "i.naturalWidth > 0])"
    )
    assert images, "no plots on the page"
    assert all(ok for _, ok in images), [src for src, ok in images if not ok]
    if n_views:
        rendered = page.evaluate(
            "document.querySelectorAll('.course-w, .jupyter-widgets.widget-container, "
            ".jupyter-widgets.widget-box').length"
        )
        assert rendered >= 1, f"{n_views} widget views stored, none rendered"
        poked = widget_pages.poke_widgets(page)
        assert all(changed for _, changed in poked), f"widgets that did not respond: {poked}"
    assert errors == [], errors
    assert failures == [], failures
    close(page)


def test_launch_buttons_point_at_the_repository(built_book):
    html = (built_book / "book" / "02_transformer.html").read_text()
    repo = repository_url(ROOT).removeprefix("https://github.com/")
    assert f"https://colab.research.google.com/github/{repo}/blob/main/book/02_transformer.ipynb" in html
    assert f"https://mybinder.org/v2/gh/{repo}/main?urlpath=tree/book/02_transformer.ipynb" in html
