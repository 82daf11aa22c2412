"""Tokenizers: loading, encoding engines, training (see the modules)."""
