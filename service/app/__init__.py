"""The application layer: one function per use case, owning its transaction and its rules."""
