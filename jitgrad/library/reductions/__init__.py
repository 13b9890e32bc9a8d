"""Reductions: counting/truth reductions, histograms and statistics."""
