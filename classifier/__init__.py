"""Request-content classifier: code / prose / structured."""
