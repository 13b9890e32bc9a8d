"""The CPU target: a compiled graph as a program of steps (fused loops, BLAS calls, regions, collectives) in one int64 table, and its native entry."""
