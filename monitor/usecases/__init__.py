"""Use cases the CLI, the HTTP API and the TUI share: each takes what its edge read (the
config, a request, a box state) and returns a typed result; below the edges, above the
judgements (docs/architecture.md)."""
