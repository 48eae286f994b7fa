"""Ways for a test running as root to meet a real EACCES (root ignores file modes).

Two ways, tried in this order by the permission tests: run the child as ``nobody`` when the
checkout and the interpreter are reachable by it; otherwise stay root but drop
CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH in the child first (``DROP_DAC_CAPS``, a prelude
for ``python -c``; capget/capset with _LINUX_CAPABILITY_VERSION_3, capability(7)).
"""

from __future__ import annotations

import stat
from pathlib import Path

NOBODY = 65534

DROP_DAC_CAPS = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
class Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
class Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]
header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3
if libc.capget(ctypes.byref(header), data) != 0:
    sys.exit("capget failed")
mask = ~((1 << 1) | (1 << 2)) & 0xFFFFFFFF  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
data[0].effective &= mask
data[0].permitted &= mask
if libc.capset(ctypes.byref(header), data) != 0:
    sys.exit("capset failed")
"""


def reachable_by_nobody(path: Path) -> bool:
    """Whether every directory from ``/`` down to ``path`` can be traversed by others."""
    return all(p.stat().st_mode & stat.S_IXOTH for p in [path, *path.parents])
