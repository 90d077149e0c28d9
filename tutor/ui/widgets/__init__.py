"""Widgets of the tutor's main screen."""
