"""The level of the ``paddle_ngraph`` logger, set from the ``log_level`` configuration key.

A module of its own, below every layer: the transpiler, ``DataParallel`` and fleet all apply
the configured level. Importing this module does not import Paddle.
"""
from __future__ import annotations

import logging


def apply_log_level(level: str):
    """Sets the level of the ``paddle_ngraph`` logger (adds a stderr handler if it has none)."""
    logger = logging.getLogger("paddle_ngraph")
    logger.setLevel(level)
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[paddle_ngraph] %(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    return logger
