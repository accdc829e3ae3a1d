"""Ranks joining an elastic job: after a commit, the group grows onto the hosts that discovery finds.

As Horovod's ``--host-discovery-script``: a script (or a Python callable) lists the hosts the job
may use now, one ``host:slots`` per line (``host`` alone: one slot). After a commit, at most every
``interval`` seconds, rank 0 runs it; where the hosts have more slots than the group has ranks
there (up to ``max_ranks`` in all), the group starts new processes of this same command line
(``ElasticMpiTransport.grow``, MPI_Comm_spawn). The commit just taken is the state every rank
continues from: ``elastic.run`` hands it to the new ranks and calls the training function again
on the larger group. The group never shrinks because a host left the list (a process that dies is
what shrinks it).

The decision travels from rank 0 to the others at every commit, so with ``max_ranks`` set a commit
is collective: every rank commits at the same step.
"""
from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time

from ..errors import ConfigError, RankLostError, TransportError

log = logging.getLogger("paddle_ngraph.elastic")

DISCOVERY_TIMEOUT_S = 30.0


class GroupGrew(Exception):
    """Raised out of ``State.commit`` on every member once new ranks joined: ``elastic.run`` catches
    it and calls the training function again on ``transport``'s group. Not an error."""

    def __init__(self, transport, joined: list[int]):
        super().__init__(f"world rank(s) {joined} joined")
        self.transport = transport
        self.joined = joined


def parse_hosts(text: str, source: str) -> list[tuple[str, int]]:
    """``host:slots`` lines (``host`` alone: 1 slot; blank lines and ``#`` comments skipped), in
    order, a host listed twice counted once with the larger number."""
    hosts: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        host, _, slots = line.partition(":")
        try:
            count = int(slots) if slots else 1
        except ValueError:
            count = -1
        if not host or count < 0:
            raise ConfigError(f"host discovery ({source}), line {number}: '{line}' is not 'host' or 'host:slots'")
        hosts[host] = max(count, hosts.get(host, 0))
    return list(hosts.items())


def short_host_name(host: str) -> str:
    """A host name's first label ("node-a" of "node-a.svc.cluster.local"); an address as it is."""
    return host if host.replace(".", "").isdigit() else host.split(".", 1)[0]


class Growth:
    """What ``elastic.run(max_ranks=..., discovery=...)`` asks for, and its checks after commits."""

    def __init__(self, max_ranks: int, discovery, interval: float):
        if not callable(discovery) and not isinstance(discovery, (str, os.PathLike)):
            raise ConfigError(f"elastic.run: discovery must be a script's path or a callable returning "
                              f"'host:slots' lines, not {type(discovery).__name__}")
        self.max_ranks = max_ranks
        self.discovery = discovery
        self.interval = interval
        self._last_run = float("-inf")
        # What a new process runs: this one's command line as Python received it (`python -m x`,
        # options and all), in this process's working directory.
        self.command = [sys.executable, *sys.orig_argv[1:]]
        self.workdir = os.getcwd()

    def discover(self) -> list[tuple[str, int]]:
        """The hosts the job may use now, by the script or the callable."""
        if callable(self.discovery):
            found = self.discovery()
            text = found if isinstance(found, str) else "\n".join(str(line) for line in found)
            return parse_hosts(text, getattr(self.discovery, "__name__", "callable"))
        script = os.fspath(self.discovery)
        try:
            done = subprocess.run([script], capture_output=True, text=True, timeout=DISCOVERY_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise ConfigError(f"host discovery script {script}: {error}") from None
        if done.returncode != 0:
            raise ConfigError(f"host discovery script {script} exited with {done.returncode}: "
                              f"{done.stderr.strip()[-500:]}")
        return parse_hosts(done.stdout, script)

    def placement(self, transport) -> list[tuple[str, int]]:
        """On rank 0: where to start new ranks now ((host, count) pairs; empty: nowhere), from the
        hosts discovered and those the group's ranks run on."""
        if transport.size >= self.max_ranks or time.monotonic() - self._last_run < self.interval:
            return []
        self._last_run = time.monotonic()
        try:
            hosts = self.discover()
        except ConfigError as error:
            log.warning("rank 0: %s; the group stays as it is", error)
            return []
        here = transport.hosts[transport.rank]
        local = {"localhost", "127.0.0.1", socket.gethostname(), socket.getfqdn()}
        # MPI_Get_processor_name gives a pod's or node's short name where discovery and mpirun's
        # hostfile may give the full one: hosts are told apart by their first label.
        running = [short_host_name(h) for h in transport.hosts]
        room, placement = self.max_ranks - transport.size, []
        for host, slots in hosts:
            name = here if host in local else host
            free = slots - running.count(short_host_name(name))
            if free > 0 and room > 0:
                placement.append((name, min(free, room)))
                room -= placement[-1][1]
        return placement

    def after_commit(self, transport):
        """Collective over the group: rank 0 decides, every member learns it; where new ranks are
        to start, the group spawns them and every member raises ``GroupGrew``."""
        placement = self.placement(transport) if transport.rank == 0 else None
        placement = transport.broadcast_object(placement, root=0)
        if not placement:
            return
        try:
            bigger = transport.grow(placement, self.command, self.workdir)
        except RankLostError:
            raise
        except TransportError as error:  # Open MPI reports a failed spawn to every member alike
            log.warning("rank %d: %s; the group stays as it is", transport.rank, error)
            return
        joined = bigger.world_ranks[transport.size:]
        raise GroupGrew(bigger, joined)
