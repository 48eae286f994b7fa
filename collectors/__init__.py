"""Collectors read hardware and the OS and nothing else: they never import monitor/ or tui/.

The table of collectors is :data:`collectors.registry.REGISTRY`.
"""
