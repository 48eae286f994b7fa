"""The ``vramscope`` command: ``main`` holds the click group, and each command's work
lives in a module of its own name (``status`` is rendered by report/status.py).
"""
