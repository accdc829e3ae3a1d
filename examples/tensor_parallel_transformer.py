#!/usr/bin/env python
"""Tensor-parallel training of a small transformer block (a legacy static program) on CPU.

Every rank holds 1/mp of the model, built with `paddle.distributed.split` as Megatron lays it out:
a vocabulary-parallel embedding, attention whose QKV projection is column-parallel (each rank owns
heads/mp heads) and whose output projection is row-parallel, an MLP with a column- then a
row-parallel linear, and an output layer sharded by vocabulary whose loss is Paddle's parallel
softmax cross entropy over the shards (no rank ever holds the whole logits). Adam trains it; its
moments are sharded with the parameters. Launch with either launcher (--mp = the number of ranks):

    mpirun --allow-run-as-root --oversubscribe -np 2 python examples/tensor_parallel_transformer.py
    python -m paddle.distributed.launch --nproc_per_node 2 examples/tensor_parallel_transformer.py

(over MPI and over oneCCL). `--dense` trains the same model unsharded with Paddle alone in one
process, for comparison: from the same initial weights it prints the same losses.

Data: walks through a fixed random successor table over the vocabulary, from random starts; the
model learns to predict the next token. Rank 0 prints the loss; at the end every rank prints the bytes of its
parameters and optimizer state (the persistable variables in its scope) against what the dense
model holds (computed from the dense shapes).
"""
import argparse

import numpy as np
import paddle
import paddle.distributed.fleet as fleet
import paddle.nn.functional as F

import paddle_ngraph  # noqa: F401  # adds strategy.ngraph to fleet


def parameter_table(a):
    """name -> (dense shape, axis the shards cut or None if every rank holds it whole, parts).
    parts: the QKV weight is three matrices side by side; each rank takes its heads' columns of each."""
    d, f, v = a.dim, a.ffn, a.vocab
    return {"emb": ((v, d), 0, 1),
            "ln1_w": ((d,), None, 1), "ln1_b": ((d,), None, 1),
            "qkv_w": ((d, 3 * d), 1, 3), "qkv_b": ((3 * d,), 0, 3),        # column-parallel
            "out_w": ((d, d), 0, 1), "out_b": ((d,), None, 1),             # row-parallel: bias whole
            "ln2_w": ((d,), None, 1), "ln2_b": ((d,), None, 1),
            "fc1_w": ((d, f), 1, 1), "fc1_b": ((f,), 0, 1),                # column-parallel
            "fc2_w": ((f, d), 0, 1), "fc2_b": ((d,), None, 1),             # row-parallel
            "lnf_w": ((d,), None, 1), "lnf_b": ((d,), None, 1),
            "head_w": ((d, v), 1, 1), "head_b": ((v,), 0, 1)}              # column-parallel by vocabulary


def dense_weights(a):
    rng = np.random.default_rng(a.seed)
    weights = {}
    for name, (shape, _, _) in parameter_table(a).items():
        if name.startswith("ln"):
            weights[name] = np.full(shape, 1.0 if name.endswith("_w") else 0.0, "float32")
        elif name.endswith("_b"):
            weights[name] = np.zeros(shape, "float32")
        else:
            weights[name] = (rng.standard_normal(shape) / np.sqrt(shape[0])).astype("float32")
    return weights


def shard(value, axis, parts, mp_rank, mp):
    if axis is None:
        return value
    return np.concatenate([np.split(p, mp, axis=axis)[mp_rank] for p in np.split(value, parts, axis=axis)], axis=axis)


def batch(a, step):
    """(tokens [batch, seq], next tokens [batch * seq, 1]): walks of a fixed random successor table
    from random starts. Every rank of the model reads the same batch."""
    successor = np.random.default_rng(a.seed).permutation(a.vocab)
    rng = np.random.default_rng(10_000 + step)
    seq = [rng.integers(0, a.vocab, a.batch_size)]
    for _ in range(a.seq_len):
        seq.append(successor[seq[-1]])
    seq = np.stack(seq, axis=1).astype("int64")
    return seq[:, :-1], seq[:, 1:].reshape(-1, 1)


def build(a, mp, mp_rank):
    """The block on [batch * seq, dim] rows; with mp > 1 its layers are split's parallel ones."""
    table, weights = parameter_table(a), dense_weights(a)

    def attr(name):
        _, axis, parts = table[name]
        init = paddle.nn.initializer.Assign(shard(weights[name], axis, parts, mp_rank, mp))
        return paddle.ParamAttr(name=name, initializer=init)

    def param(name):  # a parameter every rank holds whole
        return paddle.static.create_parameter(list(table[name][0]), "float32", attr=attr(name))

    def linear(x, name, axis, gather_out=True):
        shape = table[name + "_w"][0]
        if mp == 1:
            return F.linear(x, param(name + "_w"), param(name + "_b"))
        return paddle.distributed.split(x, shape, "linear", axis=axis, num_partitions=mp, gather_out=gather_out,
                                        weight_attr=attr(name + "_w"), bias_attr=attr(name + "_b"))

    def layer_norm(x, name):
        return F.layer_norm(x, [a.dim], param(name + "_w"), param(name + "_b"))

    B, S, H, hd = a.batch_size, a.seq_len, a.heads // mp, a.dim // a.heads  # H: this rank's heads
    ids = paddle.static.data("ids", [B, S], "int64")
    labels = paddle.static.data("labels", [B * S, 1], "int64")
    if mp == 1:
        x = F.embedding(ids, param("emb"))
    else:
        x = paddle.distributed.split(ids, table["emb"][0], "embedding", num_partitions=mp, weight_attr=attr("emb"))
    x = paddle.reshape(x, [B * S, a.dim]) + paddle.assign(positions(a))

    qkv = linear(layer_norm(x, "ln1"), "qkv", axis=1, gather_out=False)            # [B*S, 3 * H * hd]
    qkv = paddle.transpose(paddle.reshape(qkv, [B, S, 3, H, hd]), [2, 0, 3, 1, 4])  # [3, B, H, S, hd]
    q, k, v = (paddle.reshape(t, [B, H, S, hd]) for t in paddle.split(qkv, 3))
    causal = paddle.assign(np.triu(np.full([S, S], -1e4, "float32"), 1))           # no looking ahead
    # `@`, not paddle.matmul: Paddle 3.3.1's paddle.matmul and F.gelu refuse legacy Variables.
    scores = F.softmax((q @ paddle.transpose(k, [0, 1, 3, 2])) * hd ** -0.5 + causal)
    heads = paddle.reshape(paddle.transpose(scores @ v, [0, 2, 1, 3]), [B * S, H * hd])
    x = x + linear(heads, "out", axis=0)                                              # sums the ranks' heads

    x = x + linear(F.relu(linear(layer_norm(x, "ln2"), "fc1", axis=1, gather_out=False)), "fc2", axis=0)
    logits = linear(layer_norm(x, "lnf"), "head", axis=1, gather_out=False)          # [B*S, vocab / mp]
    if mp == 1:
        return ids, labels, paddle.mean(F.cross_entropy(logits, labels))
    # fleet's ParallelCrossEntropy in a static program: softmax cross entropy over the vocabulary shards.
    from paddle.distributed.fleet.layers.mpu.mp_ops import _c_softmax_with_cross_entropy

    return ids, labels, paddle.mean(_c_softmax_with_cross_entropy(logits, labels))


def positions(a):
    """Sinusoidal position encodings, [batch * seq, dim]: a constant, not a parameter."""
    pos, i = np.arange(a.seq_len)[:, None], np.arange(a.dim // 2)[None, :]
    angle = pos / 10_000 ** (2 * i / a.dim)
    enc = np.concatenate([np.sin(angle), np.cos(angle)], axis=1).astype("float32")
    return np.tile(enc, (a.batch_size, 1))


def state_bytes(program):
    """Bytes of the persistable tensors of ``program`` in the global scope: parameters, Adam's
    moments and powers of beta, the learning rate."""
    scope, total = paddle.static.global_scope(), 0
    for var in program.list_vars():
        if var.persistable and var.type == paddle.base.core.VarDesc.VarType.DENSE_TENSOR:  # not feed/fetch lists
            found = scope.find_var(var.name)
            if found is not None and found.get_tensor()._is_initialized():
                total += np.array(found.get_tensor()).nbytes
    return total


def dense_state_bytes(a):
    """What the dense model holds under Adam, from its shapes: each parameter and its two moments
    (float32), two float32 powers of beta per parameter, and the learning rate."""
    table = parameter_table(a)
    return sum(3 * 4 * int(np.prod(shape)) + 2 * 4 for shape, _, _ in table.values()) + 4


def train(a):
    if a.dense:
        mp, rank = 1, 0
    else:
        strategy = fleet.DistributedStrategy()
        strategy.ngraph = True  # paddle_ngraph: runs split's ops (and the rest) on CPU
        strategy.tensor_parallel = True
        strategy.tensor_parallel_configs = {"tensor_parallel_degree": a.mp}
        fleet.init(is_collective=True, strategy=strategy)
        mp, rank = a.mp, fleet.worker_index()
        if fleet.worker_num() != mp:
            raise SystemExit(f"run on --mp ({mp}) ranks, not {fleet.worker_num()}: "
                             "this example has no data parallelism")
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        ids, labels, loss = build(a, mp, rank % mp)
        opt = paddle.optimizer.Adam(a.lr)
        (opt if a.dense else fleet.distributed_optimizer(opt)).minimize(loss)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    for step in range(a.steps):
        tokens, targets = batch(a, step)
        value, = exe.run(main, feed={"ids": tokens, "labels": targets}, fetch_list=[loss])
        if rank == 0 and (step % a.log_every == 0 or step == a.steps - 1):
            print(f"[rank {rank}] step {step:3d} loss {float(value):.6f}", flush=True)
    mine, dense = state_bytes(main), dense_state_bytes(a)
    print(f"[rank {rank}] parameters + optimizer state: {mine} bytes; the dense model's: {dense} bytes; "
          f"share {mine / dense:.3f} (mp {mp})", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                epilog="Launch: mpirun -np MP python examples/tensor_parallel_transformer.py, or "
                                       "python -m paddle.distributed.launch --nproc_per_node MP ...; "
                                       "--dense: one process.")
    p.add_argument("--mp", type=int, default=2, help="tensor-parallel degree = the number of ranks")
    p.add_argument("--dense", action="store_true", help="the unsharded model with Paddle alone, in one process")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--vocab", type=int, default=64, help="a multiple of --mp")
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--heads", type=int, default=4, help="a multiple of --mp; divides --dim")
    p.add_argument("--ffn", type=int, default=256, help="the MLP's hidden width, a multiple of --mp")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--log-every", type=int, default=5)
    a = p.parse_args()
    paddle.enable_static()
    with paddle.pir_utils.OldIrGuard():  # split's parallel layers run in legacy programs only
        train(a)


if __name__ == "__main__":
    main()
