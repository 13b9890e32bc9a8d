"""Elementwise functions beyond the elementary ones: pairs, rounding, integer and bit ops, special and
trigonometric functions, division modes and in-place forms."""
