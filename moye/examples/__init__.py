"""Runnable examples: `python -m moye.examples.<name>`."""
