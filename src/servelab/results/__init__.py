"""The results store: runs, stages and metrics in SQLite, with import, export and comparison."""
