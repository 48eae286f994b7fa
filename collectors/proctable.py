"""The process listing of ``/proc``, read once per tick and shared by the collectors.

``os.scandir`` gives each ``/proc/PID`` entry's inode number from ``readdir`` at no extra
cost. procfs gives a new process a new inode, so an unchanged inode means the same process
as last tick and its identity (``/proc/PID/stat`` start time) need not be re-read; a changed
inode only means "verify", never "new process" by itself.
"""

from __future__ import annotations

import os
from pathlib import Path

from collectors._fs import is_recording, note_listing


def list_pids(proc: Path) -> dict[int, int]:
    """PID -> inode of ``proc/PID`` for every process directory. Missing root: empty."""
    pids: dict[int, int] = {}
    try:
        with os.scandir(proc) as it:
            for entry in it:
                name = entry.name
                if name.isdigit():
                    pids[int(name)] = entry.inode()
    except FileNotFoundError:
        return {}
    if is_recording():  # the names are made only for ``vramscope capture`` (issue 32 item 3)
        note_listing(proc, [str(p) for p in pids])
    return pids
