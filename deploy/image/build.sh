#!/bin/sh
# `make image`: an OCI image of paddle_ngraph, without Docker and without a registry.
#  1. mmdebstrap builds a Debian 12 root file system from Debian's packages (debian-packages.txt)
#     and runs install.sh in it (a chroot): the venv at /opt/paddle_ngraph/venv with Paddle, Open MPI
#     and oneCCL from PyPI and the project's wheel built there, the mpiuser (uid 1000), sshd's config.
#  2. The root file system is checked by running `python -c "import paddle_ngraph"` in it.
#  3. buildah turns it into an image (user, working directory, PATH) in its local storage, checks
#     the import once more in the committed image's file system, and writes an OCI archive.
# Needs root (mmdebstrap's root mode, chroot, buildah's storage). Variables: OUT (default
# build/image), TAG (default localhost/paddle-ngraph:latest), SUITE (bookworm), MIRROR, BUILD_CA,
# STORAGE_DRIVER (buildah's, default vfs: works inside containers and VMs alike).
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/build/image}
TAG=${TAG:-localhost/paddle-ngraph:latest}
SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
export STORAGE_DRIVER=${STORAGE_DRIVER:-vfs}
# pip in the chroot trusts what this machine trusts (a TLS-intercepting proxy's CA, say); build
# time only, the image keeps Debian's ca-certificates. REQUESTS_CA_BUNDLE too: pip's requests
# prefers it (inherited from this shell, naming a file the chroot has differently) to PIP_CERT.
BUILD_CA=${BUILD_CA:-/etc/ssl/certs/ca-certificates.crt}
PY=/opt/paddle_ngraph/venv/bin/python
step() { echo "[make image] $*"; }

mkdir -p "$OUT"
rm -rf "$OUT/rootfs" "$OUT/rootfs.tar"
# The project's source as committed plus uncommitted edits of tracked files (no .venv, no build/).
git -C "$ROOT" ls-files -z | tar -C "$ROOT" --null -T - -cf "$OUT/src.tar"

step "root file system: Debian $SUITE + $(paste -sd' ' "$ROOT/deploy/image/debian-packages.txt")"
mmdebstrap --mode=root --variant=apt \
    --include="$(paste -sd, "$ROOT/deploy/image/debian-packages.txt")" \
    --customize-hook="mkdir -p \"\$1/opt/paddle_ngraph/src\" && tar -C \"\$1/opt/paddle_ngraph/src\" -xf '$OUT/src.tar'" \
    --customize-hook="cp '$BUILD_CA' \"\$1/tmp/build-host-ca.crt\"" \
    --customize-hook='chroot "$1" env -u PIP_FIND_LINKS -u PIP_CONSTRAINT PIP_CERT=/tmp/build-host-ca.crt \
        REQUESTS_CA_BUNDLE=/tmp/build-host-ca.crt CURL_CA_BUNDLE=/tmp/build-host-ca.crt \
        SSL_CERT_FILE=/tmp/build-host-ca.crt sh /opt/paddle_ngraph/src/deploy/image/install.sh' \
    --customize-hook='rm -rf "$1/opt/paddle_ngraph/src" "$1/tmp/build-host-ca.crt" "$1/var/lib/apt/lists/"*' \
    "$SUITE" "$OUT/rootfs" "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" \
    "deb ${SECURITY_MIRROR:-http://deb.debian.org/debian-security} $SUITE-security main"

check_import() {  # $1: a root file system; /proc for Paddle's imports, in a mount namespace of its own
    unshare --mount --fork sh -c "mount -t proc proc '$1/proc' && chroot --userspec=1000:1000 '$1' \
        env -i HOME=/home/mpiuser PATH=/opt/paddle_ngraph/venv/bin:/usr/bin:/bin GLOG_minloglevel=2 \
        $PY -c 'import paddle_ngraph, paddle; print(\"import paddle_ngraph: ok (paddle\", paddle.__version__ + \")\")'"
}
step "checking the root file system"
check_import "$OUT/rootfs"

step "image $TAG (buildah, storage driver $STORAGE_DRIVER)"
tar --numeric-owner -C "$OUT/rootfs" -cf "$OUT/rootfs.tar" .
ctr=$(buildah from scratch)
trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
buildah add "$ctr" "$OUT/rootfs.tar" /
buildah config --user 1000:1000 --workingdir /home/mpiuser \
    --env PATH=/opt/paddle_ngraph/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env HOME=/home/mpiuser --env GLOG_minloglevel=2 --cmd "$PY -c 'import paddle_ngraph'" \
    --label org.opencontainers.image.title=paddle_ngraph "$ctr"
buildah commit --rm "$ctr" "$TAG"
trap - EXIT
step "checking the committed image's file system"
ctr=$(buildah from "$TAG")
check_import "$(buildah mount "$ctr")"
buildah umount "$ctr" >/dev/null
buildah rm "$ctr" >/dev/null
rm -f "$OUT/paddle-ngraph.oci.tar"
buildah push "$TAG" "oci-archive:$OUT/paddle-ngraph.oci.tar:$TAG"
rm -f "$OUT/rootfs.tar" "$OUT/src.tar"
step "done: $TAG in buildah's storage; $OUT/paddle-ngraph.oci.tar ($(du -h "$OUT/paddle-ngraph.oci.tar" | cut -f1));"
step "push it with: buildah push $TAG docker://<registry>/paddle-ngraph:<tag>"
