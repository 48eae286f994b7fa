"""Which token goes to which box (``--remote URL``, repeated): each box's own, from the
token file named for its URL in ``[fleet] boxes``; ``--token`` (or ``$VRAMSCOPE_TOKEN``)
only when one box is watched, or for a box ``[fleet]`` does not list when it is the only
such box. A box's token is never sent to another box (issue 34).

A token file is a secret: it is opened ``O_NOFOLLOW|O_NONBLOCK`` (a link or a FIFO never
stands in for it), must be a regular file owned by this user (or root) that group and
others cannot read, and at most :data:`MAX_TOKEN_BYTES`. Errors name the file, never its
content.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from monitor.config import Config, ConfigError, box_key

MAX_TOKEN_BYTES = 4096  # a bearer token is tens of characters; a bigger file is not one


def read_token_file(path: Path) -> str:
    """The token in ``path`` (surrounding whitespace stripped); ConfigError (one line,
    without the content) when the file is missing, not a private regular file, too large,
    empty or not one line of printable ASCII."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise ConfigError(f"token file {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"token file {path} is not a regular file")
        if st.st_uid not in (os.geteuid(), 0) or st.st_mode & 0o077:
            raise ConfigError(
                f"token file {path} must be private to its owner (mode "
                f"{stat.S_IMODE(st.st_mode):04o}, owner uid {st.st_uid}): chmod 600 it"
            )
        data = handle.read(MAX_TOKEN_BYTES + 1)
    if len(data) > MAX_TOKEN_BYTES:
        raise ConfigError(f"token file {path} is larger than {MAX_TOKEN_BYTES} bytes")
    token = data.strip()
    if not token or any(not 0x21 <= b <= 0x7E for b in token):
        raise ConfigError(f"token file {path} must hold one token (printable, no spaces)")
    return token.decode("ascii")


def tokens_for(urls: Sequence[str], cfg: Config, token: str | None) -> dict[str, str | None]:
    """Each URL's token: its ``[fleet]`` box's token file (no file: no token); else
    ``token`` when that URL is the only one ``[fleet]`` does not list. Several unlisted
    boxes and a ``token``: ConfigError (one token would go to several boxes)."""
    listed = {box_key(b.url): b for b in cfg.fleet}
    unlisted = [u for u in urls if box_key(u) not in listed]
    if token and len(unlisted) > 1:
        where = f" ({cfg.source})" if cfg.source else ""
        raise ConfigError(
            f"--token (or $VRAMSCOPE_TOKEN) would go to {len(unlisted)} boxes: give each box "
            f"its own token file in [fleet] boxes of the config{where} (README: Fleet)"
        )
    out: dict[str, str | None] = {}
    for url in urls:
        box = listed.get(box_key(url))
        if box is None:
            out[url] = token or None
        else:
            out[url] = read_token_file(box.token_file) if box.token_file else None
    return out


def fleet_token(url: str, cfg: Config) -> str | None:
    """The token of a box found by Prometheus (``tui --prometheus``): its ``[fleet]``
    token file, else none (``--token`` is never sent to a box it did not name)."""
    for box in cfg.fleet:
        if box_key(box.url) == box_key(url):
            return read_token_file(box.token_file) if box.token_file else None
    return None
