"""Logs as evidence: kernel and engine log parsers, and the followers that read them live."""
