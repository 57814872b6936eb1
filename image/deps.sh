#!/bin/sh
# Install the image builder's tools (Debian bookworm host, as root), and what the QEMU boot
# test (tests/appliance/test_image_boot.py) needs besides: qemu-img (qemu-utils), ssh.
set -e
apt-get update -q
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    mmdebstrap arch-test debian-archive-keyring qemu-user-static binfmt-support \
    fdisk dosfstools mtools e2fsprogs zstd systemd python3-pip \
    qemu-system-x86 qemu-system-arm ipxe-qemu qemu-utils openssh-client
