"""Order along a dim: sort, topk, cumulative ops, order statistics, searching and uniques."""
