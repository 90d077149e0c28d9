"""The progress store's one error, apart from the store, so that a front end can catch it without
loading the store first (the command line catches it around everything, the TUI before its
first frame)."""


class StoreError(Exception):
    """Progress cannot be read or saved; the message says which file and why, for the learner."""
