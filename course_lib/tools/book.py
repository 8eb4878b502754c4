"""``course book``: fetch the book's offline assets and build the HTML with Jupyter Book 1.

The built pages must render math and run the widgets with no network, so MathJax,
RequireJS, the ipywidgets HTML manager and anywidget's front end are served from the book
itself. They are downloaded once from the npm registry (pinned versions, checked against the
registry's sha512 integrity), unpacked into ``_build/vendor`` (anywidget's comes from its
installed Python package) and copied into the HTML root by Sphinx's ``html_extra_path``
(not ``_static``, whose every .js file Jupyter Book would add to every page).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from ..hashing import library_hash

__all__ = ["ASSETS", "fetch_assets", "vendor_anywidget", "build_book", "project_root", "register"]


@dataclass(frozen=True)
class Asset:
    name: str  # npm package
    version: str
    integrity: str  # the registry's sha512 integrity string
    member: str  # path inside the tarball (a file, or a folder ending in "/")
    dest: str  # folder under the vendor directory
    skip_suffixes: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        base = self.name.split("/")[-1]
        return f"https://registry.npmjs.org/{self.name}/-/{base}-{self.version}.tgz"


ASSETS = (
    Asset(
        "mathjax",
        "3.2.2",
        "sha512-Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw==",
        "package/es5/",
        "mathjax",
    ),
    Asset(
        "requirejs",
        "2.3.7",
        "sha512-DouTG8T1WanGok6Qjg2SXuCMzszOo0eHeH9hDZ5Y4x8Je+9JB38HdTLT4/VA8OaUhBa0JPVHJ0pyBkM1z+pDsw==",
        "package/require.js",
        "requirejs",
    ),
    Asset(
        "@jupyter-widgets/html-manager",
        "1.0.6",
        "sha512-+Mn+Ra8wyIHrYaUpfmf9A3dsLkt/NuwzPQN8sthdxBD35VV5cOJbpmgMhNR27n/rmP3mKyEe0PWCJrtZrXTXDQ==",
        "package/dist/",
        "@jupyter-widgets/html-manager/dist",
        (".map", ".LICENSE.txt"),
    ),
)


def project_root(start: Path | None = None) -> Path:
    """The folder holding ``_config.yml``: the current directory or one above it, else the checkout."""
    for folder in [Path(start or Path.cwd()).resolve(), *Path(start or Path.cwd()).resolve().parents]:
        if (folder / "_config.yml").exists() and (folder / "_toc.yml").exists():
            return folder
    here = Path(__file__).resolve().parents[2]
    if (here / "_config.yml").exists():
        return here
    raise FileNotFoundError("no _config.yml/_toc.yml found here or above; run from the course checkout")


def _download(url: str, attempts: int = 3) -> bytes:
    last: Exception | None = None
    for i in range(attempts):
        try:
            with urllib.request.urlopen(url, timeout=60) as r:
                return r.read()
        except Exception as exc:  # network hiccup: retry with back-off
            last = exc
            time.sleep(2**i)
    raise RuntimeError(f"could not download {url}: {last}")


def _check_integrity(data: bytes, integrity: str, what: str) -> None:
    algo, _, expected = integrity.partition("-")
    digest = base64.b64encode(hashlib.new(algo, data).digest()).decode()
    if digest != expected:
        raise RuntimeError(f"{what}: {algo} digest {digest} does not match the pinned integrity {expected}")


def _extract(data: bytes, asset: Asset, dest: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for m in tar.getmembers():
            if not m.isfile():
                continue
            if asset.member.endswith("/"):
                if not m.name.startswith(asset.member):
                    continue
                rel = m.name[len(asset.member) :]
            elif m.name == asset.member:
                rel = Path(m.name).name
            else:
                continue
            if rel.endswith(asset.skip_suffixes) or not rel:
                continue
            target = (dest / rel).resolve()
            if not str(target).startswith(str(dest.resolve()) + os.sep):
                raise RuntimeError(f"refusing to extract {m.name!r} outside {dest}")
            target.parent.mkdir(parents=True, exist_ok=True)
            with tar.extractfile(m) as src, open(target, "wb") as out:  # type: ignore[union-attr]
                shutil.copyfileobj(src, out)


# RequireJS resolves module URLs, and the widget manager its fonts, against ``baseUrl``;
# point it at the HTML root (where this script's folder lives) whatever the page's depth.
REQUIRE_CONFIG_JS = """\
(function () {
  var src = document.currentScript && document.currentScript.src;
  if (src && window.require && window.require.config) {
    window.require.config({ baseUrl: src.replace(/requirejs\\/course-config\\.js.*$/, "") });
  }
})();
"""


def fetch_assets(vendor: Path, *, quiet: bool = False) -> Path:
    """Make sure every asset is unpacked under ``vendor``; download only what is missing."""
    vendor.mkdir(parents=True, exist_ok=True)
    tarballs = Path(os.environ.get("COURSE_NPM_CACHE", Path.home() / ".cache" / "course_lib" / "npm"))
    for asset in ASSETS:
        marker = vendor / f".{asset.name.replace('/', '_')}-{asset.version}.done"
        if marker.exists():
            continue
        cached = tarballs / f"{asset.name.replace('/', '_')}-{asset.version}.tgz"
        data = cached.read_bytes() if cached.exists() else None
        if data is not None:
            try:
                _check_integrity(data, asset.integrity, asset.name)
            except RuntimeError:
                data = None
        if data is None:
            if not quiet:
                print(f"downloading {asset.name}@{asset.version} (offline rendering asset)", flush=True)
            data = _download(asset.url)
            _check_integrity(data, asset.integrity, asset.name)
            tarballs.mkdir(parents=True, exist_ok=True)
            cached.write_bytes(data)
        final = vendor / asset.dest
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}."))
        try:
            _extract(data, asset, tmp)
            if final.exists():
                shutil.rmtree(final)
            tmp.rename(final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)
        marker.write_text(asset.integrity)
    config = vendor / "requirejs" / "course-config.js"
    if not config.exists() or config.read_text() != REQUIRE_CONFIG_JS:
        config.write_text(REQUIRE_CONFIG_JS)
    vendor_anywidget(vendor)
    _copy_widget_fonts(vendor)
    return vendor


def _copy_widget_fonts(vendor: Path) -> None:
    """The HTML manager's stylesheet asks for its icon fonts at ``<baseUrl>@jupyter-widgets/``
    (webpack's public path), not in ``html-manager/dist`` where they are unpacked: copy them
    there too, or every widget page logs failed font loads."""
    dist = vendor / "@jupyter-widgets" / "html-manager" / "dist"
    for font in dist.glob("*"):
        if font.suffix in {".woff2", ".woff", ".ttf", ".eot", ".svg"}:
            target = vendor / "@jupyter-widgets" / font.name
            if not target.exists() or target.stat().st_size != font.stat().st_size:
                shutil.copyfile(font, target)


def vendor_anywidget(vendor: Path) -> Path:
    """Copy the installed anywidget's front end (its AMD module, ``nbextension/index.js``) to
    ``vendor/anywidget.js``: the HTML manager's RequireJS asks for module ``anywidget`` at the
    ``baseUrl`` that ``course-config.js`` sets (the HTML root) before any CDN, so the course's
    widgets run their JavaScript in the offline book. The copy comes from the Python package
    (no download), so it matches the ``_model_module_version`` the widgets' state names."""
    from importlib import resources

    try:
        source = resources.files("anywidget") / "nbextension" / "index.js"
        code = source.read_bytes()
    except (ModuleNotFoundError, FileNotFoundError):
        raise RuntimeError(
            "anywidget is not installed: pip install 'anywidget>=0.9' (the widgets need it)"
        ) from None
    target = vendor / "anywidget.js"
    if not target.exists() or target.read_bytes() != code:
        target.write_bytes(code)
    return target


def _library_changed(root: Path) -> bool:
    """True when course_lib changed since the last build (and remember the new state)."""
    stamp = root / "_build" / ".course_lib_fingerprint"
    now = library_hash()
    old = stamp.read_text() if stamp.exists() else None
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(now)
    return old != now


def build_book(
    root: Path | None = None, *, all_pages: bool = False, strict: bool = False, quiet: bool = False
) -> int:
    """Fetch the assets and run ``jupyter-book build``; return its exit code.

    ``strict`` turns Sphinx warnings into errors (``-W --keep-going``).
    """
    root = project_root(root)
    fetch_assets(root / "_build" / "vendor", quiet=quiet)
    if _library_changed(root):
        # the Jupyter cache keys on notebook text only: a change in course_lib must re-execute
        shutil.rmtree(root / "_build" / ".jupyter_cache", ignore_errors=True)
        all_pages = True
    exe = Path(sys.executable).parent / "jupyter-book"
    cmd = [str(exe) if exe.exists() else "jupyter-book", "build", str(root)]
    if all_pages:
        cmd.append("--all")
    if strict:
        cmd += ["-W", "--keep-going"]
    env = dict(os.environ)
    if not env.get("MPLBACKEND", "").startswith("module://"):
        env.pop("MPLBACKEND", None)  # a non-inline backend would drop every plot from the pages
    env.setdefault("COURSE_PROGRESS", "0")  # no progress bars frozen into the pages
    env.setdefault("COURSE_CACHE", str(root / "_build" / "cache"))
    env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    env["COURSE_STRICT_CLAIMS"] = "1"  # the build fails on a claim the run does not support
    t0 = time.perf_counter()
    rc = subprocess.call(cmd, cwd=root, env=env)
    if not quiet:
        index = root / "_build" / "html" / "index.html"
        status = "built" if rc == 0 else f"build FAILED (exit {rc})"
        print(f"\n{status} in {time.perf_counter() - t0:.0f} s. Open file://{index}")
        print(f"or serve it: python -m http.server --directory {index.parent} 8000  -> http://127.0.0.1:8000")
    return rc


def _cmd_book(args) -> int:
    return build_book(all_pages=args.all, strict=args.strict)


def register(sub) -> None:
    p = sub.add_parser("book", help="execute the chapters and build the HTML book (offline-ready)")
    p.add_argument("--all", action="store_true", help="rebuild every page, not only changed ones")
    p.add_argument("--strict", action="store_true", help="treat Sphinx warnings as errors")
    p.set_defaults(func=_cmd_book)
