#!/usr/bin/env python
"""Several "hosts" on one machine: network namespaces joined by a Linux bridge, optionally with
`tc` limits on their links, running a training script across them with mpirun --host or with
paddle.distributed.launch --ips. Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN).

Each host i is a namespace pdng-h<i> with address 10.77.0.<i>/24 on a veth whose other end is
attached to the bridge pdngbr0 in the root namespace; its processes run under `unshare --uts` with
host name host<i>, so MPI and paddle_ngraph see distinct nodes (the hierarchical allreduce groups
ranks by host name). Traffic between hosts crosses the veths; ranks of one host share memory.
With --rate, every host's link gets a token bucket (tbf) that limits what it sends (so both
directions between two hosts are limited); --delay needs the netem qdisc, which not every kernel
has (this machine's does not: the tool then stops and says so).

    tools/netns_cluster.py --hosts 2 --ranks-per-host 1 --launcher mpirun -- --steps 50
    tools/netns_cluster.py --rate 10gbit --env PADDLE_NGRAPH_HIERARCHICAL=off ...
    tools/netns_cluster.py --dry-run            # prints the commands, changes nothing
    tools/netns_cluster.py --cleanup            # removes what a SIGKILLed run left behind

Arguments after `--` go to the script (default examples/fleet_mnist_mlp.py). The namespaces, the
bridge and the veths are removed on exit, also after an error or Ctrl-C.
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

from paddle_ngraph.quiet import quiet_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SCRIPT = os.path.join(ROOT, "examples", "fleet_mnist_mlp.py")
PYTHON = sys.executable
VENV_BIN = os.path.dirname(PYTHON)
PREFIX = "pdng"
BRIDGE = f"{PREFIX}br0"
SUBNET = "10.77.0"


def namespace(i: int) -> str:
    return f"{PREFIX}-h{i}"


def hostname(i: int) -> str:
    return f"host{i}"


def address(i: int) -> str:
    return f"{SUBNET}.{i}"


def log(message: str):
    print(f"[netns_cluster] {message}", file=sys.stderr, flush=True)


class Cluster:
    """Creates the namespaces on enter, removes everything it created on exit. Another tool may use
    its own prefix and subnet (tools/k8s_rehearsal.py does), so that both can run at once."""

    def __init__(self, hosts: int, rate: str | None, delay: str | None, dry_run: bool,
                 prefix: str = PREFIX, subnet: str = SUBNET):
        self.hosts, self.rate, self.delay, self.dry_run = hosts, rate, delay, dry_run
        self.prefix, self.subnet, self.bridge = prefix, subnet, f"{prefix}br0"
        self.created_namespaces: list[str] = []
        self.created_bridge = False
        self.created_etc: list[str] = []  # /etc/netns/<ns> folders (and /etc/netns if we made it)

    def sh(self, *cmd: str, check: bool = True):
        if self.dry_run:
            print(shlex.join(cmd))
            return subprocess.CompletedProcess(cmd, 0, "", "")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if check and proc.returncode != 0:
            raise RuntimeError(f"`{shlex.join(cmd)}` failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc

    def namespace(self, i: int) -> str:
        return f"{self.prefix}-h{i}"

    def address(self, i: int) -> str:
        return f"{self.subnet}.{i}"

    def in_host(self, i: int, *cmd: str):
        return self.sh("ip", "netns", "exec", self.namespace(i), *cmd)

    def __enter__(self):
        leftovers = [self.namespace(i) for i in range(1, self.hosts + 1) if self.namespace(i) in existing_namespaces()]
        if leftovers and not self.dry_run:
            raise RuntimeError(f"namespace(s) {', '.join(leftovers)} exist already (another run, or one killed "
                               f"with SIGKILL): remove them with `{sys.argv[0]} --cleanup` first")
        self.qdisc = link_qdisc(self.rate, self.delay, check=not self.dry_run) if self.rate or self.delay else None
        try:
            self._create()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _create(self):
        log(f"creating {self.hosts} hosts on bridge {self.bridge} ({self.subnet}.0/24)"
            + (f", each host's link: {' '.join(self.qdisc)}" if self.qdisc else ""))
        self.sh("ip", "link", "add", self.bridge, "type", "bridge")
        self.created_bridge = True
        self.sh("ip", "link", "set", self.bridge, "up")
        for i in range(1, self.hosts + 1):
            ns, veth = self.namespace(i), f"{self.prefix}-v{i}"
            self.sh("ip", "netns", "add", ns)
            self.created_namespaces.append(ns)
            self._write_hosts_file(ns)
            self.sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            self.sh("ip", "link", "set", veth, "master", self.bridge, "up")
            self.in_host(i, "ip", "addr", "add", f"{self.address(i)}/24", "dev", "eth0")
            self.in_host(i, "ip", "link", "set", "eth0", "up")
            self.in_host(i, "ip", "link", "set", "lo", "up")
            if self.qdisc:
                self.in_host(i, "tc", "qdisc", "add", "dev", "eth0", "root", *self.qdisc)
        if not self.dry_run:
            for i in range(1, self.hosts + 1):
                self._wait_forwarding(f"{self.prefix}-v{i}")

    def _write_hosts_file(self, ns: str):
        """`ip netns exec` bind-mounts /etc/netns/<ns>/hosts over /etc/hosts: there every host name
        resolves to its 10.77.0.x address (paddle.distributed.launch finds its own node's IP so)."""
        lines = ["127.0.0.1 localhost"] + [f"{self.address(i)} {hostname(i)}" for i in range(1, self.hosts + 1)]
        folder = os.path.join("/etc/netns", ns)
        if self.dry_run:
            print(f"# write {folder}/hosts: " + "; ".join(lines))
            return
        if not os.path.isdir("/etc/netns"):
            os.makedirs("/etc/netns")
            self.created_etc.append("/etc/netns")
        os.makedirs(folder, exist_ok=True)
        self.created_etc.append(folder)
        with open(os.path.join(folder, "hosts"), "w") as f:
            f.write("\n".join(lines) + "\n")

    @staticmethod
    def _wait_forwarding(port: str):
        """A new bridge port may pass through listening/learning before it forwards (state 3)."""
        path = f"/sys/class/net/{port}/brport/state"
        for _ in range(100):
            with open(path) as f:
                if f.read().strip() == "3":
                    return
            time.sleep(0.1)
        raise RuntimeError(f"bridge port {port} does not forward after 10 s")

    def __exit__(self, *exc):
        veths = [f"{self.prefix}-v{i}" for i in range(1, len(self.created_namespaces) + 1)]
        if not self.dry_run:
            # A launcher that had to be SIGKILLed (stop()) leaves its daemons and ranks running in the
            # namespaces, still holding our stdout: end them before their hosts go.
            for ns in self.created_namespaces:
                kill_processes_in(ns)
        for ns in reversed(self.created_namespaces):  # deleting a namespace deletes its veth and the peer
            self.sh("ip", "netns", "del", ns, check=False)
        self.created_namespaces.clear()
        if not self.dry_run:
            wait_until_gone(veths)
        if self.created_bridge:
            self.sh("ip", "link", "del", self.bridge, check=False)
            self.created_bridge = False
        for folder in reversed(self.created_etc):
            shutil.rmtree(folder, ignore_errors=True)
        self.created_etc.clear()
        if not self.dry_run:
            log("namespaces and bridge removed")
        return False


def kill_processes_in(ns: str):
    """SIGKILL every process whose network namespace is ``ns`` (`ip netns pids`)."""
    listed = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
    for pid in listed:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def rate_bits(rate: str) -> float:
    """tc's rate syntax (10gbit, 500mbit, 100kbit, 1000bit) in bits per second."""
    match = re.fullmatch(r"([0-9.]+)\s*([kmgt]?)bit", rate.strip().lower())
    if not match:
        raise RuntimeError(f"--rate {rate!r}: expected a number with bit, kbit, mbit, gbit or tbit (e.g. 10gbit)")
    return float(match.group(1)) * 1000 ** " kmgt".index(match.group(2) or " ")


def link_qdisc(rate: str | None, delay: str | None, check: bool = True) -> list[str]:
    """The root qdisc of a host's link. A rate alone: a token bucket (tbf), in every kernel; a delay
    needs netem (sch_netem), which some kernels do not have: then say so rather than run unlimited."""
    if delay:
        if check and not netem_available():
            raise RuntimeError(f"--delay {delay}: this kernel has no netem qdisc (sch_netem), the only tc qdisc "
                               f"that delays packets; run without --delay (--rate alone uses tbf)")
        return ["netem", "delay", delay] + (["rate", rate, "limit", "100000"] if rate else [])
    # Burst: 1 ms of traffic, and at least two 64 KB segments (veths pass GSO segments whole).
    burst = max(int(rate_bits(rate) / 8 / 1000), 2 * 65536)
    return ["tbf", "rate", rate, "burst", str(burst), "latency", "50ms"]


def netem_available() -> bool:
    name = f"{PREFIX}-qdisc-probe"
    subprocess.run(["ip", "link", "add", name, "type", "veth", "peer", "name", name + "p"], capture_output=True)
    try:
        return subprocess.run(["tc", "qdisc", "add", "dev", name, "root", "netem"], capture_output=True).returncode == 0
    finally:
        subprocess.run(["ip", "link", "del", name], capture_output=True)


def wait_until_gone(links: list[str], timeout: float = 10.0):
    """The kernel tears a deleted namespace's devices down asynchronously: a run started right after
    this one would find its veth names still taken ("File exists")."""
    deadline = time.time() + timeout
    for link in links:
        while subprocess.run(["ip", "link", "show", link], capture_output=True).returncode == 0:
            if time.time() > deadline:
                log(f"{link} still exists {timeout:.0f} s after its namespace was deleted")
                return
            time.sleep(0.05)


def existing_namespaces() -> set[str]:
    proc = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return {line.split()[0] for line in proc.stdout.splitlines() if line.strip()}


def as_host(i: int, cmd: list[str]) -> list[str]:
    """cmd run in host i's namespace under its own host name."""
    return ["ip", "netns", "exec", namespace(i), "unshare", "--uts", "sh", "-c",
            'hostname "$0" && exec "$@"', hostname(i), *cmd]


AGENT = """#!/bin/sh
# Launch agent for Open MPI/PRRTE in place of ssh: `agent [ssh options] HOST COMMAND...` runs
# COMMAND (a shell command line) in HOST's network namespace under HOST's host name.
while [ $# -gt 0 ]; do case "$1" in -*) shift;; *) break;; esac; done
host="$1"; shift
case "$host" in
{cases}
  *) echo "netns agent: unknown host $host" >&2; exit 255;;
esac
exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$name" "$*"
"""


def write_agent(hosts: int, directory: str) -> str:
    cases = "\n".join(f'  {address(i)}|{hostname(i)}) ns={namespace(i)}; name={hostname(i)};;'
                      for i in range(1, hosts + 1))
    path = os.path.join(directory, "netns_agent.sh")
    with open(path, "w") as f:
        f.write(AGENT.format(cases=cases))
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def mpirun_command(args, agent: str, program: list[str]) -> list[str]:
    """mpirun started on host1 (the head node); the other hosts' daemons through the agent."""
    hosts = ",".join(f"{address(i)}:{args.ranks_per_host}" for i in range(1, args.hosts + 1))
    subnet = f"{SUBNET}.0/24"
    exported = [x for key in sorted(forwarded_env(args)) for x in ("-x", key)]
    cmd = [os.path.join(VENV_BIN, "mpirun"), "--allow-run-as-root", "--oversubscribe",
           "-np", str(args.hosts * args.ranks_per_host), "--host", hosts, "--map-by", "node",
           "--prtemca", "plm_ssh_agent", agent,
           "--prtemca", "oob_tcp_if_include", subnet,
           "--mca", "btl_tcp_if_include", subnet,
           "--mca", "oob_tcp_if_include", subnet,
           *exported, *program]
    return as_host(1, cmd)


def paddle_launch_commands(args, program: list[str], log_dir: str) -> list[list[str]]:
    """One launcher per host, the first is the master."""
    ips = ",".join(address(i) for i in range(1, args.hosts + 1))
    commands = []
    for i in range(1, args.hosts + 1):
        cmd = [PYTHON, "-m", "paddle.distributed.launch", "--ips", ips, "--nproc_per_node",
               str(args.ranks_per_host), "--log_dir", os.path.join(log_dir, hostname(i)), *program[1:]]
        commands.append(as_host(i, cmd))
    return commands


def forwarded_env(args) -> dict[str, str]:
    quiet = quiet_env()  # the caller's GLOG_minloglevel and PYTHONWARNINGS, or quiet ones
    env = {"PYTHONPATH": os.environ.get("PYTHONPATH", ROOT), "GLOG_minloglevel": quiet["GLOG_minloglevel"],
           "PYTHONWARNINGS": quiet["PYTHONWARNINGS"]}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--env {item!r}: expected KEY=VALUE")
        env[key] = value
    return env


def program_of(args) -> list[str]:
    if args.probe:
        return [PYTHON, os.path.abspath(__file__), "--probe-rank"]
    return [PYTHON, args.script, *args.script_args]


def run(args) -> int:
    env = dict(os.environ, **forwarded_env(args))
    program = program_of(args)
    with tempfile.TemporaryDirectory(prefix="netns_cluster.") as tmp, \
            Cluster(args.hosts, args.rate, args.delay, args.dry_run) as cluster:
        del cluster
        launchers = []
        if args.launcher in ("mpirun", "both"):
            launchers.append(("mpirun", [mpirun_command(args, write_agent(args.hosts, tmp), program)]))
        if args.launcher in ("paddle", "both"):
            launchers.append(("paddle", paddle_launch_commands(args, program, os.path.join(tmp, "logs"))))
        status = 0
        for name, commands in launchers:
            if args.dry_run:
                for cmd in commands:
                    print(shlex.join(cmd))
                continue
            log(f"{name}: {args.hosts} hosts x {args.ranks_per_host} ranks: {shlex.join(program)}")
            start = time.time()
            procs = [subprocess.Popen(cmd, env=env) for cmd in commands]
            try:
                codes = [wait(p, args.timeout) for p in procs]
            except BaseException:  # Ctrl-C or SIGTERM: end the job before its namespaces go
                stop(procs)
                raise
            if name == "paddle":
                show_paddle_logs(os.path.join(tmp, "logs"), args.hosts)
            code = next((c for c in codes if c != 0), 0)
            log(f"{name}: exit code {code} after {time.time() - start:.1f} s")
            status = status or code
        return status


def stop(procs: list[subprocess.Popen]):
    """SIGTERM to the launchers (mpirun and paddle launch pass it on to their ranks), then SIGKILL."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait(proc: subprocess.Popen, timeout: float) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        log(f"timed out after {timeout:g} s: killed")
        return 124


def show_paddle_logs(log_dir: str, hosts: int):
    """paddle.distributed.launch echoes its first local rank (workerlog.0) and writes the others'
    output to files only; print their rank lines (and errors) too, as mpirun would."""
    for i in range(1, hosts + 1):
        folder = os.path.join(log_dir, hostname(i))
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            if name.startswith("workerlog") and name != "workerlog.0":
                with open(os.path.join(folder, name), errors="replace") as f:
                    for line in f:
                        if line.startswith("[rank") or "Error" in line or "error" in line:
                            sys.stdout.write(line)
    sys.stdout.flush()


def probe_rank() -> int:
    """Run on every rank by --probe: exchanges host names and addresses with all ranks over the
    launcher's network (mpi4py's allgather under mpirun; the endpoints under paddle launch)."""
    import socket

    me = socket.gethostname()
    if "OMPI_COMM_WORLD_SIZE" in os.environ:
        sys.path.insert(0, ROOT)
        from paddle_ngraph.distributed.mpi import import_mpi

        comm = import_mpi().COMM_WORLD
        mine = f"{me}={own_address()}"
        peers = comm.allgather(mine)
        print(f"[rank {comm.Get_rank()}] on {mine} saw: {', '.join(peers)}", flush=True)
        print(f"[rank {comm.Get_rank()}] link: {own_qdisc()}", flush=True)
        return 0
    rank = os.environ.get("PADDLE_TRAINER_ID", "?")
    endpoints = os.environ.get("PADDLE_TRAINER_ENDPOINTS", "")
    print(f"[rank {rank}] on {me}={own_address()} saw endpoints: {endpoints}", flush=True)
    return 0


def own_qdisc() -> str:
    out = subprocess.run(["tc", "qdisc", "show", "dev", "eth0"], capture_output=True, text=True).stdout
    return out.splitlines()[0].strip() if out.strip() else "?"


def own_address() -> str:
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", "eth0"], capture_output=True, text=True).stdout
    return out.split()[3].split("/")[0] if out.split() else "?"


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 2)[2])
    p.add_argument("--hosts", type=int, default=2, help="namespaces (hosts), 1..250 (1: a baseline)")
    p.add_argument("--ranks-per-host", type=int, default=1)
    p.add_argument("--launcher", choices=["mpirun", "paddle", "both"], default="mpirun")
    p.add_argument("--script", default=DEFAULT_SCRIPT, help="the training script (default: %(default)s)")
    p.add_argument("--rate", help="rate limit of each host's link (tc tbf), e.g. 10gbit, 1gbit")
    p.add_argument("--delay", help="tc netem delay of each host's link, e.g. 100us (needs sch_netem)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="environment for every rank (e.g. PADDLE_NGRAPH_HIERARCHICAL=off); repeatable")
    p.add_argument("--port", type=int, default=36001, help="paddle launch master port on host1")
    p.add_argument("--timeout", type=float, default=600, help="seconds before the job is killed")
    p.add_argument("--probe", action="store_true",
                   help="instead of the script, have every rank print the host names and addresses it exchanged")
    p.add_argument("--dry-run", action="store_true", help="print the commands, change nothing")
    p.add_argument("--cleanup", action="store_true",
                   help="remove the namespaces, bridge and /etc/netns folders a killed run left, then exit")
    p.add_argument("--probe-rank", action="store_true", help=argparse.SUPPRESS)
    args, rest = p.parse_known_args(argv)
    if rest and rest[0] == "--":
        rest = rest[1:]
    args.script_args = rest
    if not args.probe_rank and not 1 <= args.hosts <= 250:
        p.error("--hosts must be between 1 and 250")
    if args.ranks_per_host < 1:
        p.error("--ranks-per-host must be >= 1")
    return args


def cleanup_leftovers(prefix: str = PREFIX) -> int:
    """What __exit__ would have removed, found by name (a SIGKILLed run never reached it)."""
    removed = []
    for ns in sorted(existing_namespaces()):
        if ns.startswith(f"{prefix}-h"):
            kill_processes_in(ns)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            removed.append(ns)
        folder = os.path.join("/etc/netns", ns)
        if ns.startswith(f"{prefix}-h") and os.path.isdir(folder):
            shutil.rmtree(folder, ignore_errors=True)
    bridge = f"{prefix}br0"
    if subprocess.run(["ip", "link", "show", bridge], capture_output=True).returncode == 0:
        subprocess.run(["ip", "link", "del", bridge], capture_output=True)
        removed.append(bridge)
    for folder in sorted(glob.glob(f"/etc/netns/{prefix}-h*")):  # namespaces already gone
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    log(f"removed {', '.join(removed)}" if removed else "nothing to remove")
    return 0


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def with_admin_path():
    """`tc` (and on some systems `ip`) live in /usr/sbin and /sbin, which a non-login shell's PATH
    (CI's, for one) may lack; the ranks this tool starts inherit the completed PATH."""
    parts = os.environ.get("PATH", "").split(os.pathsep)
    os.environ["PATH"] = os.pathsep.join(parts + [d for d in ("/usr/sbin", "/sbin") if d not in parts])


def main(argv=None) -> int:
    with_admin_path()
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.probe_rank:
        return probe_rank()
    if not args.dry_run and os.geteuid() != 0:
        log("needs root (CAP_NET_ADMIN to create namespaces, CAP_SYS_ADMIN for unshare --uts)")
        return 2
    if args.cleanup:
        return cleanup_leftovers()
    # Ctrl-C and SIGTERM unwind through the Cluster's __exit__, which removes the namespaces.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return run(args)
    except KeyboardInterrupt:
        log("interrupted; cleaned up")
        return 130
    except RuntimeError as e:
        log(f"error: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
