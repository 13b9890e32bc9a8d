"""Linear algebra: products, solvers and factorizations, norms, einsum, eigenpairs."""
