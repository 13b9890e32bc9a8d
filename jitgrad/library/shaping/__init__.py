"""Shape functions: views, stacking and splitting, rearranging, slicing, triangles and diagonals."""
