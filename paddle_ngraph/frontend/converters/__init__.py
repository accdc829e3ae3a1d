"""Converters, one small function per Paddle op, grouped by op family.

A converter takes a ``NodeContext``, builds IR nodes from its inputs, and sets
its outputs. The table that maps Paddle op names (legacy and PIR) to these
functions is ``frontend/op_table.py``.
"""
