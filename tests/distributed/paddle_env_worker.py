"""Run under mpirun: what Paddle's own rank and data APIs say on this rank, as one JSON line.

argv[1]: "static" or "dygraph" (import paddle_ngraph, then ask before and after fleet.init),
"paddle_first" (Paddle imported and asked before paddle_ngraph), or "plain" (no paddle_ngraph).
"""
import json
import os
import sys

DATASET_SIZE = 24  # divisible by 2 and 3: DistributedBatchSampler pads nothing


def ask(dist, paddle):
    class Indices(paddle.io.Dataset):
        def __len__(self):
            return DATASET_SIZE

        def __getitem__(self, i):
            return i

    env = dist.ParallelEnv()
    sampler = paddle.io.DistributedBatchSampler(Indices(), batch_size=4, shuffle=True)
    sampler.set_epoch(3)
    return {"get_rank": dist.get_rank(), "get_world_size": dist.get_world_size(), "env_rank": env.rank,
            "env_world_size": env.world_size, "samples": [int(i) for batch in sampler for i in batch]}


def main():
    mode = sys.argv[1]
    if mode == "paddle_first":
        import paddle.distributed as dist
        dist.get_rank()  # Paddle caches its ParallelEnv on first use
    if mode != "plain":
        import paddle_ngraph  # noqa: F401
    import paddle
    import paddle.distributed as dist
    from paddle.distributed import fleet

    if mode != "dygraph":
        paddle.enable_static()
    report = {"mpi_rank": int(os.environ["OMPI_COMM_WORLD_RANK"]), "mpi_size": int(os.environ["OMPI_COMM_WORLD_SIZE"]),
              "before_init": ask(dist, paddle)}
    fleet.init(is_collective=True)
    report["after_init"] = ask(dist, paddle)
    report["fleet"] = {"worker_index": fleet.worker_index(), "worker_num": fleet.worker_num(),
                       "worker_endpoints": fleet.worker_endpoints()}
    if mode == "dygraph":
        # fleet.init in dygraph mode ran Paddle's own init_parallel_env (gloo): it communicates.
        value = paddle.to_tensor([float(report["mpi_rank"] + 1)])
        dist.all_reduce(value)
        report["allreduce_sum"] = float(value.numpy()[0])
    print("REPORT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
