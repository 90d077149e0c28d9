"""The Textual TUI. Nothing in this package imports torch (tests/test_ui_imports.py)."""
