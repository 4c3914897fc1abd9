"""The CUDA backend."""
