//! `rnic-emu run --netns`: the run's node servers and QEMU processes in a network
//! namespace of their own. A topology's QEMU sockets (the two-node Soft-RoCE link's UDP
//! ports) are fixed, so two runs of it on one host collide ("Address already in use"); in
//! private namespaces they do not (the fabric segment is the run's own either way).
//! Everything else a run uses (the rendezvous store, the control and vfio-user sockets)
//! is a Unix socket in the run's own directory, which namespaces do not separate.

use anyhow::bail;

/// Moves the calling thread into a new network namespace with its loopback interface up
/// (the whole 127.0.0.0/8 is local on it); processes it starts afterwards are in it too.
/// Needs CAP_SYS_ADMIN (root).
pub fn enter_private() -> anyhow::Result<()> {
    // SAFETY: unshare takes no pointers; it changes only this thread's namespaces.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        let e = std::io::Error::last_os_error();
        bail!("--netns: creating a network namespace: {e} (it needs root, CAP_SYS_ADMIN)");
    }
    loopback_up()
}

/// Sets IFF_UP on `lo` (a new namespace's only interface, down at first).
fn loopback_up() -> anyhow::Result<()> {
    // SAFETY: a plain socket call; the fd is owned below and closed on every path.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        bail!("--netns: a socket to configure lo: {}", std::io::Error::last_os_error());
    }
    // SAFETY: fd is a socket we just opened and own.
    let _owned = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: ifreq is plain old data; all zeroes is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in ifr.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS and SIOCSIFFLAGS read and write the ifreq we pass, which lives
    // across both calls.
    unsafe {
        if libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut ifr) != 0 {
            bail!("--netns: reading the flags of lo: {}", std::io::Error::last_os_error());
        }
        ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(fd, libc::SIOCSIFFLAGS, &ifr) != 0 {
            bail!("--netns: bringing lo up: {}", std::io::Error::last_os_error());
        }
    }
    Ok(())
}
