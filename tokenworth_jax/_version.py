"""The release's version: the one place it is written (both wheels read it; docs/release.md)."""

__version__ = "0.3.0"
