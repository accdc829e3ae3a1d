#!/bin/sh
# Installs paddle_ngraph into an image's root file system (Debian 12 with debian-packages.txt):
# run as root inside it, by deploy/image/build.sh (in mmdebstrap's chroot) or by the Dockerfile,
# with the project's source at $SRC.
#
# Everything lands under one fixed path, /opt/paddle_ngraph: Open MPI 5 starts prted on the MPIJob
# workers at the launcher's install path, and the native extensions carry absolute run paths into
# the venv they were built in, so the wheel is built here, in the venv the pods use.
set -eu
SRC=${SRC:-/opt/paddle_ngraph/src}
PREFIX=/opt/paddle_ngraph
VENV=$PREFIX/venv
PIP="$VENV/bin/pip"

python3 -m venv "$VENV"
"$PIP" install -q --upgrade pip setuptools wheel
# requirements.txt without its last section (the test tools): runtime, build tools, demo data.
sed '/^# Tests/,$d' "$SRC/requirements.txt" > /tmp/requirements-image.txt
"$PIP" install -q -r /tmp/requirements-image.txt
# The same pins as the Makefile (see its comments): oneCCL without Intel MPI, oneDNN headers.
"$PIP" install -q --no-deps oneccl-cpu==2021.16.2 oneccl-cpu-devel==2021.16.2 onednn-devel==2025.0.1
rm -f "$VENV/lib/libccl.a"
# The project's wheel, built against the Paddle just installed (hence no build isolation).
"$PIP" wheel -q --no-deps --no-build-isolation -w /tmp/wheels "$SRC"
"$PIP" install -q --no-deps /tmp/wheels/paddle_ngraph-*.whl
mkdir -p "$PREFIX/examples"
cp "$SRC"/examples/*.py "$PREFIX/examples/"
rm -rf /tmp/wheels /tmp/requirements-image.txt /root/.cache/pip "$SRC/build"

# The unprivileged user of the operators' examples, its sshd configuration, and the ssh client's.
id mpiuser >/dev/null 2>&1 || useradd -m -u 1000 -s /bin/sh mpiuser
install -o mpiuser -g mpiuser -m 0644 "$SRC/deploy/image/sshd_config" /home/mpiuser/.sshd_config
install -m 0644 "$SRC/deploy/image/ssh_config" /etc/ssh/ssh_config.d/paddle_ngraph.conf
# Host keys generated at package install would be shared by every container of the image; the
# workers' sshd uses the job's key instead.
rm -f /etc/ssh/ssh_host_*
mkdir -p /run/sshd

"$VENV/bin/python" -c "import paddle_ngraph; print('paddle_ngraph', paddle_ngraph.__file__)"
