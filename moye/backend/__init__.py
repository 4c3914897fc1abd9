"""moye.backend: where kernels run (cuda: NVRTC and the driver; cpu: a NumPy interpreter)."""
