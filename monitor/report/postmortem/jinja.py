"""The post-mortem's jinja2 templates (``templates/``, package data), autoescaped.

Values go in as plain text (made terminal-safe by common.py) and are escaped by the
template; only markup this package made itself goes in as ``Markup`` (the SVG chart)."""

from __future__ import annotations

from functools import cache
from typing import Any

import jinja2


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("monitor.report.postmortem", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )


# markupsafe writes " and ' as &#34; and &#39;; the reports have always had html.escape's
# &quot; and &#x27; (saved reports, tests and greps compare them): the same characters.
# A literal "&#34;" in the document is escaped to "&amp;#34;", so nothing else matches.
_ENTITIES = (("&#34;", "&quot;"), ("&#39;", "&#x27;"))


def render(name: str, values: dict[str, Any]) -> str:
    """Template ``name`` filled with ``values``, autoescaped."""
    out = _environment().get_template(name).render(values)
    for new, old in _ENTITIES:
        out = out.replace(new, old)
    return out
