"""The course's models, one module each."""
