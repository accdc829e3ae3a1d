#!/usr/bin/env python
"""Checks an MPIJob or PaddleJob manifest before `kubectl apply`, without a cluster:

- the pod templates (core Kubernetes objects) against Kubernetes' own schemas, with the maintained
  validator kubernetes-validate (strict: unknown fields are errors);
- the custom resource as its operator's admission checks it (MPI Operator v2beta1's
  pkg/apis/kubeflow/validation, the training operator's PaddleJob webhook): launcher replicas 1,
  DNS-1035 job name, container and port names, required fields, allowed values;
- what running paddle_ngraph's image needs (docs/KUBERNETES.md): for an MPIJob, Open MPI 5's
  hostfile variable, mpirun by the image's absolute path, -np = workers x slots, workers Ready by
  sshd's port before the launcher starts; for both, the script exists and runs on paddle_ngraph
  (strategy.ngraph on, or paddle_ngraph's DataParallel);
- for an elastic MPIJob (a script under paddle_ngraph.elastic, or mpirun --with-ft): Open MPI's fault
  tolerance on (`--with-ft ulfm`), the launcher never restarted, and no --max-ranks (ranks do not
  join across pods with Open MPI 5.0: docs/KUBERNETES.md).

    python deploy/k8s/check.py deploy/k8s/mpijob.yaml deploy/k8s/mpijob-elastic.yaml deploy/k8s/paddlejob.yaml

Prints one line per problem and exits 1 if there is any.
"""
from __future__ import annotations

import os
import re
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGE = "/opt/paddle_ngraph"
DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?\Z")
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
CLEAN_POD_POLICIES = {"None", "Running", "All"}


def load(path: str) -> dict:
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    if len(docs) != 1:
        raise ValueError(f"{path}: expected one object, found {len(docs)}")
    return docs[0]


def check(manifest: dict) -> list[str]:
    kind = (manifest.get("apiVersion"), manifest.get("kind"))
    if kind == ("kubeflow.org/v2beta1", "MPIJob"):
        return check_mpijob(manifest)
    if kind == ("kubeflow.org/v1", "PaddleJob"):
        return check_paddlejob(manifest)
    return [f"apiVersion/kind {kind}: expected kubeflow.org/v2beta1 MPIJob or kubeflow.org/v1 PaddleJob"]


def pod_template_errors(template: dict, where: str) -> list[str]:
    """The template as the core object PodTemplate, against Kubernetes' schema (strict)."""
    import kubernetes_validate

    obj = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "check"}, "template": template}
    try:
        kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)
    except kubernetes_validate.ValidationError as e:
        path = ".".join(str(p) for p in e.path)
        return [f"{where}.template: {path}: {e.message}"]
    return []


def name_errors(manifest: dict) -> list[str]:
    name = manifest.get("metadata", {}).get("name", "")
    if not name:
        return ["metadata.name: required"]
    if len(name) > 63 or not DNS1035.match(name):
        return [f"metadata.name {name!r}: not a DNS-1035 label (lower case letters, digits and '-', "
                f"starting with a letter, at most 63 characters)"]
    return []


def replica_errors(spec: dict | None, where: str, restart_policies: set[str]) -> list[str]:
    if spec is None:
        return [f"{where}: required"]
    errors = []
    if spec.get("replicas") is None:
        errors.append(f"{where}.replicas: required")
    if spec.get("restartPolicy") not in restart_policies:
        errors.append(f"{where}.restartPolicy {spec.get('restartPolicy')!r}: one of {sorted(restart_policies)}")
    containers = spec.get("template", {}).get("spec", {}).get("containers") or []
    if not containers:
        errors.append(f"{where}.template.spec.containers: at least one container")
    for i, c in enumerate(containers):
        if not c.get("image"):
            errors.append(f"{where}.template.spec.containers[{i}].image: required")
        if not c.get("resources", {}).get("requests"):
            errors.append(f"{where}.template.spec.containers[{i}].resources.requests: set them (the "
                          f"scheduler places pods by their requests)")
    return errors + pod_template_errors(spec.get("template", {}), where)


def run_policy_errors(spec: dict) -> list[str]:
    policy = spec.get("runPolicy", {})
    clean = policy.get("cleanPodPolicy")
    if clean is None:
        return ["spec.runPolicy.cleanPodPolicy: required here (else sshd workers outlive the job)"]
    if clean not in CLEAN_POD_POLICIES:
        return [f"spec.runPolicy.cleanPodPolicy {clean!r}: one of {sorted(CLEAN_POD_POLICIES)}"]
    return [f"spec.runPolicy.{k}: must be >= 0" for k in ("ttlSecondsAfterFinished", "activeDeadlineSeconds",
                                                         "backoffLimit") if policy.get(k, 0) < 0]


def command(container: dict) -> list[str]:
    return [str(x) for x in container.get("command", []) + container.get("args", [])]


def env(container: dict) -> dict[str, str]:
    return {e["name"]: str(e.get("value", "")) for e in container.get("env", [])}


def image_script(argv: list[str]) -> str | None:
    """The text of the image's training script the command runs (from this checkout's examples/),
    or None for the user's own script."""
    scripts = [a for a in argv if a.endswith(".py")]
    if not scripts or not scripts[0].startswith(f"{IMAGE}/examples/"):
        return None
    local = os.path.join(ROOT, "examples", scripts[0][len(f"{IMAGE}/examples/"):])
    if not os.path.exists(local):
        return None
    with open(local) as f:
        return f.read()


def script_errors(argv: list[str], where: str) -> list[str]:
    """The training script is the image's, and runs on paddle_ngraph (strategy.ngraph, or its
    DataParallel in dygraph)."""
    scripts = [a for a in argv if a.endswith(".py")]
    if not scripts:
        return [f"{where}: no training script (*.py) in the command"]
    script = scripts[0]
    if not script.startswith(f"{IMAGE}/examples/"):
        return []  # the user's own script: nothing to check here
    local = os.path.join(ROOT, "examples", script[len(f"{IMAGE}/examples/"):])
    if not os.path.exists(local):
        return [f"{where}: {script} is not in the image (no {os.path.relpath(local, ROOT)})"]
    with open(local) as f:
        text = f.read()
    if "strategy.ngraph = True" not in text and "paddle_ngraph.DataParallel(" not in text:
        return [f"{where}: {script} neither sets strategy.ngraph = True nor uses paddle_ngraph.DataParallel"]
    return []


def image_sshd() -> dict[str, str]:
    with open(os.path.join(ROOT, "deploy", "image", "sshd_config")) as f:
        pairs = (line.split(None, 1) for line in f if line.strip() and not line.startswith("#"))
        return {k: v.strip() for k, v in pairs}


def check_mpijob(m: dict) -> list[str]:
    spec = m.get("spec", {})
    errors = name_errors(m)
    specs = spec.get("mpiReplicaSpecs") or {}
    restart = {"Never", "OnFailure", "ExitCode"}
    launcher, worker = specs.get("Launcher"), specs.get("Worker")
    errors += replica_errors(launcher, "spec.mpiReplicaSpecs[Launcher]", restart)
    if launcher and launcher.get("replicas") not in (None, 1):
        errors.append(f"spec.mpiReplicaSpecs[Launcher].replicas {launcher['replicas']}: must be 1")
    if worker is None:
        errors.append("spec.mpiReplicaSpecs[Worker]: required here (without workers every rank runs on the launcher)")
        return errors
    errors += replica_errors(worker, "spec.mpiReplicaSpecs[Worker]", restart)
    workers = worker.get("replicas") or 0
    if workers < 1:
        errors.append(f"spec.mpiReplicaSpecs[Worker].replicas {workers}: must be >= 1")
    name = m.get("metadata", {}).get("name", "")
    longest = f"{name}-worker-{max(workers, 1) - 1}"
    if len(longest) > 63 or not DNS1123_LABEL.match(longest):
        errors.append(f"metadata.name {name!r}: the pod name {longest!r} would not be a DNS-1123 label")
    slots = spec.get("slotsPerWorker")
    if slots is None or slots < 0:
        errors.append(f"spec.slotsPerWorker {slots!r}: required, >= 0")
    if not spec.get("sshAuthMountPath"):
        errors.append("spec.sshAuthMountPath: required (the image's user is mpiuser: /home/mpiuser/.ssh)")
    if spec.get("mpiImplementation", "OpenMPI") not in ("OpenMPI", "Intel", "MPICH"):
        errors.append(f"spec.mpiImplementation {spec['mpiImplementation']!r}: one of Intel, MPICH, OpenMPI")
    if spec.get("launcherCreationPolicy", "AtStartup") not in ("AtStartup", "WaitForWorkersReady"):
        errors.append(f"spec.launcherCreationPolicy {spec['launcherCreationPolicy']!r}: "
                      f"AtStartup or WaitForWorkersReady")
    errors += run_policy_errors(spec)
    if errors:
        return errors

    # What Open MPI 5 and the image need.
    lc = launcher["template"]["spec"]["containers"][0]
    wc = worker["template"]["spec"]["containers"][0]
    argv, lenv = command(lc), env(lc)
    if spec.get("mpiImplementation", "OpenMPI") != "OpenMPI":
        errors.append("spec.mpiImplementation: the image has Open MPI")
    if lenv.get("PRTE_MCA_prte_default_hostfile") != "/etc/mpi/hostfile" and "--hostfile" not in argv:
        errors.append("launcher: neither PRTE_MCA_prte_default_hostfile=/etc/mpi/hostfile nor --hostfile: Open MPI 5 "
                      "ignores the operator's OMPI_MCA_orte_default_hostfile and would run every rank on the launcher")
    if lenv.get("PRTE_MCA_prte_keep_fqdn_hostnames") != "true":
        errors.append("launcher: PRTE_MCA_prte_keep_fqdn_hostnames must be true (the hostfile's names are FQDNs)")
    if not argv or argv[0] != f"{IMAGE}/venv/bin/mpirun":
        errors.append(f"launcher: the command must be {IMAGE}/venv/bin/mpirun (Open MPI 5 starts prted on the "
                      f"workers at the launcher's install path), not {argv[:1]}")
    np_ = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("-np", "-n", "--np")), None)
    if np_ is None or int(np_) != workers * (slots or 1):
        errors.append(f"launcher: mpirun -np {np_} != Worker replicas x slotsPerWorker = {workers * (slots or 1)}")
    if not any(a == f"{IMAGE}/venv/bin/python" for a in argv):
        errors.append(f"launcher: run the ranks with {IMAGE}/venv/bin/python (the workers' ssh sessions have no "
                      f"PATH into the venv)")
    errors += script_errors(argv, "launcher")
    if spec.get("launcherCreationPolicy") != "WaitForWorkersReady":
        errors.append("spec.launcherCreationPolicy: WaitForWorkersReady (workers' names resolve only once Ready)")
    sshd = image_sshd()
    port = int(sshd.get("Port", 22))
    probe = wc.get("readinessProbe", {}).get("tcpSocket", {}).get("port")
    if probe != port:
        errors.append(f"worker: readinessProbe tcpSocket port {probe!r} != the image's sshd port {port}")
    wargv = command(wc)
    if not wargv or wargv[0] != "/usr/sbin/sshd" or "-D" not in "".join(wargv[1:2]):
        errors.append(f"worker: the command must run sshd in the foreground (/usr/sbin/sshd -De -f ...), not {wargv}")
    if "-f" in wargv and wargv[wargv.index("-f") + 1] != "/home/mpiuser/.sshd_config":
        errors.append("worker: the image's sshd configuration is /home/mpiuser/.sshd_config")
    if os.path.dirname(sshd.get("HostKey", "")) != spec.get("sshAuthMountPath"):
        errors.append(f"spec.sshAuthMountPath {spec.get('sshAuthMountPath')!r}: the image's sshd reads its keys "
                      f"from {os.path.dirname(sshd.get('HostKey', ''))}")
    for role, c in (("launcher", lc), ("worker", wc)):
        if c.get("securityContext", {}).get("runAsUser") != 1000:
            errors.append(f"{role}: securityContext.runAsUser 1000 (the image's mpiuser owns the ssh setup)")
    if lc.get("image") != wc.get("image"):
        errors.append("launcher and workers must run the same image (same install path, same Open MPI)")
    script = image_script(argv) or ""
    if "elastic.run" in script or "--with-ft" in argv:
        errors += elastic_errors(argv, launcher)
    return errors


def elastic_errors(argv: list[str], launcher: dict) -> list[str]:
    """An elastic job (paddle_ngraph.elastic) under the MPI Operator."""
    errors = []
    ft = argv[argv.index("--with-ft") + 1] if "--with-ft" in argv[:-1] else None
    if ft != "ulfm":
        errors.append(f"launcher: mpirun --with-ft ulfm (Open MPI's fault tolerance; elastic.run refuses to start "
                      f"without it), not --with-ft {ft}")
    if launcher.get("restartPolicy") != "Never":
        errors.append("spec.mpiReplicaSpecs[Launcher].restartPolicy: Never (a restarted launcher runs a new mpirun: "
                      "the training from the start)")
    if "--max-ranks" in argv:
        errors.append("launcher: --max-ranks: ranks do not join across pods with Open MPI 5.0 (the spawned rank fails "
                      "in MPI_Init and the job hangs: docs/KUBERNETES.md, \"The elastic MPIJob\")")
    return errors


def check_paddlejob(m: dict) -> list[str]:
    spec = m.get("spec", {})
    errors = name_errors(m)
    specs = spec.get("paddleReplicaSpecs")
    if not specs:
        return errors + ["spec.paddleReplicaSpecs: required"]
    for rtype, rspec in specs.items():
        where = f"spec.paddleReplicaSpecs[{rtype}]"
        if rtype not in ("Master", "Worker"):
            errors.append(f"{where}: replica type {rtype!r} not supported (Master, Worker)")
        errors += replica_errors(rspec, where, {"Always", "OnFailure", "Never", "ExitCode"})
        containers = (rspec or {}).get("template", {}).get("spec", {}).get("containers") or []
        paddle = [c for c in containers if c.get("name") == "paddle"]
        if not paddle:
            errors.append(f"{where}.template.spec.containers: must have at least one container with name paddle")
            continue
        if not any(p.get("name") == "master" for p in paddle[0].get("ports", [])):
            errors.append(f"{where}: container paddle has no port named master (the operator would use 36543 "
                          f"without exposing it)")
    errors += run_policy_errors(spec)
    if errors:
        return errors
    if "Master" in specs:
        errors.append("spec.paddleReplicaSpecs[Master]: a Master replica makes it a parameter-server job; "
                      "collective training (paddle_ngraph) has Workers only")
    c = next(c for c in specs["Worker"]["template"]["spec"]["containers"] if c["name"] == "paddle")
    argv = command(c)
    if "paddle.distributed.launch" not in argv:
        errors.append("worker: run the script with python -m paddle.distributed.launch")
    for flag in ("--master", "--nnodes", "--ips"):
        if flag in argv:
            errors.append(f"worker: {flag} overrides what the operator injects (PADDLE_MASTER, PADDLE_NNODES)")
    if "--nproc_per_node" not in argv:
        errors.append("worker: give --nproc_per_node (ranks per pod)")
    if argv and argv[0] != f"{IMAGE}/venv/bin/python":
        errors.append(f"worker: run {IMAGE}/venv/bin/python, not {argv[0]}")
    errors += script_errors(argv, "worker")
    return errors


def main(argv=None) -> int:
    paths = sys.argv[1:] if argv is None else argv
    if not paths:
        paths = [os.path.join(ROOT, "deploy", "k8s", n)
                 for n in ("mpijob.yaml", "mpijob-elastic.yaml", "paddlejob.yaml")]
    bad = 0
    for path in paths:
        errors = check(load(path))
        for e in errors:
            print(f"{path}: {e}")
        if not errors:
            print(f"{path}: ok")
        bad += bool(errors)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
