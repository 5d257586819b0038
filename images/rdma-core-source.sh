#!/bin/sh
# mmdebstrap customize hook of images/build.sh: fetches Debian's rdma-core source package of
# the same version as the root's libibverbs1 and unpacks it as /usr/src/rdma-core/src of the
# root (argument 1), Debian's patches applied. The guest's provider for rnic-emu is built
# inside that tree (images/build.sh, build_rdma).
#
# The root (variant essential) has no apt: the host's apt-get downloads the source through
# the root's apt state (Dir=<root>: its deb-src lines and the source indices mmdebstrap
# fetched; apt checks every file against the index's hashes). The tarballs are unpacked and
# debian/patches/series applied here, which is what dpkg-source -x does for a 3.0 (quilt)
# package: the root has no dpkg-dev, and some mirrors serve the tarballs but not the .dsc.
set -eu
root=$1
ver=$(dpkg-query --admindir="$root/var/lib/dpkg" -W -f '${source:Version}' libibverbs1)
upstream=${ver%-*}
dir="$root/usr/src/rdma-core"
mkdir -p "$dir"
cd "$dir"
apt-get -q -o Dir="$root" -o APT::Sandbox::User=root source --download-only "rdma-core=$ver" >/dev/null 2>apt-source.err || true
orig=$(ls rdma-core_"$upstream".orig.tar.* 2>/dev/null | head -n 1)
deb=$(ls rdma-core_"$ver".debian.tar.* 2>/dev/null | head -n 1)
if [ -z "$orig" ] || [ -z "$deb" ]; then
    cat apt-source.err >&2
    echo "E: rdma-core $ver source: tarballs not fetched" >&2
    exit 1
fi
rm -f apt-source.err
rm -rf src
mkdir src
tar -xf "$orig" -C src --strip-components=1
tar -xf "$deb" -C src
if [ -f src/debian/patches/series ]; then
    sed -e 's/#.*//' -e '/^[[:space:]]*$/d' src/debian/patches/series | while read -r p _; do
        patch -s -p1 -d src < "src/debian/patches/$p"
    done
fi
rm -f rdma-core_*
echo "$ver" > VERSION
