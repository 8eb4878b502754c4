"""The widgets' front end: one anywidget per widget, live without a kernel.

Each widget of the course is an :class:`anywidget.AnyWidget` whose JavaScript module (``_esm``,
under ``widgets/js/``) travels in the widget's state, with the data it needs (``data``). In
the built HTML book the ipywidgets HTML manager loads anywidget's front end from the book
itself (``course book`` vendors it as ``anywidget.js``) and runs the module: the pure logic
(masks from an order, a softened distribution, a parameter count) is computed in the page,
and what needs a model (predictions, attention weights, per-order probabilities) was
precomputed into ``data`` when the notebook ran. In Jupyter with a kernel the same module
runs and may ask the kernel (``request`` messages) for what was not precomputed; the
answers arrive in ``extra``.

:data:`PAGE_BUDGET` bounds the state a widget embeds in a page; :func:`state_bytes` measures it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from importlib import resources
from typing import Any

__all__ = ["PAGE_BUDGET", "live_widget", "state_bytes", "esm_source"]

PAGE_BUDGET = 1_000_000  # bytes of widget state (code + data) one widget may add to a page


def esm_source(kind: str) -> str:
    """The JavaScript module of a widget kind: ``js/common.js`` followed by ``js/<kind>.js``."""
    folder = resources.files(__package__) / "js"
    try:
        body = (folder / f"{kind}.js").read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"no front end for widget kind {kind!r}") from None
    return (folder / "common.js").read_text(encoding="utf-8") + "\n" + body


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities replaced by None (JSON has no such numbers)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def state_bytes(widget: Any) -> int:
    """Bytes the widget's front-end code and data take in a page's embedded state (JSON)."""
    return len(json.dumps({"_esm": widget._esm, "data": widget.data, "extra": widget.extra}).encode())


def _widget_class():
    import anywidget
    import traitlets

    class LiveWidget(anywidget.AnyWidget):
        """An anywidget whose module reads ``data`` (precomputed) and ``extra`` (kernel answers)."""

        data = traitlets.Dict().tag(sync=True)
        extra = traitlets.Dict().tag(sync=True)

        def __init__(self, kind: str, data: dict, handler: Callable[[dict], dict | None] | None = None):
            self._esm = esm_source(kind)
            super().__init__(data=_finite(data), extra={})
            self.kind = kind
            self._handler = handler
            self.on_msg(self._on_request)
            size = state_bytes(self)
            if size > PAGE_BUDGET:
                raise ValueError(
                    f"the {kind} widget's state is {size:,} bytes, over the page budget of {PAGE_BUDGET:,}: "
                    "precompute fewer draws, sentences or layers"
                )

        def _on_request(self, _widget, content, _buffers) -> None:
            """A request from the front end (only with a kernel): answer it into ``extra``."""
            if self._handler is None or not isinstance(content, dict) or "key" not in content:
                return  # not one of the course's requests (anywidget's own messages, say)
            key = str(content.get("key", ""))
            try:
                answer = self._handler(content)
            except ValueError as exc:
                answer = {"error": str(exc)}
            if answer is not None:
                self.extra = {**self.extra, key: _finite(answer)}

    return LiveWidget


_CLASS = None


def _live_class():
    global _CLASS
    if _CLASS is None:
        _CLASS = _widget_class()
    return _CLASS


def live_widget(kind: str, data: dict, handler: Callable[[dict], dict | None] | None = None):
    """A ``LiveWidget`` running ``js/<kind>.js`` over ``data``; ``handler(request)`` answers
    the front end's requests when a kernel is there (its answer goes to ``extra[request["key"]]``)."""
    return _live_class()(kind, data, handler)


def __getattr__(name: str):
    if name == "LiveWidget":  # the anywidget class, built on first use (anywidget imports ipywidgets)
        return _live_class()
    raise AttributeError(name)
