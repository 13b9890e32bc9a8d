"""Indexing writes: masks, scatter, index_* and put."""
