"""The CUDA target: the same plan and places as CUDA kernel launches."""
