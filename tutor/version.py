"""The program's version, in one place below every layer (the package's `__init__` sits above
them all: it loads the notebook front end)."""

__version__ = "0.1.0"
