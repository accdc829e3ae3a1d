"""The rehearsal of deploy/k8s/*.yaml (tools/k8s_rehearsal.py): pods as network and mount namespaces,
real sshd on port 2222 with a generated key, the launcher's command from mpijob.yaml verbatim with the
MPI Operator's environment and hostfile; the PaddleJob's pods with the training operator's environment.
Both jobs train to what one process does on the whole batch.

Needs root (namespaces, mounts, setpriv), sshd and ssh (`make test` installs openssh-server from
Debian's packages); skipped otherwise, saying which step failed.

PADDLE_NGRAPH_THREADS=1 replaces the manifests' 2: this machine has 2 cores for 2 ranks.
"""
import copy
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import yaml

from paddle_ngraph.distributed.ccl import available as ccl_available

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "k8s_rehearsal.py")
SSHD = "/usr/sbin/sshd"
THREADS = ("--env", "PADDLE_NGRAPH_THREADS=1")


def blocked() -> str:
    """Why the rehearsal cannot run here, or '' if it can."""
    if os.geteuid() != 0:
        return "not root: network and mount namespaces need CAP_NET_ADMIN and CAP_SYS_ADMIN"
    for tool in (SSHD, shutil.which("ssh"), shutil.which("ssh-keygen"), shutil.which("setpriv"),
                 shutil.which("ip", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")):
        if not tool or not os.path.exists(tool):
            return "sshd, ssh, ssh-keygen, setpriv or ip missing (make test-debs installs openssh-server, iproute2)"
    name = f"pdk8s-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    try:
        mounted = subprocess.run(["ip", "netns", "exec", name, "unshare", "--mount", "--uts", "--propagation",
                                  "private", "sh", "-c", "mount -t tmpfs tmpfs /opt && mount -t overlay overlay "
                                  "-o lowerdir=/etc:/usr /etc && hostname probe"], capture_output=True, text=True)
        if mounted.returncode != 0:
            return f"mounts in a pod's mount namespace failed: {mounted.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return ""


BLOCKED = blocked()
pytestmark = pytest.mark.skipif(bool(BLOCKED), reason=BLOCKED)


def rehearse(*args, timeout=400):
    env = dict(os.environ, GLOG_minloglevel="2")
    proc = subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, timeout=timeout, env=env)
    assert "namespaces and bridge removed" in proc.stderr, proc.stderr[-3000:]
    return proc


def events(stderr: str) -> dict[str, float]:
    """'[k8s_rehearsal]   4.2s pod x Ready ...' -> {'pod x Ready ...': 4.2}"""
    out = {}
    for line in stderr.splitlines():
        match = re.match(r"\[k8s_rehearsal\]\s+([0-9.]+)s (.*)", line)
        if match:
            out[match.group(2)] = float(match.group(1))
    return out


def when(evs: dict[str, float], prefix: str) -> float:
    found = [t for e, t in evs.items() if e.startswith(prefix)]
    assert found, f"no event {prefix!r} in {list(evs)}"
    return found[0]


def losses(stdout: str) -> dict[int, dict[int, float]]:
    """{rank: {step: loss}} from the example's '[rank r] step s loss x' lines (any pod's log)."""
    out: dict[int, dict[int, float]] = {}
    for rank, step, loss in re.findall(r"\[rank (\d+)\] step (\d+) loss (\S+)", stdout):
        out.setdefault(int(rank), {})[int(step)] = float(loss)
    return out


def script_args(container: dict) -> list[str]:
    argv = [str(a) for a in container.get("command", []) + container.get("args", [])]
    i = next(i for i, a in enumerate(argv) if a.endswith("fleet_mnist_mlp.py"))
    return argv[i + 1:]


_REFERENCE = {}


def one_process(args: list[str], ranks: int) -> dict[int, float]:
    """The example in one process on the ranks' concatenated batches: the same steps' losses."""
    key = (tuple(args), ranks)
    if key not in _REFERENCE:
        batch = int(args[args.index("--batch-size") + 1]) if "--batch-size" in args else 64
        rest = [a for i, a in enumerate(args) if "--batch-size" not in (a, args[i - 1] if i else "")]
        env = dict(os.environ, GLOG_minloglevel="2", PYTHONPATH=ROOT, PADDLE_NGRAPH_THREADS="1")
        proc = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "fleet_mnist_mlp.py"), *rest,
                               "--batch-size", str(batch * ranks)], capture_output=True, text=True, env=env,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        _REFERENCE[key] = losses(proc.stdout)[0]
    return _REFERENCE[key]


def assert_trains_like_one_process(stdout: str, args: list[str], ranks: int):
    ranked = losses(stdout)
    assert sorted(ranked) == list(range(ranks)), stdout[-3000:]
    reference = one_process(args, ranks)
    assert sorted(reference) == sorted(ranked[0]) and len(reference) >= 5, (reference, ranked)
    # Each rank's loss is the mean over its shard; the ranks' mean is the loss of the whole batch.
    mean = [np.mean([ranked[r][s] for r in range(ranks)]) for s in sorted(reference)]
    np.testing.assert_allclose(mean, [reference[s] for s in sorted(reference)], rtol=2e-5)
    assert reference[max(reference)] < 0.5 * reference[0]  # and it learned


def manifest(name: str) -> dict:
    with open(os.path.join(ROOT, "deploy", "k8s", name)) as f:
        return yaml.safe_load(f)


def write_manifest(tmp_path, m: dict) -> str:
    path = os.path.join(tmp_path, "manifest.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(m, f)
    return path


def test_mpijob_waits_for_a_late_worker_and_trains_like_one_process():
    m = manifest("mpijob.yaml")
    workers = m["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
    run = rehearse("mpijob", *THREADS, "--late-worker", "1:4")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    evs = events(run.stderr)
    job = m["metadata"]["name"]
    late_ready = when(evs, f"pod {job}-worker-1 Ready")
    assert late_ready >= 4.0  # its sshd started 4 s late: the probe said so
    assert when(evs, "launcher created (WaitForWorkersReady; 2/2 workers Ready)") >= late_ready
    launcher = m["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    verbatim = " ".join(str(a) for a in launcher["command"] + launcher["args"])
    assert f"pod {job}-launcher created (pdk8s-h{workers + 1}, 10.78.0.{workers + 1}): {verbatim}" in evs, evs
    assert "launcher exited with 0: MPIJob Succeeded" in evs
    for i in range(workers):  # the ranks ran on the workers, started over ssh
        assert f"worker {job}-worker-{i}: 1 ssh login(s) accepted" in evs, evs
        assert f"[{job}-worker-{i}] Accepted publickey for mpiuser from 10.78.0.{workers + 1}" in run.stdout
    assert_trains_like_one_process(run.stdout, script_args(launcher), workers * m["spec"]["slotsPerWorker"])


def test_mpijob_launcher_started_before_the_workers_are_ready_fails():
    """launcherCreationPolicy AtStartup with a late worker: its name does not resolve yet."""
    run = rehearse("mpijob", *THREADS, "--late-worker", "1:6", "--launcher-creation", "AtStartup")
    assert run.returncode != 0
    assert "Could not resolve hostname fleet-mnist-worker-1.fleet-mnist-worker.default.svc" in run.stdout, \
        run.stdout[-3000:]
    assert "MPIJob Failed" in run.stderr


def test_mpijob_without_the_prte_hostfile_runs_every_rank_on_the_launcher(tmp_path):
    """What PRTE_MCA_prte_default_hostfile is for: with only the operator's OMPI_MCA_orte_* variables,
    Open MPI 5 starts every rank on the launcher, and the job 'succeeds'. (2 steps: the point is where
    the ranks run.)"""
    m = copy.deepcopy(manifest("mpijob.yaml"))
    args = m["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["args"]
    args[args.index("--steps") + 1] = "2"
    run = rehearse("mpijob", "--manifest", write_manifest(tmp_path, m), *THREADS,
                   "--drop-env", "PRTE_MCA_prte_default_hostfile")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "[rank 1] step 1 loss" in run.stdout
    assert "worker fleet-mnist-worker-0: 0 ssh login(s) accepted" in run.stderr
    assert "worker fleet-mnist-worker-1: 0 ssh login(s) accepted" in run.stderr


@pytest.mark.skipif(not ccl_available(), reason="the ccl transport (paddle launch's) is not built")
def test_paddlejob_workers_wait_for_a_late_rendezvous_and_train_like_one_process():
    m = manifest("paddlejob.yaml")
    job, workers = m["metadata"]["name"], m["spec"]["paddleReplicaSpecs"]["Worker"]["replicas"]
    run = rehearse("paddlejob", *THREADS, "--late-worker", "0:4")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    evs = events(run.stderr)
    assert f"pod {job}-worker-1: PADDLE_MASTER={job}-worker-0:36543 PADDLE_NNODES={workers} PADDLE_JOB_ID={job}" \
        in evs, evs
    assert "PaddleJob Succeeded" in evs
    for i in range(workers):
        assert f"[{job}-worker-{i}] [rank {i}] step" in run.stdout  # each pod logs its own rank
    container = m["spec"]["paddleReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert_trains_like_one_process(run.stdout, script_args(container), workers)


def test_a_killed_run_is_cleaned_up():
    env = dict(os.environ, GLOG_minloglevel="2")
    subprocess.run(["ip", "netns", "add", "pdk8s-h1"], check=True)
    try:
        refused = subprocess.run([sys.executable, TOOL, "paddlejob"], capture_output=True, text=True, env=env,
                                 timeout=60)
        assert refused.returncode == 1 and "exist already" in refused.stderr, refused.stderr
        cleaned = subprocess.run([sys.executable, TOOL, "--cleanup"], capture_output=True, text=True, env=env,
                                 timeout=60)
        assert cleaned.returncode == 0 and "pdk8s-h1" in cleaned.stderr, cleaned.stderr
    finally:
        subprocess.run(["ip", "netns", "del", "pdk8s-h1"], capture_output=True)


# --- the elastic MPIJob (deploy/k8s/mpijob-elastic.yaml) ----------------------------------------

ELASTIC_STEPS, KILL_AT = 24, 8


def elastic_manifest(tmp_path) -> str:
    """The elastic manifest with steps paced (0.25 s) so that the kill falls mid-run, every step logged."""
    m = copy.deepcopy(manifest("mpijob-elastic.yaml"))
    args = m["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["args"]
    args[args.index("--steps") + 1] = str(ELASTIC_STEPS)
    args[args.index("--log-every") + 1] = "1"
    args += ["--step-seconds", "0.25"]
    return write_manifest(tmp_path, m)


def elastic_reference(tmp_path, phases: list[tuple[int, int]]) -> str:
    """examples/elastic_mnist_mlp.py as separate jobs of plain `mpirun --with-ft ulfm` on this machine:
    ``phases`` [(ranks, until step), ...], each from the commit the one before wrote to disk. Returns
    the last job's parameter digest (every rank's, checked equal)."""
    ckpt = os.path.join(tmp_path, "reference")
    mpirun = os.path.join(os.path.dirname(sys.executable), "mpirun")
    env = dict(os.environ, GLOG_minloglevel="2", PYTHONPATH=ROOT, PADDLE_NGRAPH_THREADS="1")
    digests = []
    for ranks, until in phases:
        argv = [mpirun, "--with-ft", "ulfm", "--oversubscribe", "-np", str(ranks), "-x", "PADDLE_NGRAPH_THREADS",
                "-x", "PYTHONPATH", "-x", "GLOG_minloglevel", sys.executable,
                os.path.join(ROOT, "examples", "elastic_mnist_mlp.py"), "--steps", str(until), "--min-ranks", "1",
                "--checkpoint-dir", ckpt, "--save-at", str(until)]
        if os.geteuid() == 0:
            argv.insert(1, "--allow-run-as-root")
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        digests = re.findall(rf"final step {until} parameters sha256 (\w+)", proc.stdout)
        assert len(digests) == ranks and len(set(digests)) == 1, proc.stdout[-2000:]
    return digests[0]


@pytest.mark.distributed
def test_elastic_mpijob_finishes_on_the_survivors_when_a_workers_ranks_are_killed(tmp_path):
    """Worker 1's ranks SIGKILLed mid-run (an OOM kill: its sshd and Open MPI daemon live on): rank 0
    continues alone from the last commit, the job succeeds, and its parameters are bitwise those of a
    2-rank job to that commit followed by a 1-rank job from it."""
    run = rehearse("mpijob", "--manifest", elastic_manifest(tmp_path), *THREADS,
                   "--kill-worker", f"1:{KILL_AT}", "--kill", "ranks", timeout=200)
    evs = events(run.stderr)
    assert "killed the ranks of pod mnist-elastic-worker-1 (SIGKILL): python" in evs, evs
    assert run.returncode == 0 and "launcher exited with 0: MPIJob Succeeded" in evs, \
        run.stdout[-3000:] + run.stderr[-3000:]
    out = run.stdout
    assert "[world 0] rank 0 of 2 from step 0" in out and "[world 1] rank 1 of 2 from step 0" in out
    assert "lost world rank(s) [1]" in out, out[-3000:]
    resumed = [int(s) for s in re.findall(r"\[world 0\] rank 0 of 1 from step (\d+)", out)]
    # Rank 0 logs step KILL_AT after the commit that ends step KILL_AT - 1 (every 2 steps): the survivor
    # resumes from that one, or a later one if the kill came late.
    assert len(resumed) == 1 and KILL_AT <= resumed[0] < ELASTIC_STEPS and resumed[0] % 2 == 0, resumed
    finals = re.findall(r"\[world (\d+)\] final step (\d+) parameters sha256 (\w+)", out)
    assert [(w, int(s)) for w, s, _ in finals] == [("0", ELASTIC_STEPS)], finals  # world 1 died
    losses = {int(s): float(v) for s, v in re.findall(r"\[rank 0\] step (\d+) loss (\S+) \(1 rank", out)}
    assert losses[ELASTIC_STEPS - 1] < 0.5 * losses[resumed[0]], losses  # and it learned on one rank
    reference = elastic_reference(tmp_path, [(2, resumed[0]), (1, ELASTIC_STEPS)])
    assert finals[0][2] == reference


@pytest.mark.distributed
@pytest.mark.parametrize("restart_policy", ["Never", "OnFailure"])
def test_elastic_mpijob_a_worker_pod_killed_ends_the_job(tmp_path, restart_policy):
    """Every process of worker 1's pod SIGKILLed (sshd, prted, its rank: a lost node, an evicted pod):
    Open MPI 5.0's launcher ends every rank, fault tolerance or not. With the manifest's
    restartPolicy Never the pod stays Failed; with OnFailure the kubelet restarts its container in
    the same pod and it is Ready again, after the job has ended."""
    path = elastic_manifest(tmp_path)
    with open(path) as f:
        m = yaml.safe_load(f)
    assert m["spec"]["mpiReplicaSpecs"]["Worker"]["restartPolicy"] == "Never"
    m["spec"]["mpiReplicaSpecs"]["Worker"]["restartPolicy"] = restart_policy
    run = rehearse("mpijob", "--manifest", write_manifest(tmp_path, m), *THREADS,
                   "--kill-worker", f"1:{KILL_AT}", timeout=200)
    evs = events(run.stderr)
    killed = when(evs, "killed every process of pod mnist-elastic-worker-1 (SIGKILL): ")
    killed_names = next(e for e in evs if e.startswith("killed every process")).split(": ", 1)[1].split(", ")
    assert {"sshd", "prted", "python"} <= set(killed_names), killed_names
    ended = when(evs, "launcher exited with ")
    assert ended - killed < 10, (killed, ended)
    # Which of the two reports comes first depends on whether the daemon's TCP link or its ssh
    # session is seen to go first.
    assert ("PRTE has lost communication with a remote daemon" in run.stdout
            or "A daemon failed to report back" in run.stdout), run.stdout[-3000:]
    assert "final step" not in run.stdout  # no rank finished: the survivor was ended too
    assert "lost world rank(s)" not in run.stdout
    exited = "container of pod mnist-elastic-worker-1 exited with 137; restartPolicy "
    if restart_policy == "Never":
        assert exited + "Never: not restarted, the pod is Failed" in evs, evs
        assert not any(e.startswith("pod mnist-elastic-worker-1: container restarted") for e in evs)
    else:
        assert exited + "OnFailure: restarted" in evs, evs
        restarted = when(evs, "pod mnist-elastic-worker-1: container restarted (restart 1)")
        ready_again = when(evs, "pod mnist-elastic-worker-1 Ready")  # the last time it became Ready
        assert ended <= restarted < ready_again, (ended, restarted, ready_again)
        assert "worker mnist-elastic-worker-1: 1 ssh login(s) accepted, 1 container restart(s)" in evs, evs
