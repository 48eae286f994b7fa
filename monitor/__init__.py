"""The daemon side: models, storage, sampling, CLI. Never imports tui/, textual or rich."""
