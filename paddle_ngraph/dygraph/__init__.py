"""Dygraph Layers on the engine: ``DataParallel`` (data_parallel.py) and the runtime behind it
(runner.py). Capture is the frontend's (frontend/dygraph.py). Importing this package imports Paddle."""
from .data_parallel import DataParallel

__all__ = ["DataParallel"]
