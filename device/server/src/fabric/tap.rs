//! The TAP backend of the L2 segment (docs/fabric.md "Backends: multicast, VXLAN, TAP"):
//! the port is a Linux TAP device (`/dev/net/tun`, `IFF_TAP | IFF_NO_PI`: whole Ethernet
//! frames, no packet-information prefix), so that what the host does with an interface
//! (a bridge, a vxlan device behind the bridge, `tc netem`, tcpdump) is part of the fabric.
//! Each `read(2)` is one frame the host sent on the device, each `write(2)` one frame it
//! receives; the descriptor is non-blocking, reads come in batches on the port's event
//! loop. `tap:NAME` attaches to the device NAME (persistent, made with `ip tuntap add dev
//! NAME mode tap`) or creates it (gone when the server exits); either needs CAP_NET_ADMIN,
//! or a persistent device owned by the server's user.
//!
//! Frames from the device have no sender address: they are reported from [`TAP_SOURCE`]
//! (0.0.0.0:0), and nothing is learned (the device is the whole segment). Not implemented:
//! `IFF_VNET_HDR` offloads (the host hands over frames whole, checksums done), several
//! queues, one device shared by several ports.

use super::batch::RecvBatch;
use super::segment::Dest;
use std::fs::File;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

/// Where frames read from the device are said to come from.
pub const TAP_SOURCE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0);
/// Bytes of an interface name, its NUL included (Linux `IFNAMSIZ`).
const IFNAMSIZ: usize = 16;

/// `struct ifreq` as TUNSETIFF reads it: the name, then the flags of the union (40 bytes).
#[repr(C)]
struct IfReq {
    name: [u8; IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

const _: () = assert!(std::mem::size_of::<IfReq>() == 40);

/// Whether `name` is a name Linux gives an interface: 1..=15 bytes, none of them '/', ':',
/// '%' (a pattern) or white space, and not "." or "..".
pub fn check_name(name: &str) -> Result<(), String> {
    let bad = name.is_empty() || name.len() >= IFNAMSIZ || name == "." || name == "..";
    if bad || name.bytes().any(|b| b == b'/' || b == b':' || b == b'%' || b.is_ascii_whitespace() || !b.is_ascii_graphic()) {
        return Err(format!("TAP device name '{name}': 1 to {} printable characters, no '/', ':', '%' or spaces", IFNAMSIZ - 1));
    }
    Ok(())
}

/// A port's TAP device.
pub struct Tap {
    name: String,
    file: File,
    fds: [RawFd; 1],
}

impl Tap {
    /// Attaches to the TAP device `name`, creating it when it does not exist.
    pub fn open(name: &str) -> io::Result<Tap> {
        check_name(name).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let needs = format!("a TAP device needs CAP_NET_ADMIN (root), or a persistent device of this user (ip tuntap add dev {name} mode tap user USER)");
        let file = std::fs::OpenOptions::new().read(true).write(true).custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC).open("/dev/net/tun").map_err(|e| {
            let why = match e.kind() {
                io::ErrorKind::NotFound => "no such device (is the tun module loaded?)".to_string(),
                io::ErrorKind::PermissionDenied => needs.clone(),
                _ => String::new(),
            };
            io::Error::new(e.kind(), format!("opening /dev/net/tun for tap:{name}: {e}; {why}"))
        })?;
        let mut req = IfReq { name: [0; IFNAMSIZ], flags: (libc::IFF_TAP | libc::IFF_NO_PI) as libc::c_short, _pad: [0; 22] };
        req.name[..name.len()].copy_from_slice(name.as_bytes());
        // SAFETY: TUNSETIFF reads and writes one `struct ifreq`, which `req` is laid out as
        // (40 bytes, checked above); the fd is the tun device we just opened.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF as _, &mut req as *mut IfReq) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            let why = match e.raw_os_error() {
                Some(libc::EPERM | libc::EACCES) => needs,
                Some(libc::EBUSY) => "another process (or port) has the device already".to_string(),
                Some(libc::EINVAL) => format!("{name} exists and is not a TAP device (or has other flags)"),
                _ => String::new(),
            };
            return Err(io::Error::new(e.kind(), format!("attaching to the TAP device {name} (TUNSETIFF): {e}; {why}")));
        }
        let fds = [file.as_raw_fd()];
        log::info!("fabric: on the TAP device {name}");
        Ok(Tap { name: name.to_string(), file, fds })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn fds(&self) -> &[RawFd] {
        &self.fds
    }

    /// Reads the frames the host sent on the device (a batch, without waiting).
    pub fn recv(&self, batch: &mut RecvBatch, fd: RawFd) -> io::Result<usize> {
        batch.read(fd, TAP_SOURCE)
    }

    /// Writes the queued frames to the device, one `write(2)` each (the device takes a
    /// frame whole or not at all); returns how many it took and the error that stopped
    /// the rest (EIO while the host keeps the device down).
    pub fn send(&self, queue: &[(Dest, Vec<u8>)]) -> (usize, Option<io::Error>) {
        for (i, (_, frame)) in queue.iter().enumerate() {
            loop {
                // SAFETY: write(2) of a buffer we borrow for the call, with its length.
                let n = unsafe { libc::write(self.file.as_raw_fd(), frame.as_ptr().cast(), frame.len()) };
                if n >= 0 {
                    break;
                }
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return (i, Some(e));
                }
            }
        }
        (queue.len(), None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_as_linux_checks_them() {
        for good in ["t", "tap0", "rnic-tap.1", "fifteen-bytes-x"] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        for bad in ["", ".", "..", "a/b", "a:b", "tap%d", "a b", "sixteen-bytes-xx", "tä"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    /// In a network namespace of the test thread's own (root only; skipped otherwise):
    /// the device is created, reads nothing without waiting, and a second port cannot
    /// have it.
    #[test]
    fn opens_a_tap_device_of_its_own_and_refuses_a_second_port() {
        let t = std::thread::spawn(|| {
            // SAFETY: unshare(2) of the calling thread's network namespace only.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                eprintln!("skipped: no network namespace of our own ({})", io::Error::last_os_error());
                return;
            }
            let tap = match Tap::open("rnictap0") {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("skipped: {e}");
                    return;
                }
            };
            assert_eq!(tap.name(), "rnictap0");
            let c = std::ffi::CString::new("rnictap0").unwrap();
            // SAFETY: if_nametoindex reads a NUL-terminated string we own.
            assert_ne!(unsafe { libc::if_nametoindex(c.as_ptr()) }, 0, "the device exists");
            let mut batch = RecvBatch::default();
            assert_eq!(tap.recv(&mut batch, tap.fds()[0]).unwrap(), 0, "nothing queued: no wait");
            let e = Tap::open("rnictap0").err().expect("one port per device");
            assert!(e.to_string().contains("has the device already"), "{e}");
            let (sent, err) = tap.send(&[(Dest::All, vec![0xff; 60])]);
            assert_eq!(sent, 0, "a device the host keeps down takes nothing");
            assert!(err.is_some());
        });
        t.join().unwrap();
    }
}
