"""``python -m monitor`` is the ``vramscope`` command. The cyclic garbage collector is
off from the first import on (monitor/cli/main.py GC_OFF_COMMANDS says when it comes back)."""

import gc

gc.disable()

from monitor.cli.main import main  # noqa: E402

main()
