"""The SQLite database: schema migrations, the per-tick writer, retention, and every read query."""
