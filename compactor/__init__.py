"""Event-driven streaming compactor for Delta Lake segments."""

__version__ = "0.1.0"
