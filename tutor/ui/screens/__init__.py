"""The TUI's screens: the lesson, the training run, the pack chooser, and the dialogs over them."""
