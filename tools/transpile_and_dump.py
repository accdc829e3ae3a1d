#!/usr/bin/env python
"""Converts a Paddle program to the paddle_ngraph graph IR and dumps it (text, json, dot, svg).

A thin wrapper of ``paddle_ngraph.tools.dump`` (also installed as the console
script ``paddle-ngraph-dump``); see ``--help`` and docs/dump_tool.md.
"""
import os
import sys

os.environ.setdefault("GLOG_minloglevel", "2")

from paddle_ngraph.tools.dump import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
