"""tools/netns_cluster.py: two network namespaces as two hosts, the fleet example across them.

Needs root with CAP_NET_ADMIN (namespaces, veths, bridge) and CAP_SYS_ADMIN (unshare --uts);
skipped otherwise, saying which step failed.
"""
import os
import signal
import subprocess
import sys
import time

import pytest

from paddle_ngraph.distributed.ccl import available as ccl_available
from paddle_ngraph.quiet import quiet_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "netns_cluster.py")
NAMESPACES = ("pdng-h1", "pdng-h2")


def namespaces_blocked() -> str:
    """Why namespaces cannot be made here, or '' if they can."""
    if os.geteuid() != 0:
        return "not root: creating network namespaces needs CAP_NET_ADMIN"
    name = f"pdng-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    try:
        uts = subprocess.run(["ip", "netns", "exec", name, "unshare", "--uts", "hostname", "probe"],
                             capture_output=True, text=True)
        if uts.returncode != 0:
            return f"`unshare --uts` in a namespace failed: {uts.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return ""


BLOCKED = namespaces_blocked()
needs_netns = pytest.mark.skipif(bool(BLOCKED), reason=BLOCKED)


def tool(*args, timeout=120):
    env = quiet_env(PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, timeout=timeout, env=env)


def assert_cleaned_up():
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in listed for ns in NAMESPACES), listed
    assert subprocess.run(["ip", "link", "show", "pdngbr0"], capture_output=True).returncode != 0, "bridge left"
    assert not any(os.path.exists(f"/etc/netns/{ns}") for ns in NAMESPACES), "hosts files left in /etc/netns"


def test_dry_run_prints_the_commands_and_changes_nothing():
    proc = tool("--dry-run", "--rate", "1gbit", "--delay", "100us", "--launcher", "both", "--", "--steps", "3")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for expected in ("ip netns add pdng-h2", "ip link set pdng-v1 master pdngbr0 up",
                     "tc qdisc add dev eth0 root netem delay 100us rate 1gbit",
                     "--host 10.77.0.1:1,10.77.0.2:1", "plm_ssh_agent",
                     "paddle.distributed.launch --ips 10.77.0.1,10.77.0.2 --nproc_per_node 1",
                     "fleet_mnist_mlp.py --steps 3", "ip netns del pdng-h1"):
        assert expected in out, f"{expected!r} not in:\n{out}"
    if not BLOCKED:
        assert_cleaned_up()


def test_a_rate_alone_is_a_token_bucket():
    proc = tool("--dry-run", "--rate", "10gbit")
    assert proc.returncode == 0, proc.stderr
    assert "tc qdisc add dev eth0 root tbf rate 10gbit burst 1250000 latency 50ms" in proc.stdout, proc.stdout


@pytest.mark.distributed
@needs_netns
def test_rate_limited_links_are_in_place_during_the_job():
    probe = tool("--rate", "1gbit", "--probe")
    assert probe.returncode == 0, probe.stdout[-2000:] + probe.stderr[-3000:]
    for rank in (0, 1):
        assert f"[rank {rank}] link: qdisc tbf" in probe.stdout and "rate 1Gbit" in probe.stdout, probe.stdout
    assert_cleaned_up()


def run_across_hosts(launcher):
    probe = tool("--launcher", launcher, "--probe")
    assert probe.returncode == 0, probe.stdout[-2000:] + probe.stderr[-3000:]
    assert_cleaned_up()
    if launcher == "mpirun":  # addresses exchanged over MPI between the namespaces
        seen = "saw: host1=10.77.0.1, host2=10.77.0.2"
        assert f"[rank 0] on host1=10.77.0.1 {seen}" in probe.stdout, probe.stdout
        assert f"[rank 1] on host2=10.77.0.2 {seen}" in probe.stdout, probe.stdout
    else:  # the launchers agreed on both hosts' endpoints and on the ranks
        seen = "saw endpoints: 10.77.0.1:"
        assert f"[rank 0] on host1=10.77.0.1 {seen}" in probe.stdout, probe.stdout
        assert f"[rank 1] on host2=10.77.0.2 {seen}" in probe.stdout, probe.stdout
        assert "10.77.0.2:" in probe.stdout.split(seen, 1)[1].splitlines()[0]
    run = tool("--launcher", launcher, "--", "--steps", "6", "--warmup", "2", "--log-every", "5")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert_cleaned_up()
    for rank in (0, 1):
        assert f"[rank {rank}] step 5 loss" in run.stdout, run.stdout
        assert f"[rank {rank}] " in run.stdout and "samples/s (global, steps 2..5, 2 ranks x batch 64)" in run.stdout
    assert f"{launcher}: exit code 0" in run.stderr


@pytest.mark.distributed
@needs_netns
def test_mpirun_across_two_namespaces():
    run_across_hosts("mpirun")


@pytest.mark.distributed
@needs_netns
@pytest.mark.skipif(not ccl_available(), reason="the ccl transport (paddle launch's) is not built")
def test_paddle_launch_across_two_namespaces():
    run_across_hosts("paddle")


@pytest.mark.distributed
@needs_netns
def test_two_hosts_of_two_ranks_choose_the_hierarchical_allreduce():
    """hierarchical: auto groups the ranks by host name (host1, host2): 2 nodes of 2 ranks."""
    run = tool("--ranks-per-host", "2", "--env", "PADDLE_NGRAPH_LOG_LEVEL=INFO", "--",
               "--steps", "4", "--warmup", "1", "--log-every", "3")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "rank 0: hierarchical allreduce (hierarchical=auto; 2 node(s) of 2/2 rank(s))" in run.stdout + run.stderr
    assert all(f"[rank {r}] step 3 loss" in run.stdout for r in range(4)), run.stdout
    assert_cleaned_up()


@pytest.mark.distributed
@needs_netns
def test_namespaces_removed_after_a_failed_job():
    proc = tool("--", "--steps", "not-a-number")
    assert proc.returncode != 0
    assert "mpirun: exit code" in proc.stderr and "exit code 0" not in proc.stderr, proc.stderr[-2000:]
    assert_cleaned_up()


@pytest.mark.distributed
@needs_netns
def test_namespaces_removed_after_ctrl_c():
    env = quiet_env(PYTHONPATH=ROOT)
    # As from a terminal: a suite started in the background by a shell without job control (a CI
    # runner, `cmd &` in a script) inherits SIGINT ignored, and Python keeps it ignored.
    proc = subprocess.Popen([sys.executable, TOOL, "--", "--steps", "100000"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 60
    while time.time() < deadline and "pdng-h2" not in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                                      text=True).stdout:
        time.sleep(0.2)
    time.sleep(3)  # the job is running
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted" in err
    assert_cleaned_up()


@pytest.mark.distributed
@needs_netns
def test_cleanup_removes_what_a_killed_run_left_and_a_new_run_refuses_until_then():
    # What a SIGKILLed run leaves: a namespace with its hosts folder, and the bridge.
    subprocess.run(["ip", "netns", "add", NAMESPACES[0]], check=True)
    subprocess.run(["ip", "link", "add", "pdngbr0", "type", "bridge"], check=True)
    os.makedirs(f"/etc/netns/{NAMESPACES[0]}", exist_ok=True)
    try:
        refused = tool("--probe")
        assert refused.returncode == 1 and "exist already" in refused.stderr and "--cleanup" in refused.stderr, \
            refused.stderr
        cleaned = tool("--cleanup")
        assert cleaned.returncode == 0 and "pdngbr0" in cleaned.stderr, cleaned.stderr
        assert_cleaned_up()
    finally:
        subprocess.run(["ip", "netns", "del", NAMESPACES[0]], capture_output=True)
        subprocess.run(["ip", "link", "del", "pdngbr0"], capture_output=True)
