#!/usr/bin/env bash
# Builds everything a guest boot needs, from Debian packages only, and caches it:
#   1. a private toolchain root (Debian trixie + trixie-backports, made with mmdebstrap):
#      QEMU >= 10.1 with vfio-user-pci, a kernel with CONFIG_PCI_P2PDMA=y and its headers,
#      gcc, make, busybox, kmod, pciutils                          -> $RNIC_EMU_CACHE/root-<key>
#   2. guest-driver/ (kernel module + guest tools) built inside that root
#   3. an initramfs: busybox, kmod, pciutils, the module, the tools, images/init.sh as /init,
#      libibverbs tools and perftest, ethtool and iperf3, python3 with pyverbs and rdma-core's
#      test suite
# Outputs land in build/image/ (see images/README.md). Each stage is keyed by a hash of its
# inputs; a second run with nothing changed only hashes files. Needs root (chroot, mounts).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
cache=${RNIC_EMU_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rnic-emu}
out=${RNIC_EMU_IMAGE_DIR:-$repo/build/image}
# Bump when the way a stage is built changes, so old caches are not reused.
readonly ROOT_RECIPE=2 DRIVER_RECIPE=1 RDMA_RECIPE=2 INITRAMFS_RECIPE=4
# guest-driver/tools/ programs that use libibverbs: built by build_rdma against the rdma-core
# tree's headers and libibverbs (the guest runs them on Debian's libibverbs1 of that version).
readonly IBVERBS_TOOLS="rnic-dmabuf-check.c rnic-async-check.c rnic-mmap-check.c rnic-udata-check.c rnic-flush-check.c"
# Their sources and the headers they include, one path a line.
ibverbs_tool_sources() {
    local t
    for t in $IBVERBS_TOOLS rnic_tool_verbs.h rnic_tool_kv.h; do echo "$1/guest-driver/tools/$t"; done
}
# Kernel modules (with their dependencies) for Linux Soft-RoCE in the guest: the comparison
# benchmark runs rdma_rxe over virtio-net next to rnic-emu; rdma-core's test suite runs it over
# a dummy netdev (tests/guest_pyverbs.rs).
readonly GUEST_MODULES="rdma_rxe ib_uverbs virtio_net dummy"
# User-space tools of the root copied into the guest (with their libraries).
readonly GUEST_BINARIES="/usr/bin/ib_write_bw /usr/bin/ib_write_lat /usr/bin/ib_read_bw /usr/bin/ib_read_lat
    /usr/bin/ib_send_bw /usr/bin/ib_atomic_bw /usr/bin/ib_atomic_lat /usr/bin/rdma /usr/bin/ibv_devinfo
    /usr/bin/ibv_devices /usr/bin/ibv_rc_pingpong /usr/bin/ibv_uc_pingpong /usr/bin/ibv_srq_pingpong
    /usr/bin/ibv_ud_pingpong /usr/bin/ib_send_lat
    /usr/sbin/ethtool /usr/bin/iperf3"

t0=$(date +%s)
log() { printf '[images +%3ss] %s\n' "$(( $(date +%s) - t0 ))" "$*" >&2; }
die() { log "error: $*"; exit 1; }

hash_stdin() { sha256sum | cut -c1-16; }
# True when the stage key file $1 exists and holds $2.
key_matches() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }

# Hash of every file under a directory (names and contents), ignoring build products.
hash_tree() {
    (cd "$1" && find . -type f ! -name '*.o' ! -name '*.ko' ! -name '*.mod*' ! -name '.*.cmd' \
        ! -name 'Module.symvers' ! -name 'modules.order' ! -path './tools/bin/*' -print0 \
        | LC_ALL=C sort -z | xargs -0 sha256sum) | hash_stdin
}

ensure_host_tools() {
    local missing=()
    command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
    command -v cpio >/dev/null || missing+=(cpio)
    command -v unshare >/dev/null || missing+=(util-linux)
    command -v patch >/dev/null || missing+=(patch)
    [ ${#missing[@]} -eq 0 ] && return 0
    [ "$(id -u)" -eq 0 ] || die "missing host packages: ${missing[*]} (install them, or run as root)"
    log "installing host packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

# The Debian mirror this machine already uses (never a hard-coded host).
debian_mirror() {
    local uri=""
    if compgen -G '/etc/apt/sources.list.d/*.sources' >/dev/null; then
        uri=$(awk 'BEGIN{RS="";FS="\n"}
            { u=""; s="";
              for (i=1;i<=NF;i++) { if ($i ~ /^URIs:/) u=$i; if ($i ~ /^Suites:/) s=$i }
              if (u != "" && s !~ /security/ && u !~ /security/) { sub(/^URIs:[ \t]*/,"",u); split(u,a," "); print a[1]; exit } }' \
            /etc/apt/sources.list.d/*.sources)
    fi
    if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
        uri=$(awk '$1=="deb" && $0 !~ /security/ { for (i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' /etc/apt/sources.list)
    fi
    [ -n "$uri" ] || die "no Debian mirror found in /etc/apt/sources.list{,.d}"
    printf '%s\n' "${uri%/}"
}

packages() { sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$here/root-packages.txt"; }

build_root() {
    local key dir tmp mirror
    key=$( { echo "recipe=$ROOT_RECIPE"; packages; sha256sum < "$here/rdma-core-source.sh"; } | hash_stdin)
    dir="$cache/root-$key"
    if [ -f "$dir/.complete" ]; then
        log "toolchain root: cached ($dir)"
        ROOT=$dir; return 0
    fi
    [ "$(id -u)" -eq 0 ] || die "building the toolchain root needs root (mmdebstrap, chroot); see README"
    mirror=$(debian_mirror)
    tmp="$dir.tmp.$$"
    rm -rf "$tmp"; mkdir -p "$cache"
    log "toolchain root: building with mmdebstrap (first use: a few minutes, ~800 MB download)"
    log "  using the Debian mirror of this machine's apt sources"
    mmdebstrap --variant=essential --mode=root \
        --include="$(packages | paste -sd,)" \
        --aptopt='APT::Default-Release "trixie-backports"' \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --customize-hook="$here/rdma-core-source.sh \"\$1\"" \
        trixie "$tmp" "deb $mirror trixie main" "deb $mirror trixie-backports main" \
        "deb-src $mirror trixie main" "deb-src $mirror trixie-backports main" \
        2>&1 | grep --line-buffered -E '^(E:|W: .*source|I: (downloading|extracting|installing|running|creating|cleaning|success))' \
        | sed -u 's/^/    /' >&2 || true
    [ -x "$tmp/usr/bin/qemu-system-x86_64" ] || die "mmdebstrap did not produce QEMU (see output above)"
    [ -f "$tmp/usr/src/rdma-core/VERSION" ] || die "mmdebstrap did not fetch rdma-core's source (see output above)"
    dpkg-query --admindir="$tmp/var/lib/dpkg" -W -f '${Package}\t${Version}\n' > "$tmp/.packages"
    touch "$tmp/.complete"
    rm -rf "$dir"; mv "$tmp" "$dir"
    # Older roots (other keys) are no longer used by this checkout; leave them for other checkouts.
    log "toolchain root: done ($(du -sh "$dir" | cut -f1))"
    ROOT=$dir
}

kernel_version() {
    local k
    k=$(ls "$ROOT/lib/modules" | sort -V | tail -n 1)
    [ -n "$k" ] && [ -f "$ROOT/boot/vmlinuz-$k" ] || die "no kernel in $ROOT"
    [ -d "$ROOT/usr/src/linux-headers-$k" ] || die "no headers for kernel $k in $ROOT"
    grep -q '^CONFIG_PCI_P2PDMA=y' "$ROOT/boot/config-$k" || die "kernel $k lacks CONFIG_PCI_P2PDMA=y"
    KVER=$k
}

# Runs a command chrooted in $ROOT with /proc and /dev mounted in a private mount namespace,
# so nothing stays mounted when it ends (also on failure).
in_root() {
    unshare --mount --propagation private -- /bin/sh -c '
        root=$1; shift
        mount -t proc proc "$root/proc" && mount --bind /dev "$root/dev" && exec chroot "$root" "$@"
    ' in_root "$ROOT" "$@"
}

build_driver() {
    local key src
    key=$( { echo "recipe=$DRIVER_RECIPE kver=$KVER"; hash_tree "$repo/guest-driver"; } | hash_stdin)
    DRIVER_OUT="$out/driver"
    if key_matches "$DRIVER_OUT/.key" "$key"; then
        log "guest driver: cached"
        DRIVER_KEY=$key; return 0
    fi
    [ "$(id -u)" -eq 0 ] || die "building the guest driver needs root (chroot into the toolchain root)"
    log "guest driver: building against $KVER"
    # A directory of this build's own inside the shared root: two checkouts may build at once.
    src="$ROOT/build/rnic-emu.$$"
    rm -rf "$src"; mkdir -p "$src"
    cp -a "$repo/guest-driver/." "$src/"
    if ! in_root make -C "/build/rnic-emu.$$" KDIR="/lib/modules/$KVER/build" >"$out/driver-build.log" 2>&1; then
        tail -n 40 "$out/driver-build.log" >&2
        rm -rf "$src"
        die "guest driver build failed (full log: $out/driver-build.log)"
    fi
    rm -rf "$DRIVER_OUT.tmp"; mkdir -p "$DRIVER_OUT.tmp/tools"
    cp "$src"/*.ko "$DRIVER_OUT.tmp/"
    cp "$src"/tools/bin/* "$DRIVER_OUT.tmp/tools/"
    echo "$key" > "$DRIVER_OUT.tmp/.key"
    rm -rf "$DRIVER_OUT"; mv "$DRIVER_OUT.tmp" "$DRIVER_OUT"
    rm -rf "$src"
    log "guest driver: built $(cd "$DRIVER_OUT" && ls *.ko tools | tr '\n' ' ')"
    DRIVER_KEY=$key
}

# rdma-core's provider for rnic-emu (guest-driver/provider/, docs/ibverbs.md): built inside
# Debian's rdma-core source tree of the root's libibverbs version (fetched when the root was
# made, images/rdma-core-source.sh) as providers/rnic. Only that provider and the libibverbs it
# links against are built; the guest keeps Debian's libibverbs and loads our provider from it.
build_rdma() {
    local key src ver
    ver=$(cat "$ROOT/usr/src/rdma-core/VERSION")
    key=$( { echo "recipe=$RDMA_RECIPE root=$(basename "$ROOT") rdma-core=$ver"; hash_tree "$repo/guest-driver/provider";
             sha256sum "$repo"/guest-driver/include/uapi/*.h $(ibverbs_tool_sources "$repo"); } | hash_stdin)
    RDMA_OUT="$out/rdma"
    if key_matches "$RDMA_OUT/.key" "$key"; then
        log "rdma-core provider: cached"
        RDMA_KEY=$key; return 0
    fi
    [ "$(id -u)" -eq 0 ] || die "building the rdma-core provider needs root (chroot into the toolchain root)"
    log "rdma-core provider: building in rdma-core $ver"
    src="$ROOT/build/rdma-core.$$"
    rm -rf "$src"; mkdir -p "$ROOT/build"
    cp -a "$ROOT/usr/src/rdma-core/src" "$src"
    mkdir -p "$src/providers/rnic"
    cp -a "$repo/guest-driver/provider/." "$src/providers/rnic/"
    # The ring formats, the ring protocol's helpers and the command data the kernel driver
    # shares with the provider.
    cp "$repo"/guest-driver/include/uapi/{rnic_emu_regs.h,rnic_emu_ring.h,rnic_ib_abi.h} "$src/providers/rnic/"
    grep -q '^add_subdirectory(providers/rxe)$' "$src/CMakeLists.txt" || die "rdma-core $ver: no providers/rxe line in CMakeLists.txt"
    sed -i 's|^add_subdirectory(providers/rxe)$|&\nadd_subdirectory(providers/rnic)|' "$src/CMakeLists.txt"
    # Our libibverbs programs, compiled against this tree's headers and libibverbs.
    mkdir -p "$src/rnic-tools/uapi"
    ibverbs_tool_sources "$repo" | xargs -I{} cp {} "$src/rnic-tools/"
    cp "$repo"/guest-driver/include/uapi/*.h "$src/rnic-tools/uapi/"
    if ! in_root /bin/sh -ec "cd /build/rdma-core.$$ && mkdir build && cd build
            cmake -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNO_MAN_PAGES=1 -DNO_PYVERBS=1 \
                -DENABLE_STATIC=0 .. >/dev/null
            ninja -j$(nproc) rnic-rdmav34
            for t in $IBVERBS_TOOLS; do
                gcc -O2 -Wall -Wextra -Iinclude -I../rnic-tools -o ../rnic-tools/\${t%.c} ../rnic-tools/\$t -Llib -libverbs
            done" >"$out/rdma-build.log" 2>&1; then
        tail -n 40 "$out/rdma-build.log" >&2
        rm -rf "$src"
        die "rdma-core provider build failed (full log: $out/rdma-build.log)"
    fi
    rm -rf "$RDMA_OUT.tmp"; mkdir -p "$RDMA_OUT.tmp"
    install -m 0755 "$src/build/lib/librnic-rdmav34.so" "$RDMA_OUT.tmp/"
    install -m 0644 "$src/build/providers/rnic/rnic.driver" "$RDMA_OUT.tmp/"
    mkdir -p "$RDMA_OUT.tmp/tools"
    for t in $IBVERBS_TOOLS; do install -m 0755 "$src/rnic-tools/${t%.c}" "$RDMA_OUT.tmp/tools/"; done
    echo "$key" > "$RDMA_OUT.tmp/.key"
    rm -rf "$RDMA_OUT"; mv "$RDMA_OUT.tmp" "$RDMA_OUT"
    rm -rf "$src"
    log "rdma-core provider: built librnic-rdmav34.so"
    RDMA_KEY=$key
}

# Copies a dynamically linked binary of the root into the initramfs stage, with its libraries.
stage_binary() {
    local stage=$1 bin=$2 dest=$3 lib
    install -D -m 0755 "$ROOT$bin" "$stage$dest"
    "$ROOT/lib64/ld-linux-x86-64.so.2" --library-path "$ROOT/usr/lib/x86_64-linux-gnu" \
        --list "$ROOT$bin" | awk '$2=="=>" && $3 ~ /^\// {print $3}' | while read -r lib; do
        install -D -m 0755 "$(readlink -f "$lib")" "$stage/usr/lib/x86_64-linux-gnu/$(basename "$lib")"
    done
}

# rdma-core's test suite on pyverbs (docs/ibverbs.md): python3 with the standard-library
# modules and pyverbs files the suite loads (listed by images/pyverbs-files.py, run in the
# root), the suite itself (tests/ of the rdma-core source fetched with the root, with its
# compiled .pyc) in /usr/lib/rdma-core/tests, and iproute2's `ip` (the suite runs
# `ip -j addr show`, which busybox's ip does not know). pyverbs is Debian's python3-pyverbs,
# built from the same source package as the root's libibverbs1.
stage_pyverbs() {
    local stage=$1 work f src pyver ibver
    pyver=$(awk '$1=="python3-pyverbs" {print $2}' "$ROOT/.packages")
    ibver=$(awk '$1=="libibverbs1" {print $2}' "$ROOT/.packages")
    [ -n "$pyver" ] && [ "$pyver" = "$ibver" ] || die "python3-pyverbs '$pyver' is not of libibverbs1's version $ibver"
    [ "$(cat "$ROOT/usr/src/rdma-core/VERSION")" = "$ibver" ] || die "rdma-core's source is not of libibverbs1's version $ibver"
    work="$ROOT/build/pyverbs.$$"
    rm -rf "$work"; mkdir -p "$work"
    cp -a "$ROOT/usr/src/rdma-core/src/tests" "$work/tests"
    cp "$here/pyverbs-files.py" "$work/"
    if ! in_root python3 "/build/pyverbs.$$/pyverbs-files.py" "/build/pyverbs.$$/tests" \
            >"$work/files" 2>"$out/pyverbs-files.log"; then
        tail -n 20 "$out/pyverbs-files.log" >&2
        rm -rf "$work"
        die "listing the files of rdma-core's test suite failed (full log: $out/pyverbs-files.log)"
    fi
    stage_binary "$stage" "/usr/bin/$(readlink "$ROOT/usr/bin/python3")" /usr/bin/python3
    while read -r f; do
        src="$ROOT$f"
        # Debian links some files into /etc (sitecustomize.py), absolute: inside the root.
        [ -L "$src" ] && case $(readlink "$src") in /*) src="$ROOT$(readlink "$src")" ;; esac
        case $f in
            *.so) stage_binary "$stage" "$f" "$f" ;;
            # Timestamps kept: a .pyc is used only while its source's mtime matches.
            *) install -p -D -m 0644 "$src" "$stage$f" ;;
        esac
    done <"$work/files"
    mkdir -p "$stage/usr/lib/rdma-core"
    cp -a "$work/tests" "$stage/usr/lib/rdma-core/tests"
    rm -rf "$work"
    rm -f "$stage/usr/bin/ip" "$stage/usr/sbin/ip" "$stage/bin/ip" "$stage/sbin/ip"
    stage_binary "$stage" /usr/bin/ip /usr/bin/ip
}

# Runs the root's kmod as `tool` (modprobe, depmod) on the host, through the root's loader.
kmod_root() {
    local tool=$1
    shift
    "$ROOT/lib64/ld-linux-x86-64.so.2" --library-path "$ROOT/usr/lib/x86_64-linux-gnu" --argv0 "$tool" "$ROOT/usr/bin/kmod" "$@"
}

build_initramfs() {
    local key stage tool applet
    key=$( { echo "recipe=$INITRAMFS_RECIPE driver=$DRIVER_KEY rdma=$RDMA_KEY kver=$KVER";
             grep -E '^(busybox-static|kmod|pciutils|pci.ids|libc6|rdma-core|ibverbs-providers|ibverbs-utils|perftest|iproute2|libibverbs1|python3.*|libpython3.*|ethtool|iperf3|libiperf0|libsctp1|libmnl0|libssl3.*)\s' "$ROOT/.packages";
             sha256sum "$here/init.sh" "$here/build.sh" "$here/pyverbs-files.py"; } | hash_stdin)
    if key_matches "$out/initramfs.key" "$key" && [ -f "$out/initramfs.cpio.gz" ]; then
        log "initramfs: cached"; return 0
    fi
    log "initramfs: packing"
    stage="$out/initramfs.stage"
    rm -rf "$stage"
    mkdir -p "$stage"/{bin,sbin,usr/bin,usr/sbin,usr/lib/x86_64-linux-gnu,lib64,proc,sys,dev,tmp,root,etc,run,usr/share/misc}
    ln -s usr/lib "$stage/lib"
    install -m 0755 "$ROOT/usr/bin/busybox" "$stage/bin/busybox"
    for applet in $("$stage/bin/busybox" --list-full); do
        [ -e "$stage/$applet" ] || ln -s /bin/busybox "$stage/$applet"
    done
    install -m 0755 "$(readlink -f "$ROOT/lib64/ld-linux-x86-64.so.2")" "$stage/lib64/ld-linux-x86-64.so.2"
    rm -f "$stage/usr/bin/lspci" "$stage/usr/bin/setpci" "$stage/sbin/lspci" "$stage/sbin/setpci"
    stage_binary "$stage" /usr/bin/lspci /usr/bin/lspci
    stage_binary "$stage" /usr/bin/setpci /usr/bin/setpci
    stage_binary "$stage" /usr/bin/kmod /usr/bin/kmod
    for tool in insmod rmmod lsmod modprobe modinfo depmod; do
        rm -f "$stage/sbin/$tool" "$stage/bin/$tool" "$stage/usr/sbin/$tool" "$stage/usr/bin/$tool"
        ln -s /usr/bin/kmod "$stage/sbin/$tool"
    done
    [ -f "$ROOT/usr/share/misc/pci.ids" ] && cp "$ROOT/usr/share/misc/pci.ids" "$stage/usr/share/misc/"
    mkdir -p "$stage/lib/modules/$KVER/extra"
    cp "$DRIVER_OUT"/*.ko "$stage/lib/modules/$KVER/extra/"
    cp "$ROOT/lib/modules/$KVER"/modules.{order,builtin,builtin.modinfo} "$stage/lib/modules/$KVER/" 2>/dev/null || true
    local ko rel mod
    for mod in $GUEST_MODULES; do
        for ko in $(kmod_root modprobe -d "$ROOT" -S "$KVER" --show-depends "$mod" | awk '$1=="insmod" {print $2}'); do
            rel=${ko#"$ROOT"}
            install -D -m 0644 "$ko" "$stage$rel"
        done
    done
    for tool in $GUEST_BINARIES; do
        rm -f "$stage$tool"	# a busybox applet of the same name gives way
        stage_binary "$stage" "$tool" "$tool"
    done
    # glibc loads libgcc_s at run time for pthread_cancel (iperf3 ends its threads with it).
    stage_binary "$stage" /usr/lib/x86_64-linux-gnu/libgcc_s.so.1 /usr/lib/x86_64-linux-gnu/libgcc_s.so.1
    # libibverbs loads its providers at run time: the rxe provider and its config.
    stage_binary "$stage" /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
    install -D -m 0644 "$ROOT/etc/libibverbs.d/rxe.driver" "$stage/etc/libibverbs.d/rxe.driver"
    # ... and ours (build_rdma), next to Debian's libibverbs.
    install -m 0755 "$RDMA_OUT/librnic-rdmav34.so" "$stage/usr/lib/x86_64-linux-gnu/libibverbs/"
    install -m 0644 "$RDMA_OUT/rnic.driver" "$stage/etc/libibverbs.d/rnic.driver"
    stage_pyverbs "$stage"
    kmod_root depmod -b "$stage" "$KVER"
    install -m 0755 "$DRIVER_OUT"/tools/* "$RDMA_OUT"/tools/* "$stage/usr/bin/"
    install -m 0755 "$here/init.sh" "$stage/init"
    (cd "$stage" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet -R 0:0) \
        | gzip -1 > "$out/initramfs.cpio.gz.tmp"
    mv "$out/initramfs.cpio.gz.tmp" "$out/initramfs.cpio.gz"
    echo "$key" > "$out/initramfs.key"
    rm -rf "$stage"
    log "initramfs: $(du -h "$out/initramfs.cpio.gz" | cut -f1)"
}

write_outputs() {
    local qemu_ver
    install -m 0644 "$ROOT/boot/vmlinuz-$KVER" "$out/vmlinuz.tmp" && mv "$out/vmlinuz.tmp" "$out/vmlinuz"
    ln -sfn "$ROOT" "$out/root"
    mkdir -p "$out/bin"
    cat > "$out/bin/qemu-system-x86_64" <<EOF
#!/bin/sh
# QEMU from the private toolchain root, run through that root's own loader (no chroot).
R='$ROOT'
exec "\$R/lib64/ld-linux-x86-64.so.2" --library-path "\$R/usr/lib/x86_64-linux-gnu" \\
    "\$R/usr/bin/qemu-system-x86_64" -L "\$R/usr/share/qemu" -L "\$R/usr/share/seabios" "\$@"
EOF
    chmod 0755 "$out/bin/qemu-system-x86_64"
    qemu_ver=$("$out/bin/qemu-system-x86_64" --version | head -n 1)
    "$out/bin/qemu-system-x86_64" -device help 2>/dev/null | grep -q '"vfio-user-pci"' \
        || die "this QEMU ($qemu_ver) has no vfio-user-pci device"
    {
        echo "# rnic-emu guest image manifest (written by images/build.sh)"
        echo "kernel	$KVER"
        echo "qemu	$qemu_ver"
        echo "root	$ROOT"
        echo "# packages of the toolchain root:"
        cat "$ROOT/.packages"
    } > "$out/manifest.txt"
    printf 'KVER=%s\nROOT=%s\n' "$KVER" "$ROOT" > "$out/image.env"
}

mkdir -p "$out"
ensure_host_tools
build_root
kernel_version
build_driver
build_rdma
build_initramfs
write_outputs
log "image ready: $out (kernel $KVER)"
