"""deploy/k8s: the manifests parse, their pod templates pass Kubernetes' schemas, the custom resources
pass the checks their operators make, and they carry what Open MPI 5 and the image need
(deploy/k8s/check.py). Each rule is shown to catch the mistake it is for."""
import copy
import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location("k8s_check", os.path.join(ROOT, "deploy", "k8s", "check.py"))
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)

MPIJOB = check.load(os.path.join(ROOT, "deploy", "k8s", "mpijob.yaml"))
PADDLEJOB = check.load(os.path.join(ROOT, "deploy", "k8s", "paddlejob.yaml"))
ELASTIC = check.load(os.path.join(ROOT, "deploy", "k8s", "mpijob-elastic.yaml"))


def launcher(m):
    return m["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]


def worker(m):
    return m["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]


def paddle(m):
    return m["spec"]["paddleReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]


def test_the_manifests_pass_every_check():
    assert check.check(MPIJOB) == []
    assert check.check(PADDLEJOB) == []
    assert check.check(ELASTIC) == []
    out = subprocess.run([sys.executable, os.path.join(ROOT, "deploy", "k8s", "check.py")], capture_output=True,
                         text=True)
    assert out.returncode == 0 and out.stdout.count(": ok") == 3, out.stdout + out.stderr


def test_what_open_mpi_5_needs_is_in_the_mpijob():
    """Checked from the file itself, independently of check.py's rules."""
    env = {e["name"]: e["value"] for e in launcher(MPIJOB)["env"]}
    assert env["PRTE_MCA_prte_default_hostfile"] == "/etc/mpi/hostfile"
    assert env["PRTE_MCA_prte_keep_fqdn_hostnames"] == "true"
    argv = launcher(MPIJOB)["command"] + launcher(MPIJOB)["args"]
    assert argv[0] == "/opt/paddle_ngraph/venv/bin/mpirun"
    assert int(argv[argv.index("-np") + 1]) == MPIJOB["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] * \
        MPIJOB["spec"]["slotsPerWorker"]
    assert MPIJOB["spec"]["launcherCreationPolicy"] == "WaitForWorkersReady"
    assert worker(MPIJOB)["readinessProbe"]["tcpSocket"]["port"] == 2222
    assert MPIJOB["spec"]["runPolicy"]["cleanPodPolicy"] in ("Running", "All")
    assert all("requests" in c["resources"] for c in (launcher(MPIJOB), worker(MPIJOB), paddle(PADDLEJOB)))


def test_the_pod_templates_are_checked_against_kubernetes_schemas():
    m = copy.deepcopy(MPIJOB)
    worker(m)["readinessProbe"]["tcpSocket"]["prot"] = 2222  # a typo: an unknown field
    errors = check.check(m)
    assert any("Worker" in e and "tcpSocket" in e and "prot" in e for e in errors), errors
    m = copy.deepcopy(PADDLEJOB)
    paddle(m)["resources"]["requests"]["cpu"] = ["2"]  # not a quantity
    assert any("resources" in e for e in check.check(m)), check.check(m)


@pytest.mark.parametrize("mutate, expected", [
    (lambda m: m["spec"]["mpiReplicaSpecs"]["Launcher"].update(replicas=2), "replicas 2: must be 1"),
    (lambda m: m["metadata"].update(name="Fleet_MNIST"), "DNS-1035"),
    (lambda m: m["metadata"].update(name="a" * 60), "DNS-1123"),
    (lambda m: m["spec"].pop("slotsPerWorker"), "slotsPerWorker"),
    (lambda m: m["spec"].pop("sshAuthMountPath"), "sshAuthMountPath: required"),
    (lambda m: m["spec"]["runPolicy"].update(cleanPodPolicy="Sometimes"), "cleanPodPolicy"),
    (lambda m: m["spec"].update(launcherCreationPolicy="Later"), "launcherCreationPolicy"),
    (lambda m: m["spec"]["mpiReplicaSpecs"]["Worker"].update(restartPolicy="Always"), "restartPolicy"),
    (lambda m: launcher(m)["env"].pop(0), "PRTE_MCA_prte_default_hostfile"),
    (lambda m: launcher(m).update(command=["mpirun"]), "install path"),
    (lambda m: m["spec"]["mpiReplicaSpecs"]["Worker"].update(replicas=3), "-np 2 != Worker replicas"),
    (lambda m: worker(m)["readinessProbe"]["tcpSocket"].update(port=22), "sshd port 2222"),
    (lambda m: m["spec"].update(launcherCreationPolicy="AtStartup"), "WaitForWorkersReady"),
    (lambda m: m["spec"].update(sshAuthMountPath="/root/.ssh"), "reads its keys from /home/mpiuser/.ssh"),
    (lambda m: launcher(m)["args"].__setitem__(-5, "/opt/paddle_ngraph/examples/nope.py"), "not in the image"),
])
def test_mpijob_rules(mutate, expected):
    m = copy.deepcopy(MPIJOB)
    mutate(m)
    errors = check.check(m)
    assert any(expected in e for e in errors), errors


def test_what_elastic_training_needs_is_in_the_elastic_mpijob():
    """Checked from the file itself: fault tolerance on, the elastic example, the launcher never
    restarted; and it differs from mpijob.yaml in nothing else that Open MPI 5 needs."""
    argv = launcher(ELASTIC)["command"] + launcher(ELASTIC)["args"]
    assert argv[argv.index("--with-ft") + 1] == "ulfm"
    assert "/opt/paddle_ngraph/examples/elastic_mnist_mlp.py" in argv and "--max-ranks" not in argv
    assert ELASTIC["spec"]["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] == "Never"
    assert launcher(ELASTIC)["env"] == launcher(MPIJOB)["env"]
    assert worker(ELASTIC) == worker(MPIJOB)


@pytest.mark.parametrize("mutate, expected", [
    (lambda m: launcher(m)["args"].__setitem__(launcher(m)["args"].index("--with-ft") + 1, "none"),
     "--with-ft ulfm"),
    (lambda m: [launcher(m)["args"].remove(a) for a in ("--with-ft", "ulfm")], "--with-ft ulfm"),
    (lambda m: m["spec"]["mpiReplicaSpecs"]["Launcher"].update(restartPolicy="OnFailure"), "Launcher].restartPolicy"),
    (lambda m: launcher(m)["args"].extend(["--max-ranks", "2", "--hostfile", "/etc/mpi/hostfile"]),
     "ranks do not join across pods"),
])
def test_elastic_mpijob_rules(mutate, expected):
    m = copy.deepcopy(ELASTIC)
    mutate(m)
    errors = check.check(m)
    assert any(expected in e for e in errors), errors


@pytest.mark.parametrize("mutate, expected", [
    (lambda m: paddle(m).update(name="trainer"), "container with name paddle"),
    (lambda m: paddle(m)["ports"][0].update(name="rendezvous"), "no port named master"),
    (lambda m: m["metadata"].update(name="9lives"), "DNS-1035"),
    (lambda m: m["spec"]["paddleReplicaSpecs"].update(Chief=m["spec"]["paddleReplicaSpecs"]["Worker"]),
     "'Chief' not supported"),
    (lambda m: paddle(m).pop("image"), "image: required"),
    (lambda m: m["spec"]["paddleReplicaSpecs"]["Worker"].pop("replicas"), "replicas: required"),
    (lambda m: m["spec"]["paddleReplicaSpecs"].update(Master=m["spec"]["paddleReplicaSpecs"]["Worker"]),
     "parameter-server"),
    (lambda m: paddle(m)["args"].extend(["--master", "x:1"]), "--master overrides"),
    (lambda m: m["spec"].pop("runPolicy"), "cleanPodPolicy: required"),
])
def test_paddlejob_rules(mutate, expected):
    m = copy.deepcopy(PADDLEJOB)
    mutate(m)
    errors = check.check(m)
    assert any(expected in e for e in errors), errors


def test_the_image_recipe_and_the_manifests_agree():
    """One fixed install path, the uid and the sshd port the manifests assume are the image's."""
    with open(os.path.join(ROOT, "deploy", "image", "install.sh")) as f:
        install = f.read()
    assert "PREFIX=/opt/paddle_ngraph" in install and "useradd -m -u 1000" in install
    assert check.image_sshd()["Port"] == "2222" and check.image_sshd()["StrictModes"] == "no"
    with open(os.path.join(ROOT, "deploy", "image", "ssh_config")) as f:
        client = f.read()
    assert "Port 2222" in client and "StrictHostKeyChecking no" in client
    with open(os.path.join(ROOT, "deploy", "image", "Dockerfile")) as f:
        dockerfile = f.read()
    assert "install.sh" in dockerfile and "USER 1000" in dockerfile
    images = {launcher(MPIJOB)["image"], worker(MPIJOB)["image"], paddle(PADDLEJOB)["image"]}
    assert images == {"localhost/paddle-ngraph:latest"}  # build.sh's default TAG
    with open(os.path.join(ROOT, "deploy", "image", "build.sh")) as f:
        assert "localhost/paddle-ngraph:latest" in f.read()
