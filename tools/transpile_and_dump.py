#!/usr/bin/env python
"""Converts a Paddle program to the paddle_ngraph graph IR and dumps it (text, json, dot, svg).

A thin wrapper of ``paddle_ngraph.tools.dump`` (also installed as the console
script ``paddle-ngraph-dump``); see ``--help`` and docs/dump_tool.md.
"""
import sys

from paddle_ngraph.quiet import quiet_this_process

quiet_this_process()

from paddle_ngraph.tools.dump import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
