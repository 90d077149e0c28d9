"""Modal screens: help, step explanation, reveal confirmation."""
