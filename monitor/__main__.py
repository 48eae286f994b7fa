"""``python -m monitor`` is the ``vramscope`` command."""

from monitor.cli import main

main()
