"""Host discovery for an elastic MPIJob: the hostfile's workers whose sshd answers, as ``host:slots``.

    python -m paddle_ngraph.elastic.discover_mpijob [--hostfile /etc/mpi/hostfile] [--port 2222]

The MPI Operator writes the job's hostfile (``<job>-worker-<i>.<job>-worker.<ns>.svc slots=N``, one
line per worker replica) into the ConfigMap ``<job>-config``. A worker is worth spawning on when
mpirun can reach it: its name resolves (the headless Service lists a pod only while it is Ready)
and its sshd accepts a connection (the worker's readiness probe, run here). A worker whose pod is
being restarted fails one or the other and is left out, so that the job never asks Open MPI for a
host it cannot reach (which would end the whole job). Prints one ``host:slots`` line per worker
that answers, in the hostfile's order (Horovod's host discovery format, read by
``elastic.run(discovery=...)``); exits 0 even when none answers.
"""
from __future__ import annotations

import argparse
import socket
import sys

HOSTFILE = "/etc/mpi/hostfile"
SSH_PORT = 2222  # deploy/image/sshd_config


def read_hostfile(path: str) -> list[tuple[str, int]]:
    """(host, slots) of each line of an Open MPI hostfile (``host slots=N``; no slots: 1)."""
    hosts = []
    with open(path) as f:
        for line in f:
            fields = line.split("#", 1)[0].split()
            if not fields:
                continue
            slots = 1
            for field in fields[1:]:
                key, _, value = field.partition("=")
                if key == "slots":
                    slots = int(value)
            hosts.append((fields[0], slots))
    return hosts


def answers(host: str, port: int, timeout: float) -> bool:
    """Whether ``host`` resolves and accepts a TCP connection on ``port`` within ``timeout`` s."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:  # does not resolve, refused, unreachable, timed out
        return False


def discover(hostfile: str = HOSTFILE, port: int = SSH_PORT, timeout: float = 1.0) -> list[str]:
    """``host:slots`` of the hostfile's hosts that answer on ``port``."""
    return [f"{host}:{slots}" for host, slots in read_hostfile(hostfile) if answers(host, port, timeout)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hostfile", default=HOSTFILE)
    p.add_argument("--port", type=int, default=SSH_PORT, help="the workers' sshd port")
    p.add_argument("--timeout", type=float, default=1.0, help="seconds per connection attempt")
    args = p.parse_args(argv)
    for line in discover(args.hostfile, args.port, args.timeout):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
