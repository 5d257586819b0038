//! The multicast backend of the L2 segment (docs/fabric.md "The segment"), the default
//! one: Ethernet frames, one per UDP datagram, on an IPv4 multicast group of a host
//! interface (loopback by default), which is the framing of QEMU's `-netdev dgram` with a multicast remote
//! (and the older `-netdev socket,mcast=`). Every member, node server or plain QEMU guest,
//! sends to the group and receives what the others send; no process relays and no root is
//! needed.
//!
//! A node server also learns, as a switch does, where the other servers' ports are: it
//! sends from a unicast socket of its own, so a frame from another server arrives from that
//! server's socket, and frames to that MAC then go to it directly instead of to every
//! member. Frames to group MACs and to MACs not learned (a plain QEMU guest sends from its
//! group socket, so it is never learned) go to the group.
//!
//! Not here: routing the group off the host (the TTL is 1; across hosts, VXLAN is the
//! backend: `super::vxlan`).

use super::batch::{send_datagrams, RecvBatch};
use super::segment::{Dest, Dropped, MAX_LEARNED};
use rnic_emu_core::rnic::fabric::frame::{is_group, Mac};
use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::str::FromStr;
use std::sync::Mutex;

/// The default multicast group of segments (administratively scoped, RFC 2365).
pub const DEFAULT_GROUP: Ipv4Addr = Ipv4Addr::new(239, 255, 47, 91);

/// Where a segment is: `group:port`, optionally `@interface` (the local address whose
/// interface carries the group; 127.0.0.1 by default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MulticastAddr {
    pub group: Ipv4Addr,
    pub port: u16,
    pub interface: Ipv4Addr,
}

impl MulticastAddr {
    /// The segment's group and port, as a socket address.
    pub fn group_addr(&self) -> SocketAddrV4 {
        SocketAddrV4::new(self.group, self.port)
    }

    /// The `-netdev` options with which a stock QEMU guest joins this segment.
    pub fn qemu_netdev(&self, id: &str) -> String {
        // QEMU wants a port in `local`; for a multicast remote it takes only the address
        // (the interface), and binds the group's port.
        format!(
            "dgram,id={id},remote.type=inet,remote.host={},remote.port={},local.type=inet,local.host={},local.port=0",
            self.group, self.port, self.interface
        )
    }
}

impl std::fmt::Display for MulticastAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}@{}", self.group, self.port, self.interface)
    }
}

impl FromStr for MulticastAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (addr, interface) = match s.split_once('@') {
            Some((a, i)) => (a, i.parse::<Ipv4Addr>().map_err(|e| format!("segment interface '{i}': {e}"))?),
            None => (s, Ipv4Addr::LOCALHOST),
        };
        let sa: SocketAddrV4 = addr.parse().map_err(|e| format!("segment '{addr}' (want GROUP:PORT): {e}"))?;
        if !sa.ip().is_multicast() || sa.port() == 0 {
            return Err(format!("segment '{addr}': the group must be an IPv4 multicast address and the port not 0"));
        }
        Ok(MulticastAddr { group: *sa.ip(), port: sa.port(), interface })
    }
}

/// A segment of its own for one run: the port is a free UDP port of the interface, held by
/// the returned socket for as long as the run lives (so no other run on the host picks
/// it: the port is taken from the kernel's ephemeral allocation).
pub fn reserve(interface: Ipv4Addr) -> io::Result<(MulticastAddr, UdpSocket)> {
    let hold = UdpSocket::bind(SocketAddrV4::new(interface, 0))?;
    let port = hold.local_addr()?.port();
    Ok((MulticastAddr { group: DEFAULT_GROUP, port, interface }, hold))
}

/// A port's two sockets on the segment and what it has learned.
pub struct Multicast {
    pub addr: MulticastAddr,
    /// Bound to the group and port: what any member sends to the group (held for its
    /// descriptor, in `fds`; read through it).
    #[allow(dead_code)]
    group: UdpSocket,
    /// This port's own socket: every frame leaves through it, and learned peers send here.
    own: UdpSocket,
    own_addr: SocketAddrV4,
    fds: [RawFd; 2],
    learned: Mutex<HashMap<Mac, SocketAddrV4>>,
}

pub(super) fn setsockopt<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: setsockopt on a socket we own with a pointer to a live value and its size.
    let rc = unsafe { libc::setsockopt(fd, level, name, (value as *const T).cast(), std::mem::size_of::<T>() as libc::socklen_t) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A UDP socket with SO_REUSEADDR set before it binds to `at` (several members of one
/// host share the group's port).
fn bind_shared(at: SocketAddrV4) -> io::Result<UdpSocket> {
    // SAFETY: a plain socket(2) call; the fd is owned by the UdpSocket from here on.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh socket nobody else owns.
    let socket = unsafe { UdpSocket::from_raw_fd(fd) };
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, &(1 as libc::c_int))?;
    let sa = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: at.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(*at.ip()).to_be() },
        sin_zero: [0; 8],
    };
    // SAFETY: bind with a valid sockaddr_in and its size.
    let rc = unsafe { libc::bind(fd, (&sa as *const libc::sockaddr_in).cast(), std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(socket)
}

/// Asks for 32 MiB socket buffers (beyond rmem_max/wmem_max when allowed: root), so that a
/// burst of read responses is not lost on loopback; falls back to what the kernel grants.
pub(super) fn enlarge_buffers(socket: &UdpSocket) {
    let size: libc::c_int = 32 << 20;
    for (force, plain) in [(libc::SO_RCVBUFFORCE, libc::SO_RCVBUF), (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)] {
        if setsockopt(socket.as_raw_fd(), libc::SOL_SOCKET, force, &size).is_err() {
            let _ = setsockopt(socket.as_raw_fd(), libc::SOL_SOCKET, plain, &size);
        }
    }
}

impl Multicast {
    /// Joins the segment at `addr`.
    pub fn join(addr: MulticastAddr) -> io::Result<Multicast> {
        let group = bind_shared(addr.group_addr())?;
        let mreq = libc::ip_mreq {
            imr_multiaddr: libc::in_addr { s_addr: u32::from(addr.group).to_be() },
            imr_interface: libc::in_addr { s_addr: u32::from(addr.interface).to_be() },
        };
        setsockopt(group.as_raw_fd(), libc::IPPROTO_IP, libc::IP_ADD_MEMBERSHIP, &mreq)
            .map_err(|e| io::Error::new(e.kind(), format!("joining multicast group {} on {}: {e}", addr.group, addr.interface)))?;
        let own = UdpSocket::bind(SocketAddrV4::new(addr.interface, 0))?;
        let ifaddr = libc::in_addr { s_addr: u32::from(addr.interface).to_be() };
        setsockopt(own.as_raw_fd(), libc::IPPROTO_IP, libc::IP_MULTICAST_IF, &ifaddr)?;
        setsockopt(own.as_raw_fd(), libc::IPPROTO_IP, libc::IP_MULTICAST_LOOP, &(1 as libc::c_int))?;
        setsockopt(own.as_raw_fd(), libc::IPPROTO_IP, libc::IP_MULTICAST_TTL, &(1 as libc::c_int))?;
        for s in [&group, &own] {
            s.set_nonblocking(true)?;
            enlarge_buffers(s);
        }
        let own_addr = match own.local_addr()? {
            std::net::SocketAddr::V4(a) => a,
            std::net::SocketAddr::V6(_) => return Err(io::Error::other("the segment's socket is not IPv4")),
        };
        let fds = [group.as_raw_fd(), own.as_raw_fd()];
        Ok(Multicast { addr, group, own, own_addr, fds, learned: Mutex::new(HashMap::new()) })
    }

    /// The two sockets to wait on (readable: frames to receive).
    pub fn fds(&self) -> &[RawFd] {
        &self.fds
    }

    /// Receives a batch from one of [`Multicast::fds`].
    pub fn recv(&self, batch: &mut RecvBatch, fd: RawFd) -> io::Result<usize> {
        batch.recv(fd)
    }

    /// The frame a datagram carries: all of it, but nothing for a frame this port sent
    /// itself (the group loops it back to every member).
    pub fn decap<'a>(&self, from: SocketAddrV4, datagram: &'a [u8]) -> Result<Option<&'a [u8]>, Dropped> {
        Ok((!self.is_own(&from)).then_some(datagram))
    }

    /// Sends the queued frames from this port's own socket.
    pub fn send(&self, queue: &[(Dest, Vec<u8>)]) -> (usize, Option<io::Error>) {
        let group = self.addr.group_addr();
        send_datagrams(self.own.as_raw_fd(), &[], queue.len(), |i| match &queue[i] {
            (Dest::To(a), d) => (*a, &d[..]),
            (Dest::All, d) => (group, &d[..]),
        })
    }

    /// Where a frame to `dst` goes: the member that sent from `dst` before, or the group.
    pub fn destination(&self, dst: &Mac) -> Dest {
        if is_group(dst) {
            return Dest::All;
        }
        let learned = self.learned.lock().unwrap_or_else(|p| p.into_inner());
        learned.get(dst).map_or(Dest::All, |a| Dest::To(*a))
    }

    /// True for a frame this port sent itself (the group loops it back to every member).
    pub fn is_own(&self, from: &SocketAddrV4) -> bool {
        *from == self.own_addr
    }

    /// MACs learned so far.
    pub fn learned(&self) -> usize {
        self.learned.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Notes that `src` sends from `from`, when `from` is another server's own socket
    /// (a member sending from the group's port is reached through the group).
    pub fn learn(&self, src: &Mac, from: SocketAddrV4) {
        if is_group(src) || from.port() == self.addr.port || *from.ip() != self.addr.interface {
            return;
        }
        let mut learned = self.learned.lock().unwrap_or_else(|p| p.into_inner());
        if learned.len() < MAX_LEARNED || learned.contains_key(src) {
            learned.insert(*src, from);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_segment_addresses() {
        let s: MulticastAddr = "239.1.2.3:5000".parse().unwrap();
        assert_eq!(s, MulticastAddr { group: Ipv4Addr::new(239, 1, 2, 3), port: 5000, interface: Ipv4Addr::LOCALHOST });
        assert_eq!(s.to_string().parse::<MulticastAddr>(), Ok(s));
        assert!("10.0.0.1:5000".parse::<MulticastAddr>().is_err(), "not multicast");
        assert!("239.1.2.3:0".parse::<MulticastAddr>().is_err());
        assert!(s.qemu_netdev("seg").contains("remote.host=239.1.2.3,remote.port=5000,local.type=inet,local.host=127.0.0.1"));
    }

    #[test]
    fn members_hear_each_other_and_learn_unicast_paths() {
        let (addr, _hold) = reserve(Ipv4Addr::LOCALHOST).unwrap();
        let (a, b) = (Multicast::join(addr).unwrap(), Multicast::join(addr).unwrap());
        let mac_a = [2, 0, 0, 0, 0, 0xa];
        a.own.send_to(b"hello", addr.group_addr()).unwrap();
        let mut buf = [0u8; 16];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let from = loop {
            if let Ok((n, std::net::SocketAddr::V4(from))) = b.group.recv_from(&mut buf) {
                assert_eq!(&buf[..n], b"hello");
                break from;
            }
            assert!(std::time::Instant::now() < deadline, "b heard nothing on the group");
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        assert!(a.is_own(&from) && !b.is_own(&from));
        assert_eq!(a.decap(from, b"hello"), Ok(None), "a port does not hear its own frames");
        assert_eq!(b.decap(from, b"hello"), Ok(Some(&b"hello"[..])), "the frame is the whole datagram");
        assert_eq!(b.destination(&mac_a), Dest::All, "not learned yet");
        b.learn(&mac_a, from);
        assert_eq!(b.destination(&mac_a), Dest::To(from), "then sent directly");
        assert_eq!(b.destination(&[0xff; 6]), Dest::All, "broadcast always to the group");
        b.learn(&[0x33, 0x33, 0, 0, 0, 1], from);
        assert_eq!(b.destination(&[0x33, 0x33, 0, 0, 0, 1]), Dest::All, "group MACs are never learned");
        b.learn(&[2, 0, 0, 0, 0, 0xb], SocketAddrV4::new(Ipv4Addr::LOCALHOST, addr.port));
        assert_eq!(b.destination(&[2, 0, 0, 0, 0, 0xb]), Dest::All, "a member on the group's port stays behind the group");
        assert_eq!(b.learned(), 1);
    }
}
