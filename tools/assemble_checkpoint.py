#!/usr/bin/env python
"""Reassembles the dense checkpoint of a model-parallel (tensor-parallel) static program from its shards.

    python tools/assemble_checkpoint.py ckpt dense_ckpt            # the latest checkpoint under ckpt
    python tools/assemble_checkpoint.py ckpt/step-000120 dense_ckpt

A checkpoint that save_checkpoint wrote with mp_degree > 1 holds one file set per shard
(model.tp00.*, model.tp01.*, ...) and shards.json, which names the axis each sharded parameter and
its optimizer state cut (the vocabulary-parallel embedding and a row-parallel weight: axis 0; a
column-parallel weight: axis 1; a column-parallel bias: axis 0). Each is concatenated along its axis
in mp rank order; every other value (whole on every rank) is taken from shard 0. The result is a
checkpoint of the dense program at the same step (OUT/step-NNNNNN/model.pdparams, model.pdopt and
OUT/latest), which paddle.static.load and paddle_ngraph.load_checkpoint read into the dense model,
whose parameters must carry the same names.

A weight that packs several matrices side by side (a fused QKV projection, each rank holding its
heads' columns of each) is concatenated as one matrix: the columns come out in the mp program's
order (rank 0's q, k, v, then rank 1's ...), not in the dense QKV layout.
"""
from __future__ import annotations

import argparse
import os
import sys


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[1],
                                epilog=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="a checkpoint directory (step-NNNNNN) or a checkpoint root (its latest)")
    p.add_argument("out", help="the root to write the dense checkpoint under")
    a = p.parse_args(argv)
    from paddle_ngraph.checkpoint import CheckpointError, assemble_dense, latest_checkpoint

    path = a.checkpoint
    try:
        if os.path.exists(os.path.join(path, "latest")):
            path = latest_checkpoint(path)
        written = assemble_dense(path, a.out)
    except CheckpointError as e:
        print(f"assemble_checkpoint: {e}", file=sys.stderr)
        return 1
    print(f"{path} -> {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
