"""``python -m monitor`` is the ``vramscope`` command."""

from monitor.cli.main import main

main()
