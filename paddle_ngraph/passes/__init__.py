"""Passes over IR functions, run by the pass manager with validation after each."""
from .base import FunctionPass
from .insert_allreduce import InsertAllReduce
from .manager import PassManager
from .validate import Validate

__all__ = ["FunctionPass", "InsertAllReduce", "PassManager", "Validate"]
