"""The Textual user interface (issue 6). It renders a source — live collectors, the daemon's
database, or a remote daemon — and is the only package that imports textual."""
