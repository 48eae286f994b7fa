"""The tensors alive at ggml-alloc's high-water mark, from a traced llama-server's log.

How the compute rules of issue 33 (monitor/estimate/compute.py ``traced_body_floats``) were
read. Build a llama-server whose ggml-alloc prints every allocation and free (the objects of
scripts/build-llama-server, only ggml-alloc.c recompiled; nothing in .cache is changed)::

    B=.cache/llama.cpp/0.3.36/work/build; S=.cache/llama.cpp/0.3.36/work/src/*/vendor/llama.cpp
    cp $S/ggml/src/ggml-alloc.c /tmp/ggml-alloc.c
    sed -i 's|^#define AT_PRINTF(...)$|#define AT_PRINTF(...) fprintf(stderr, __VA_ARGS__)|' \\
        /tmp/ggml-alloc.c
    cc -D_GNU_SOURCE -I$S/ggml/src -I$B/ggml/src -I$S/ggml/include -O2 -fopenmp -std=gnu11 \\
        -c /tmp/ggml-alloc.c -o /tmp/ggml-alloc.c.o
    cp $B/ggml/src/libggml-base.a /tmp/ && ar r /tmp/libggml-base.a /tmp/ggml-alloc.c.o
    # then the link line of $B/tools/server/CMakeFiles/llama-server.dir/link.txt, run in
    # $B/tools/server with /tmp/libggml-base.a in place of ../../ggml/src/libggml-base.a

start it on a header of the tier (``--no-warmup -nr`` and the case's flags) until "model
loaded", keep its stderr, and run::

    .venv/bin/python tests/realworld/alloc_peak.py server.log [PASS]

Each reserve is one pass (it restarts at ``inp_tokens``); for each the peak and, for the
largest (or the one asked for), every live tensor with its offset and size in MiB. Holes
between them are memory freed but below a live tensor: still part of the buffer.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field

ALLOC = re.compile(r"allocating (.*?) \((\d+) bytes\) - block \d+, offset (\d+)")
FREE = re.compile(r"freeing (.*?) at \{chunk=\d+, offset=(\d+)\}")
MIB = 1024 * 1024


@dataclass
class Pass:
    peak: int = 0
    at: str = ""
    live_at_peak: list[tuple[int, str, int]] = field(default_factory=list)


def passes(lines: list[str]) -> list[Pass]:
    """Replay the allocations and frees of each reserve pass (one tensor per offset)."""
    out: list[Pass] = []
    live: dict[int, tuple[str, int]] = {}
    for line in lines:
        m = ALLOC.search(line)
        if m:
            name, size, off = m.group(1), int(m.group(2)), int(m.group(3))
            if name == "inp_tokens" or not out:
                out.append(Pass())
                live = {}
            live[off] = (name, size)
            if off + size > out[-1].peak:
                snapshot = sorted((o, n, s) for o, (n, s) in live.items())
                out[-1] = Pass(off + size, name, snapshot)
            continue
        m = FREE.search(line)
        if m:
            live.pop(int(m.group(2)), None)
    return out


def main() -> int:
    with open(sys.argv[1], errors="replace") as f:
        found = passes(f.readlines())
    want = int(sys.argv[2]) if len(sys.argv) > 2 else -1
    top = max((p.peak for p in found), default=0)
    if want < 0:
        want = next((i for i, p in enumerate(found) if p.peak == top), -1)
    for i, p in enumerate(found):
        print(f"pass {i}: peak {p.peak / MIB:.2f} MiB at {p.at}")
        if i == want:
            for off, name, size in p.live_at_peak:
                print(f"    {off / MIB:9.3f} {size / MIB:9.3f} {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
