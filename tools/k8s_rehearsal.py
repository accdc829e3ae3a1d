#!/usr/bin/env python
"""A rehearsal of deploy/k8s/mpijob.yaml and deploy/k8s/paddlejob.yaml on one machine: each pod a
network namespace (tools/netns_cluster.py's bridge and veths, prefix pdk8s, 10.78.0.0/24), doing
what the MPI Operator, the training operator and the kubelet would do with the manifest. Needs root.

A pod here is its namespace plus a mount namespace laid out as the image's file system:
- /opt/paddle_ngraph/venv is this checkout's venv (a bind mount: an overlay would give its libraries
  other inodes than the same files reached through the run paths of the native extensions, and the
  dynamic loader would load them twice), /opt/paddle_ngraph/examples this checkout's examples: one
  fixed path on every pod, the launcher's mpirun among them. Where the venv's paddle_ngraph is
  another checkout (an editable install elsewhere), this one is mounted over it;
- /etc is an overlay carrying the pod's DNS view as /etc/hosts (the names the cluster's DNS would
  give it: <pod>.<service>.<namespace>.svc[.cluster.local], a worker's only once it is Ready),
  mpiuser (uid 1000) in /etc/passwd, the image's ssh client configuration, and on the MPIJob's
  launcher the operator's /etc/mpi/hostfile;
- /home/mpiuser (with the image's .sshd_config), /tmp: the pod's own; the job's ssh key pair,
  generated here, mounted read-only at sshAuthMountPath as the operator's Secret is;
- directories uid 1000 may not enter on this machine (/root, mode 700, holds the Python the venv
  runs) are replaced by an empty tmpfs holding only what the pods need from them.
Its container runs as uid 1000 with the manifest's command, args and env verbatim, the env the
operator adds (the MPIJob launcher's OMPI_MCA_* variables and K_MPI_JOB_ROLE; the PaddleJob's
PADDLE_MASTER, PADDLE_NNODES, PADDLE_JOB_ID) and the image's (PATH, HOME); nothing from this shell.

    tools/k8s_rehearsal.py mpijob --env PADDLE_NGRAPH_THREADS=1 --late-worker 1:6
    tools/k8s_rehearsal.py paddlejob --env PADDLE_NGRAPH_THREADS=1
    tools/k8s_rehearsal.py --cleanup        # what a SIGKILLed run left behind

MPIJob: the workers start (sshd), the readiness probe of the manifest is run against each; with
launcherCreationPolicy WaitForWorkersReady the launcher is created once all are Ready, as the
operator does (--late-worker I:S starts worker I's container S seconds late, as a slow image pull
would). Then the launcher's exit code is the job's; cleanPodPolicy Running ends the workers.
With --kill-worker I:STEP (an elastic MPIJob), once rank 0 logs STEP every process of worker I's pod
(--kill pod), its ranks (--kill ranks) or one rank (--kill rank:R) get SIGKILL; the kubelets keep
probing, every pod's DNS view follows readiness, and a container that exited is restarted or not
per the Worker restartPolicy (also when the launcher's mpirun has --with-ft: probing and DNS).
PaddleJob: all pods start at once (--late-worker 0:S delays the rendezvous host: the others wait);
the job succeeds when every pod does. Pod logs go to stdout, each line prefixed with [pod-name];
the rehearsal's own lines go to stderr, prefixed with [k8s_rehearsal] and the time since start.
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns_cluster  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREFIX, SUBNET = "pdk8s", "10.78.0"
IMAGE = "/opt/paddle_ngraph"
USER, UID, HOME = "mpiuser", 1000, "/home/mpiuser"
# The image's environment (deploy/image/build.sh and Dockerfile).
IMAGE_ENV = {"PATH": f"{IMAGE}/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
             "HOME": HOME, "GLOG_minloglevel": "2"}
CLUSTER_DOMAIN = "cluster.local"
START = time.time()


def log(message: str):
    print(f"[k8s_rehearsal] {time.time() - START:6.1f}s {message}", file=sys.stderr, flush=True)


class Failure(RuntimeError):
    pass


# --- the pods' file system -------------------------------------------------------------------

def needed_host_paths() -> list[str]:
    """What a pod reads from this machine: the venv, the Python it runs on, this checkout."""
    venv = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))
    return [venv, os.path.realpath(sys.base_prefix), ROOT]


def closed_ancestors(paths: list[str]) -> dict[str, list[str]]:
    """{ancestor uid 1000 cannot enter (no o+x): [needed paths below it]}, topmost ancestor only."""
    closed: dict[str, list[str]] = {}
    for path in paths:
        parts = path.strip("/").split("/")
        for n in range(1, len(parts)):
            ancestor = "/" + "/".join(parts[:n])
            if not os.stat(ancestor).st_mode & 0o001:
                closed.setdefault(ancestor, []).append(path)
                break
    return closed


_INSTALLED: list[str] = []
POD_OWN_DIRS = ("/opt", "/home", "/tmp")  # each pod mounts an empty tmpfs of its own over these


def installed_package() -> str:
    """Where the venv's Python finds paddle_ngraph without this shell's PYTHONPATH."""
    if not _INSTALLED:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        found = subprocess.run([sys.executable, "-c", "import importlib.util as u; "
                                "print(u.find_spec('paddle_ngraph').submodule_search_locations[0])"],
                               capture_output=True, text=True, cwd="/", env=env)
        if found.returncode != 0:
            raise Failure(f"paddle_ngraph is not installed in {sys.executable}'s venv (make build)")
        _INSTALLED.append(found.stdout.strip())
    return _INSTALLED[0]


class Pod:
    """One pod: a network namespace of the cluster, a mount namespace, a process tree."""

    def __init__(self, rehearsal: "Rehearsal", index: int, name: str, hostname: str, subdomain: str | None,
                 command: list[str], env: dict[str, str], role: str, start_delay: float = 0.0):
        self.r, self.index, self.name, self.hostname = rehearsal, index, name, hostname
        self.subdomain, self.command, self.env, self.role = subdomain, command, env, role
        self.start_delay = start_delay
        self.namespace = rehearsal.cluster.namespace(index)
        self.address = rehearsal.cluster.address(index)
        self.dir = os.path.join(rehearsal.tmp, name)
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []
        self.reader: threading.Thread | None = None
        self.ready_at: float | None = None
        self.ready = False  # the readiness probe's last answer (the kubelet thread's view)
        self.restarts = 0
        self.secret: str | None = None

    def fqdns(self) -> list[str]:
        """The names the cluster's DNS gives this pod (its hostname and subdomain: the headless
        Service's records; without a subdomain the per-replica Service of the training operator)."""
        ns = self.r.k8s_namespace
        base = f"{self.hostname}.{self.subdomain}.{ns}" if self.subdomain else f"{self.hostname}.{ns}"
        names = [f"{base}.svc.{CLUSTER_DOMAIN}", f"{base}.svc"]
        if not self.subdomain:  # a Service name resolves through the namespace's search domain
            names.append(self.hostname)
        return names

    def write_files(self, dns: list["Pod"], extra_etc: dict[str, str]):
        """The pod's overlays: /etc (hosts, passwd, group, ssh client config, extras) and the venv."""
        etc = os.path.join(self.dir, "etc")
        os.makedirs(os.path.join(etc, "ssh", "ssh_config.d"))
        os.makedirs(os.path.join(self.dir, "etc.work"))
        # The pod's own names (the kubelet's line, and what the cluster's DNS answers for it), then
        # those the DNS answers for the other pods.
        write(os.path.join(etc, "hosts"), self.hosts_text(dns))
        # The image has mpiuser as uid 1000; this machine may have someone else there.
        for table, entry in (("passwd", f"{USER}:x:{UID}:{UID}::{HOME}:/bin/sh"), ("group", f"{USER}:x:{UID}:")):
            with open(f"/etc/{table}") as f:
                kept = [line for line in f.read().splitlines()
                        if line.split(":")[0] != USER and line.split(":")[2:3] != [str(UID)]]
            write(os.path.join(etc, table), "\n".join(kept + [entry]) + "\n")
        shutil.copy(os.path.join(ROOT, "deploy", "image", "ssh_config"),
                    os.path.join(etc, "ssh", "ssh_config.d", "paddle_ngraph.conf"))
        for relative, text in extra_etc.items():
            path = os.path.join(etc, relative)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write(path, text)

    def setup_script(self, secret: str | None) -> str:
        """Runs as root in the pod's new mount and UTS namespaces, then becomes the container."""
        q = shlex.quote
        d = self.dir
        lines = ["set -e", f"hostname {q(self.hostname)}",
                 f"mount -t overlay overlay -o lowerdir=/etc,upperdir={q(d)}/etc,workdir={q(d)}/etc.work /etc"]
        for k, (ancestor, paths) in enumerate(sorted(closed_ancestors(needed_host_paths()).items())):
            keep = [os.path.join(d, "keep", f"{k}-{j}") for j in range(len(paths))]
            for path, stash in zip(paths, keep):
                lines += [f"mkdir -p {q(stash)}", f"mount --bind {q(path)} {q(stash)}"]
            lines.append(f"mount -t tmpfs -o mode=0755 tmpfs {q(ancestor)}")
            for path, stash in zip(paths, keep):
                lines += [f"mkdir -p {q(path)}", f"mount --bind {q(stash)} {q(path)}"]
        # The pod gets its own /opt, /home and /tmp (empty tmpfs): what it needs from below them (a
        # checkout or venv under /tmp, as a CI's clone may be) is kept aside first, outside them,
        # and mounted back at the same path after.
        covered = [p for p in dict.fromkeys(needed_host_paths())
                   if any(p == c or p.startswith(c + "/") for c in POD_OWN_DIRS)]
        aside = {p: os.path.join(self.r.keep_dir, self.hostname, str(i)) for i, p in enumerate(covered)}
        for path, stash in aside.items():
            lines += [f"mkdir -p {q(stash)}", f"mount --bind {q(path)} {q(stash)}"]

        def visible(path):  # where ``path`` can still be read once /opt, /home and /tmp are covered
            for kept, stash in aside.items():
                if path == kept or path.startswith(kept + "/"):
                    return stash + path[len(kept):]
            return path

        venv = needed_host_paths()[0]
        installed = installed_package()
        if installed != os.path.join(ROOT, "paddle_ngraph"):  # the image's wheel is this checkout's
            lines.append(f"mount --bind {q(os.path.join(ROOT, 'paddle_ngraph'))} {q(installed)}")
        lines += ["mount -t tmpfs -o mode=0755 tmpfs /opt",
                  f"mkdir -p {IMAGE}/venv {IMAGE}/examples",
                  f"mount --bind {q(visible(venv))} {IMAGE}/venv",
                  f"mount --bind {q(visible(os.path.join(ROOT, 'examples')))} {IMAGE}/examples",
                  "mount -t tmpfs -o mode=0755 tmpfs /home",
                  f"mkdir -p {HOME}",
                  f"cp {q(visible(os.path.join(ROOT, 'deploy', 'image', 'sshd_config')))} {HOME}/.sshd_config",
                  f"chown -R {UID}:{UID} {HOME}"]
        if secret:
            lines += [f"mkdir -p {q(self.r.ssh_mount)}", f"mount --bind -o ro {q(secret)} {q(self.r.ssh_mount)}"]
        lines += ["mount -t tmpfs -o mode=1777 tmpfs /tmp"]
        for path, stash in aside.items():
            lines += [f"mkdir -p {q(path)}", f"mount --bind {q(stash)} {q(path)}"]
        lines.append(f"cd {HOME}")
        if self.start_delay:
            lines.append(f"sleep {self.start_delay:g}  # the container starts late (a slow image pull)")
        env = [f"{k}={v}" for k, v in self.env.items()]
        lines.append("exec setpriv --reuid {0} --regid {0} --clear-groups env -i {1} {2}".format(
            UID, " ".join(q(e) for e in env), " ".join(q(c) for c in self.command)))
        return "\n".join(lines)

    def start(self, secret: str | None):
        self.secret = secret
        script = self.setup_script(secret)
        cmd = ["ip", "netns", "exec", self.namespace, "unshare", "--mount", "--uts", "--propagation", "private",
               "sh", "-c", script]
        log(f"pod {self.name} created ({self.namespace}, {self.address}): {shlex.join(self.command)}"
            + (f" (container starts {self.start_delay:g} s late)" if self.start_delay else ""))
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     errors="replace", start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            sys.stdout.write(f"[{self.name}] {line}")
            sys.stdout.flush()

    def probe_tcp(self, port: int) -> bool:
        """A kubelet's tcpSocket probe: does something accept connections at the pod's IP?"""
        probe = subprocess.run(["ip", "netns", "exec", self.namespace, "bash", "-c",
                                f"exec 3<>/dev/tcp/{self.address}/{port}"], capture_output=True)
        return probe.returncode == 0

    def restart(self):
        """The kubelet restarts the pod's container: same network namespace (address, name), a new
        mount namespace (the container's own file system starts afresh), the same volumes."""
        self.restarts += 1
        self.start_delay = 0.0
        if self.reader:
            self.reader.join(timeout=2)
        self.start(self.secret)

    def hosts_text(self, dns: list["Pod"]) -> str:
        own = f"{self.address}\t{' '.join(self.fqdns())} {self.hostname}"
        others = [f"{p.address}\t{' '.join(p.fqdns())}" for p in dns if p is not self]
        return "\n".join(["127.0.0.1\tlocalhost", own, *others]) + "\n"

    def update_dns(self, dns: list["Pod"]):
        """What the cluster's DNS answers now: rewritten in place in the /etc overlay's upper layer,
        which the running container sees."""
        with open(os.path.join(self.dir, "etc", "hosts"), "w") as f:
            f.write(self.hosts_text(dns))

    def wait(self, timeout: float | None = None) -> int:
        code = self.proc.wait(timeout=timeout)
        self.reader.join(timeout=5)
        return code

    def stop(self):
        """Ends every process in the pod's network namespace (the container and what sshd started)."""
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        kill_namespace_pids(self.namespace, signal.SIGTERM)
        deadline = time.time() + 5
        while time.time() < deadline and namespace_pids(self.namespace):
            time.sleep(0.1)
        kill_namespace_pids(self.namespace, signal.SIGKILL)
        if self.proc:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            if self.reader:
                self.reader.join(timeout=2)


def namespace_pids(namespace: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def kill_namespace_pids(namespace: str, sig: int):
    for pid in namespace_pids(namespace):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def write(path: str, text: str, mode: int = 0o644):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


# --- the operators ---------------------------------------------------------------------------

def container_env(container: dict, overrides: dict[str, str], drop: list[str]) -> dict[str, str]:
    env = {}
    for item in container.get("env", []):
        if "value" not in item:
            raise Failure(f"env {item['name']}: only plain values are rehearsed")
        env[item["name"]] = str(item["value"])
    env.update(overrides)
    for name in drop:
        env.pop(name, None)
    return env


def command_of(container: dict) -> list[str]:
    return [str(c) for c in container.get("command", []) + container.get("args", [])]


class Rehearsal:
    def __init__(self, args, manifest: dict, pods: int):
        self.args, self.manifest = args, manifest
        self.job = manifest["metadata"]["name"]
        self.k8s_namespace = manifest["metadata"].get("namespace", "default")
        self.ssh_mount = manifest["spec"].get("sshAuthMountPath", "/root/.ssh")
        self.tmp = tempfile.mkdtemp(prefix="k8s_rehearsal.")
        # Outside the directories each pod covers with its own tmpfs (Pod.setup_script).
        self.keep_dir = f"/run/k8s_rehearsal.{os.getpid()}"
        self.cluster = netns_cluster.Cluster(pods, None, None, False, prefix=PREFIX, subnet=SUBNET)
        self.pods: list[Pod] = []

    def __enter__(self):
        try:
            self.cluster.__enter__()
        except BaseException:
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        return self

    def __exit__(self, *exc):
        for pod in self.pods:
            pod.stop()
        self.cluster.__exit__(*exc)
        shutil.rmtree(self.tmp, ignore_errors=True)
        shutil.rmtree(self.keep_dir, ignore_errors=True)
        return False

    def generate_ssh_secret(self) -> str:
        """The operator's Secret <job>-ssh as mounted: id_rsa, id_rsa.pub, authorized_keys, owned by
        root, mode 0644 (the volume's default, for any sshAuthMountPath but /root/.ssh)."""
        secret = os.path.join(self.tmp, "ssh-secret")
        os.makedirs(secret)
        key = os.path.join(secret, "id_rsa")
        subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "521", "-m", "PEM", "-N", "", "-C", "",
                        "-f", key], check=True)
        shutil.copy(key + ".pub", os.path.join(secret, "authorized_keys"))
        mode = 0o600 if self.ssh_mount == "/root/.ssh" else 0o644
        for name in os.listdir(secret):
            os.chmod(os.path.join(secret, name), mode)
        os.chmod(secret, 0o755)
        os.chmod(self.tmp, 0o755)
        return secret


def late_workers(args) -> dict[int, float]:
    late = {}
    for item in args.late_worker:
        index, _, seconds = item.partition(":")
        late[int(index)] = float(seconds or 5)
    return late


def configmap_files(template: dict, configmap: str, data: dict[str, str]) -> dict[str, str]:
    """The files a pod template's volumes of ConfigMap ``configmap`` put under /etc ({path below /etc:
    text}), as the kubelet mounts them (``items``: those keys at those paths; else every key)."""
    mounts = {m["name"]: m["mountPath"] for c in template["spec"]["containers"] for m in c.get("volumeMounts", [])}
    files = {}
    for volume in template["spec"].get("volumes", []):
        source = volume.get("configMap", {})
        if source.get("name") != configmap or volume["name"] not in mounts:
            continue
        where = mounts[volume["name"]]
        if not where.startswith("/etc/"):
            raise Failure(f"volume {volume['name']}: only mounts under /etc are rehearsed, not {where}")
        items = source.get("items") or [{"key": k, "path": k} for k in data]
        for item in items:
            if item["key"] not in data:
                raise Failure(f"volume {volume['name']}: ConfigMap {configmap} has no key {item['key']!r}")
            files[os.path.join(where[len("/etc/"):], item["path"])] = data[item["key"]]
    return files


class Kubelet(threading.Thread):
    """The workers' kubelets while the job runs: the readiness probe every periodSeconds (a pod's DNS
    name is in every pod's view only while it is Ready: the headless Service's records), and a
    container that exited restarted per the replica's restartPolicy (OnFailure: when its code is not
    0, after ``restart_delay`` s, the kubelet's first back-off being short)."""

    def __init__(self, workers: list[Pod], everyone: list[Pod], probe: dict, port: int, restart_policy: str,
                 restart_delay: float):
        super().__init__(daemon=True)
        self.workers, self.everyone, self.port = workers, everyone, port
        self.period = float(probe.get("periodSeconds", 10))
        self.restart_policy, self.restart_delay = restart_policy, restart_delay
        self.stopping = threading.Event()
        self.exited: dict[str, float] = {}

    def dns_changed(self):
        ready = [p for p in self.workers if p.ready]
        for pod in self.everyone:
            if pod.proc is not None:
                pod.update_dns(ready + [pod])

    def run(self):
        while not self.stopping.is_set():
            self.sync(restart=True)
            self.stopping.wait(min(self.period, 1.0))

    def sync(self, restart: bool):
        """One round of the kubelets: containers that exited (restarted if due and ``restart``),
        then the readiness probes; every pod's DNS view follows."""
        changed = False
        for pod in self.workers:
            code = pod.proc.poll()
            if code is not None:
                status = 128 - code if code < 0 else code
                if pod.ready:
                    pod.ready, changed = False, True
                    log(f"pod {pod.name} not Ready (its container exited with {status}): its DNS name no "
                        f"longer resolves")
                due = self.restart_policy == "Always" or (self.restart_policy == "OnFailure" and status != 0)
                if pod.name not in self.exited:
                    self.exited[pod.name] = time.time()
                    log(f"container of pod {pod.name} exited with {status}; restartPolicy {self.restart_policy}: "
                        + ("restarted" if due else "not restarted, the pod is " + ("Failed" if status else
                                                                                 "Succeeded")))
                if due and restart and time.time() - self.exited[pod.name] >= self.restart_delay:
                    del self.exited[pod.name]
                    pod.restart()
                    log(f"pod {pod.name}: container restarted (restart {pod.restarts})")
                continue
            ok = pod.probe_tcp(self.port)
            if ok != pod.ready:
                pod.ready, changed = ok, True
                log(f"pod {pod.name} " + (f"Ready (tcpSocket {self.port} accepts): its DNS name resolves from now on"
                                          if ok else f"not Ready (tcpSocket {self.port} refused): its DNS name "
                                          f"no longer resolves"))
        if changed:
            self.dns_changed()

    def settle(self, timeout: float):
        """Waits (at most ``timeout`` s) until the restarts already due have happened and the
        restarted pods are Ready: a kubelet restarts a container whatever became of the job."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            due = [p for p in self.workers if p.proc.poll() is not None and p.proc.returncode != 0
                   and self.restart_policy in ("OnFailure", "Always")]
            if not due and all(p.ready for p in self.workers if p.restarts):
                return
            time.sleep(0.2)

    def stop(self):
        """Stops probing and restarting; what exited by now is still reported."""
        self.stopping.set()
        self.join(timeout=30)
        self.sync(restart=False)


def kill_pod(pod: Pod, only: str | None = None) -> list[str]:
    """SIGKILL to every process of the pod (its network namespace): the container and what sshd
    started in it (prted, the ranks), as a lost node or an evicted pod; with ``only``, to the
    processes of that name (``python``: the ranks, as the OOM killer picks the largest process)."""
    names = []
    for pid in namespace_pids(pod.namespace):
        try:
            with open(f"/proc/{pid}/comm") as f:
                name = f.read().strip()
            if only and only.startswith("rank:"):  # one rank, by mpirun's number
                with open(f"/proc/{pid}/environ", "rb") as f:
                    environ = f.read().split(b"\0")
                if f"OMPI_COMM_WORLD_RANK={only[5:]}".encode() not in environ or not name.startswith("python"):
                    continue
            elif only and not name.startswith(only):
                continue
            os.kill(pid, signal.SIGKILL)
            names.append(name)
        except (OSError, ProcessLookupError):
            pass
    return names


def run_mpijob(args, manifest: dict) -> int:
    spec = manifest["spec"]
    launcher_spec, worker_spec = spec["mpiReplicaSpecs"]["Launcher"], spec["mpiReplicaSpecs"]["Worker"]
    workers, slots = int(worker_spec["replicas"]), int(spec.get("slotsPerWorker", 1))
    policy = args.launcher_creation or spec.get("launcherCreationPolicy", "AtStartup")
    late = late_workers(args)
    kill = None
    if args.kill_worker:
        index, _, step = args.kill_worker.partition(":")
        kill = (int(index), int(step))
    with Rehearsal(args, manifest, workers + 1) as r:
        job = r.job
        secret = r.generate_ssh_secret()
        wcontainer = worker_spec["template"]["spec"]["containers"][0]
        service = f"{job}-worker"
        for i in range(workers):
            env = dict(IMAGE_ENV, **container_env(wcontainer, {}, []), K_MPI_JOB_ROLE="worker",
                       HOSTNAME=f"{job}-worker-{i}")
            r.pods.append(Pod(r, i + 1, f"{job}-worker-{i}", f"{job}-worker-{i}", service, command_of(wcontainer),
                              env, "worker", late.get(i, 0.0)))
        # The operator's ConfigMap <job>-config: the hostfile, and the workers Running so far.
        hostfile = "".join(f"{p.fqdns()[1]} slots={slots}\n" for p in r.pods)
        config = {"hostfile": hostfile,
                  "discover_hosts.sh": "#!/bin/sh\n" + "".join(f"echo {p.fqdns()[1]}\n" for p in r.pods)}
        worker_files = configmap_files(worker_spec["template"], f"{job}-config", config)
        if worker_files:
            log(f"workers mount ConfigMap {job}-config: " + ", ".join(f"/etc/{f}" for f in worker_files))
        for pod in r.pods:
            pod.write_files([pod], worker_files)
            pod.start(secret)
        probe = wcontainer.get("readinessProbe", {})
        port = int(probe.get("tcpSocket", {}).get("port", 0)) if probe else 0
        ready = wait_ready(r.pods, probe, port, wait_all=(policy == "WaitForWorkersReady"), timeout=args.timeout)
        lcontainer = launcher_spec["template"]["spec"]["containers"][0]
        operator_env = {  # what the operator adds to the launcher's container (Open MPI)
            "K_MPI_JOB_ROLE": "launcher",
            "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
            "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
            "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
            "OMPI_MCA_orte_set_default_slots": str(slots),
            "NVIDIA_VISIBLE_DEVICES": "", "NVIDIA_DRIVER_CAPABILITIES": ""}
        env = dict(IMAGE_ENV, **container_env(lcontainer, dict(args.env), args.drop_env), **operator_env,
                   HOSTNAME=f"{job}-launcher")
        launcher = Pod(r, workers + 1, f"{job}-launcher", f"{job}-launcher", service, command_of(lcontainer),
                       env, "launcher")
        r.pods.append(launcher)
        launcher.write_files(ready + [launcher], {"mpi/hostfile": config["hostfile"],
                                                  "mpi/discover_hosts.sh": config["discover_hosts.sh"]})
        log(f"launcher created ({policy}; {len(ready)}/{workers} workers Ready); /etc/mpi/hostfile: "
            + "; ".join(hostfile.strip().splitlines()))
        kubelet = None
        if kill or "--with-ft" in command_of(lcontainer):
            # From here on the kubelets keep probing, and every pod's DNS view follows readiness (an
            # elastic job's ranks look their peers up while it runs).
            for pod in r.pods[:workers]:
                pod.ready = pod.ready_at is not None
            kubelet = Kubelet(r.pods[:workers], r.pods, probe, port, worker_spec.get("restartPolicy", "Never"),
                              args.restart_delay)
            kubelet.dns_changed()
        launcher.start(secret)
        if kubelet:
            kubelet.start()
        deadline = time.time() + args.timeout
        code = None
        killed = False
        while code is None:
            code = launcher.proc.poll()
            if code is not None:
                break
            if time.time() > deadline:
                log(f"launcher still running after {args.timeout:g} s: stopped")
                code = 124
                break
            if kill and not killed and any(f"[rank 0] step {kill[1]} " in line for line in launcher.lines):
                victim = r.pods[kill[0]]
                names = kill_pod(victim, {"pod": None, "ranks": "python"}.get(args.kill, args.kill))
                killed = True
                what = {"pod": "every process", "ranks": "the ranks"}.get(args.kill, f"world {args.kill}")
                log(f"killed {what} of pod {victim.name} (SIGKILL): {', '.join(names)}")
            time.sleep(0.05)
        if code != 124:
            code = launcher.wait(timeout=10)
        log(f"launcher exited with {code}: MPIJob {'Succeeded' if code == 0 else 'Failed'}")
        if kubelet:
            kubelet.settle(timeout=args.restart_delay + 15)
            kubelet.stop()
        clean = spec.get("runPolicy", {}).get("cleanPodPolicy", "None")
        if clean in ("Running", "All"):
            log(f"cleanPodPolicy {clean}: deleting the workers")
        for pod in r.pods[:workers]:
            pod.stop()
            logins = sum("Accepted publickey for" in line for line in pod.lines)
            log(f"worker {pod.name}: {logins} ssh login(s) accepted"
                + (f", {pod.restarts} container restart(s)" if pod.restarts else ""))
        return code


def wait_ready(pods: list[Pod], probe: dict, port: int, wait_all: bool, timeout: float) -> list[Pod]:
    """Runs the readiness probe as a kubelet would; with wait_all, until every pod is Ready."""
    if not port:
        for pod in pods:
            pod.ready_at = time.time()
        return list(pods)
    delay, period = float(probe.get("initialDelaySeconds", 0)), float(probe.get("periodSeconds", 10))
    start = time.time()
    time.sleep(delay)
    while True:
        for pod in pods:
            if pod.ready_at is None and pod.probe_tcp(port):
                pod.ready_at = time.time()
                log(f"pod {pod.name} Ready (tcpSocket {port} accepts): its DNS name resolves from now on")
            if pod.proc.poll() is not None and pod.ready_at is None:
                raise Failure(f"pod {pod.name} exited with {pod.proc.returncode} before it was Ready:\n"
                              + "".join(pod.lines[-20:]))
        ready = [p for p in pods if p.ready_at is not None]
        if not wait_all or len(ready) == len(pods):
            return ready
        if time.time() - start > timeout:
            raise Failure(f"workers not Ready after {timeout:g} s: "
                          + ", ".join(p.name for p in pods if p.ready_at is None))
        time.sleep(period)


def run_paddlejob(args, manifest: dict) -> int:
    specs = manifest["spec"]["paddleReplicaSpecs"]
    if "Master" in specs:
        raise Failure("a PaddleJob with a Master replica is a parameter-server job: not rehearsed")
    worker_spec = specs["Worker"]
    workers = int(worker_spec["replicas"])
    container = next(c for c in worker_spec["template"]["spec"]["containers"] if c["name"] == "paddle")
    port = next((p["containerPort"] for p in container.get("ports", []) if p.get("name") == "master"), 36543)
    late = late_workers(args)
    with Rehearsal(args, manifest, workers) as r:
        job = r.job
        for i in range(workers):
            name = f"{job}-worker-{i}"
            master = f"{r.cluster.address(1)}:{port}" if i == 0 else f"{job}-worker-0:{port}"
            operator_env = {"PYTHONUNBUFFERED": "0", "PADDLE_JOB_ID": job, "PADDLE_NNODES": str(workers),
                            "PADDLE_MASTER": master}
            env = dict(IMAGE_ENV, **container_env(container, dict(args.env), args.drop_env), **operator_env,
                       HOSTNAME=name)
            r.pods.append(Pod(r, i + 1, name, name, None, command_of(container), env, "worker", late.get(i, 0.0)))
        for pod in r.pods:
            pod.write_files(r.pods, {})
        for pod in r.pods:
            log(f"pod {pod.name}: PADDLE_MASTER={pod.env['PADDLE_MASTER']} PADDLE_NNODES={workers} "
                f"PADDLE_JOB_ID={job}")
            pod.start(None)
        deadline = time.time() + args.timeout
        codes = {}
        for pod in r.pods:
            try:
                codes[pod.name] = pod.wait(timeout=max(1.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                log(f"pod {pod.name} still running after {args.timeout:g} s: stopped")
                codes[pod.name] = 124
                break
            log(f"pod {pod.name} exited with {codes[pod.name]}")
        code = next((c for c in codes.values() if c != 0), 0) if len(codes) == workers else 124
        log(f"PaddleJob {'Succeeded' if code == 0 else 'Failed'}")
        return code


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 2)[2])
    p.add_argument("kind", nargs="?", choices=["mpijob", "paddlejob"])
    p.add_argument("--manifest", help="default: deploy/k8s/<kind>.yaml")
    p.add_argument("--env", action="append", default=[], type=lambda s: tuple(s.split("=", 1)),
                   metavar="KEY=VALUE", help="replace a variable of the manifest's env (MPIJob: the launcher's)")
    p.add_argument("--drop-env", action="append", default=[], metavar="KEY",
                   help="remove a variable of the manifest's env (to show what it is for)")
    p.add_argument("--late-worker", action="append", default=[], metavar="I:SECONDS",
                   help="worker I's container starts SECONDS late")
    p.add_argument("--launcher-creation", choices=["AtStartup", "WaitForWorkersReady"],
                   help="replace the MPIJob's launcherCreationPolicy")
    p.add_argument("--kill-worker", metavar="I:STEP",
                   help="MPIJob: SIGKILL every process of worker I's pod once rank 0 logs step STEP; the "
                        "kubelets then follow the worker replica's restartPolicy and readiness probe")
    p.add_argument("--kill", default="pod", metavar="pod|ranks|rank:R",
                   help="with --kill-worker: every process of the pod (sshd, prted, ranks: a lost node or "
                        "evicted pod), only its ranks (an OOM kill), or only mpirun's rank R")
    p.add_argument("--restart-delay", type=float, default=1.0,
                   help="seconds before a kubelet restarts an exited container (with --kill-worker)")
    p.add_argument("--timeout", type=float, default=300, help="seconds before the job is stopped")
    p.add_argument("--cleanup", action="store_true", help="remove what a killed run left, then exit")
    args = p.parse_args(argv)
    if not args.cleanup and not args.kind:
        p.error("which job: mpijob or paddlejob")
    return args


def main(argv=None) -> int:
    netns_cluster.with_admin_path()
    args = parse(sys.argv[1:] if argv is None else argv)
    if os.geteuid() != 0:
        log("needs root (network and mount namespaces, setpriv)")
        return 2
    if args.cleanup:
        return netns_cluster.cleanup_leftovers(PREFIX)
    path = args.manifest or os.path.join(ROOT, "deploy", "k8s", f"{args.kind}.yaml")
    with open(path) as f:
        manifest = yaml.safe_load(f)
    signal.signal(signal.SIGTERM, netns_cluster._interrupt)
    try:
        return (run_mpijob if args.kind == "mpijob" else run_paddlejob)(args, manifest)
    except KeyboardInterrupt:
        log("interrupted; cleaned up")
        return 130
    except (Failure, RuntimeError) as e:
        log(f"error: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
