"""Renderings for people and scripts: status, estimate and post-mortem as text, JSON and HTML."""
