"""Pure-Python privacy accounting (never imports jax)."""
