"""pytest layer (being written)."""
