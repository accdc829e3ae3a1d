"""The CPU backend's compile passes, run on every specialization (``executable.py``): fusion of
MatMul + bias, the step order with buffer lifetimes (liveness), and the arena offsets (memory
plan). Generic passes, which every backend and the transpiler use, live in ``paddle_ngraph.passes``."""
