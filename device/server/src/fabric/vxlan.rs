//! The VXLAN backend of the L2 segment (docs/fabric.md "Backends: multicast, VXLAN,
//! TAP"): every frame travels in a UDP datagram to a remote VTEP, behind the 8-byte VXLAN
//! header of RFC 7348 section 5 (flags with the I bit, 24 reserved bits, the 24-bit VNI, 8
//! reserved bits), from and to UDP port 4789 unless told otherwise. The remote VTEPs are
//! configured (`vxlan:VNI@LOCAL[:PORT],remote=IP[:PORT],...`), so the far end can be this
//! server on another host or Linux's own `vxlan` device (or any VTEP).
//!
//! - Sending: a frame to a learned MAC goes to the VTEP it was learned from; a frame to a
//!   group MAC or to a MAC not learned goes to every remote VTEP (head-end replication,
//!   RFC 7348 section 4.2 without an underlay multicast group). The header is the same for
//!   every frame of the segment and goes from an iovec of its own: frames are not copied.
//! - Receiving: a datagram is taken only from a configured remote VTEP (by its address;
//!   by address and port where several remotes share an address), since Linux sends from
//!   a port it picks per flow. The header must have exactly the I flag, all reserved bits
//!   zero and the segment's VNI (stricter than the RFC's "ignored on receipt", as Linux's
//!   vxlan is without extensions); anything else is dropped and counted (by the port,
//!   `ETH_RX_ERRORS`, and by the segment). The inner frame is a slice of the datagram.
//! - Learning: the inner source MAC of a well-formed frame maps to the remote it came
//!   from, at most `MAX_LEARNED` MACs (a MAC seen again moves); a datagram from a
//!   stranger never reaches the table.
//!
//! Not implemented: an underlay multicast group (Linux's `group`), IPv6 underlays, the
//! extensions (GBP, GPE), ageing of learned MACs, outer source ports picked per flow (the
//! socket's port is every datagram's source).

use super::batch::{send_datagrams, RecvBatch};
use super::multicast::enlarge_buffers;
use super::segment::{Dest, Dropped, MAX_LEARNED};
use rnic_emu_core::rnic::fabric::frame::{is_group, Mac};
use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::str::FromStr;
use std::sync::Mutex;
use thiserror::Error;

/// The VXLAN UDP port (IANA, RFC 7348 section 5).
pub const VXLAN_PORT: u16 = 4789;
/// Bytes of the VXLAN header.
pub const VXLAN_HLEN: usize = 8;
/// The I flag: the VNI is valid (the only flag of RFC 7348).
pub const FLAG_I: u8 = 0x08;
/// The largest VNI (24 bits).
pub const MAX_VNI: u32 = 0xff_ffff;
/// Remote VTEPs a segment lists at most.
pub const MAX_REMOTES: usize = 64;

/// Where a VXLAN segment is: its VNI, the local VTEP address, the remote VTEPs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VxlanAddr {
    pub vni: u32,
    pub local: SocketAddrV4,
    pub remotes: Vec<SocketAddrV4>,
}

/// `IP[:PORT]`, the port [`VXLAN_PORT`] when not given.
fn endpoint(s: &str, what: &str) -> Result<SocketAddrV4, String> {
    let (ip, port) = match s.split_once(':') {
        Some((ip, p)) => (ip, p.parse::<u16>().map_err(|e| format!("{what} port '{p}': {e}"))?),
        None => (s, VXLAN_PORT),
    };
    let ip: Ipv4Addr = ip.parse().map_err(|e| format!("{what} address '{ip}': {e}"))?;
    if port == 0 {
        return Err(format!("{what} '{s}': the port must not be 0"));
    }
    Ok(SocketAddrV4::new(ip, port))
}

impl FromStr for VxlanAddr {
    type Err = String;

    /// `VNI@LOCAL[:PORT],remote=IP[:PORT],...` (what follows `vxlan:`).
    fn from_str(s: &str) -> Result<Self, String> {
        const WANT: &str = "want vxlan:VNI@LOCAL-IP[:PORT],remote=IP[:PORT],...";
        let mut parts = s.split(',');
        let head = parts.next().unwrap_or_default();
        let Some((vni, local)) = head.split_once('@') else { return Err(format!("VXLAN segment '{s}': {WANT}")) };
        let vni: u32 = vni.parse().map_err(|e| format!("VXLAN VNI '{vni}': {e}"))?;
        if vni > MAX_VNI {
            return Err(format!("VXLAN VNI {vni}: at most {MAX_VNI} (24 bits)"));
        }
        let local = endpoint(local, "VXLAN local")?;
        if local.ip().is_multicast() || local.ip().is_broadcast() {
            return Err(format!("VXLAN local address {}: not a unicast address", local.ip()));
        }
        let mut remotes = Vec::new();
        for part in parts {
            let Some(r) = part.strip_prefix("remote=") else { return Err(format!("VXLAN segment option '{part}': {WANT}")) };
            let r = endpoint(r, "VXLAN remote")?;
            if r.ip().is_multicast() || r.ip().is_broadcast() || r.ip().is_unspecified() {
                return Err(format!("VXLAN remote {r}: list each remote VTEP's unicast address (no underlay group)"));
            }
            if r == local {
                return Err(format!("VXLAN remote {r} is this VTEP itself"));
            }
            if remotes.contains(&r) {
                return Err(format!("VXLAN remote {r} is listed twice"));
            }
            remotes.push(r);
        }
        if remotes.is_empty() || remotes.len() > MAX_REMOTES {
            return Err(format!("VXLAN segment '{s}': between 1 and {MAX_REMOTES} remote VTEPs ({WANT})"));
        }
        Ok(VxlanAddr { vni, local, remotes })
    }
}

impl std::fmt::Display for VxlanAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "vxlan:{}@{}", self.vni, self.local)?;
        for r in &self.remotes {
            write!(f, ",remote={r}")?;
        }
        Ok(())
    }
}

/// What is wrong with a received VXLAN header.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum VxlanError {
    #[error("a {0}-byte datagram is shorter than a VXLAN header")]
    Short(usize),
    #[error("VXLAN flags {0:#04x} (want only the I flag, 0x08)")]
    Flags(u8),
    #[error("VXLAN reserved bits set")]
    Reserved,
    #[error("VXLAN VNI {got}, not this segment's {want}")]
    Vni { got: u32, want: u32 },
}

/// The VXLAN header of `vni`'s frames.
pub fn header(vni: u32) -> [u8; VXLAN_HLEN] {
    let v = (vni & MAX_VNI).to_be_bytes();
    [FLAG_I, 0, 0, 0, v[1], v[2], v[3], 0]
}

/// The frame a VXLAN datagram of `vni` carries, once the header is checked.
pub fn decode(datagram: &[u8], vni: u32) -> Result<&[u8], VxlanError> {
    let Some((h, frame)) = datagram.split_first_chunk::<VXLAN_HLEN>() else { return Err(VxlanError::Short(datagram.len())) };
    if h[0] != FLAG_I {
        return Err(VxlanError::Flags(h[0]));
    }
    if h[1..4] != [0, 0, 0] || h[7] != 0 {
        return Err(VxlanError::Reserved);
    }
    let got = u32::from_be_bytes([0, h[4], h[5], h[6]]);
    if got != vni {
        return Err(VxlanError::Vni { got, want: vni });
    }
    Ok(frame)
}

/// A port's VTEP: its socket, the remotes, what it learned.
pub struct Vxlan {
    addr: VxlanAddr,
    socket: UdpSocket,
    /// The socket's address (the configured one).
    local: SocketAddrV4,
    fds: [RawFd; 1],
    header: [u8; VXLAN_HLEN],
    /// Inner source MAC -> index of the remote VTEP it came from.
    learned: Mutex<HashMap<Mac, usize>>,
    /// One send's datagrams: (VTEP, index of the queued frame); kept between sends.
    scratch: Mutex<Vec<(SocketAddrV4, usize)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Vxlan {
    /// Binds the local VTEP's socket.
    pub fn join(addr: VxlanAddr) -> io::Result<Vxlan> {
        let socket = UdpSocket::bind(addr.local).map_err(|e| {
            let hint = if e.kind() == io::ErrorKind::AddrInUse { " (another VTEP, or a Linux vxlan device with this dstport, has it)" } else { "" };
            io::Error::new(e.kind(), format!("binding the VXLAN socket {}: {e}{hint}", addr.local))
        })?;
        Self::with_socket(addr, socket)
    }

    /// A VTEP on a socket already bound (to `addr.local`, or anywhere: tests).
    pub fn with_socket(addr: VxlanAddr, socket: UdpSocket) -> io::Result<Vxlan> {
        socket.set_nonblocking(true)?;
        enlarge_buffers(&socket);
        let local = match socket.local_addr()? {
            std::net::SocketAddr::V4(a) => a,
            std::net::SocketAddr::V6(_) => return Err(io::Error::other("the VXLAN socket is not IPv4")),
        };
        let fds = [socket.as_raw_fd()];
        let header = header(addr.vni);
        Ok(Vxlan { addr, socket, local, fds, header, learned: Mutex::new(HashMap::new()), scratch: Mutex::new(Vec::new()) })
    }

    pub fn fds(&self) -> &[RawFd] {
        &self.fds
    }

    pub fn recv(&self, batch: &mut RecvBatch, fd: RawFd) -> io::Result<usize> {
        batch.recv(fd)
    }

    /// The remote VTEP a datagram from `from` is from: the one with this address and
    /// port, else the only one with this address.
    fn remote_of(&self, from: &SocketAddrV4) -> Option<usize> {
        let remotes = &self.addr.remotes;
        if let Some(i) = remotes.iter().position(|r| r == from) {
            return Some(i);
        }
        let mut same_ip = remotes.iter().enumerate().filter(|(_, r)| r.ip() == from.ip()).map(|(i, _)| i);
        match (same_ip.next(), same_ip.next()) {
            (Some(i), None) => Some(i),
            _ => None,
        }
    }

    /// The frame a datagram from `from` carries: from a remote VTEP, with a good header.
    pub fn decap<'a>(&self, from: SocketAddrV4, datagram: &'a [u8]) -> Result<Option<&'a [u8]>, Dropped> {
        if from == self.local {
            return Ok(None);
        }
        self.remote_of(&from).ok_or(Dropped::Foreign)?;
        Ok(Some(decode(datagram, self.addr.vni)?))
    }

    /// Where a frame to `dst` goes: the remote VTEP it was learned from, or every one.
    pub fn destination(&self, dst: &Mac) -> Dest {
        if is_group(dst) {
            return Dest::All;
        }
        lock(&self.learned).get(dst).map_or(Dest::All, |&r| Dest::To(self.addr.remotes[r]))
    }

    /// Notes that `src` is behind the remote VTEP `from` is (nothing for a stranger).
    pub fn learn(&self, src: &Mac, from: SocketAddrV4) {
        if is_group(src) {
            return;
        }
        let Some(r) = self.remote_of(&from) else { return };
        let mut learned = lock(&self.learned);
        if learned.len() < MAX_LEARNED || learned.contains_key(src) {
            learned.insert(*src, r);
        }
    }

    pub fn learned(&self) -> usize {
        lock(&self.learned).len()
    }

    /// Sends the queued frames, each behind the header, a frame for every member to each
    /// remote VTEP; returns (frames sent whole, datagrams sent, the error that stopped it).
    pub fn send(&self, queue: &[(Dest, Vec<u8>)]) -> (usize, usize, Option<io::Error>) {
        let mut scratch = lock(&self.scratch);
        scratch.clear();
        for (i, (dest, _)) in queue.iter().enumerate() {
            match dest {
                Dest::To(a) => scratch.push((*a, i)),
                Dest::All => scratch.extend(self.addr.remotes.iter().map(|r| (*r, i))),
            }
        }
        let (sent, err) = send_datagrams(self.socket.as_raw_fd(), &self.header, scratch.len(), |i| (scratch[i].0, &queue[scratch[i].1].1[..]));
        let frames = scratch.get(sent).map_or(queue.len(), |&(_, i)| i);
        (frames, sent, err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn v4(s: &UdpSocket) -> SocketAddrV4 {
        match s.local_addr().unwrap() {
            std::net::SocketAddr::V4(a) => a,
            std::net::SocketAddr::V6(_) => panic!("bound to IPv4"),
        }
    }

    fn udp() -> UdpSocket {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    /// Waits (10 s at most) for one datagram on a VTEP's socket and decapsulates it.
    fn recv_one(v: &Vxlan) -> (SocketAddrV4, Result<Option<Vec<u8>>, Dropped>) {
        let mut batch = RecvBatch::default();
        let deadline = Instant::now() + Duration::from_secs(10);
        while batch.recv(v.fds()[0]).unwrap() == 0 {
            assert!(Instant::now() < deadline, "nothing arrived");
            std::thread::sleep(Duration::from_millis(2));
        }
        let (from, data, _) = batch.get(0).unwrap();
        let from = from.unwrap();
        (from, v.decap(from, data).map(|f| f.map(<[u8]>::to_vec)))
    }

    #[test]
    fn header_is_rfc_7348_and_every_defect_is_refused() {
        assert_eq!(header(42), [0x08, 0, 0, 0, 0, 0, 42, 0]);
        assert_eq!(header(0xab_cdef), [0x08, 0, 0, 0, 0xab, 0xcd, 0xef, 0]);
        let frame = [0x11u8; 60];
        let good = [&header(0xab_cdef)[..], &frame].concat();
        assert_eq!(decode(&good, 0xab_cdef), Ok(&frame[..]));
        assert_eq!(decode(&good[..7], 0xab_cdef), Err(VxlanError::Short(7)));
        assert_eq!(decode(&good, 42), Err(VxlanError::Vni { got: 0xab_cdef, want: 42 }));
        let with = |i: usize, b: u8| {
            let mut d = good.clone();
            d[i] = b;
            decode(&d, 0xab_cdef).map(<[u8]>::len)
        };
        assert_eq!(with(0, 0), Err(VxlanError::Flags(0)), "no I flag");
        assert_eq!(with(0, 0x0c), Err(VxlanError::Flags(0x0c)), "a reserved flag");
        assert_eq!(with(0, 0x88), Err(VxlanError::Flags(0x88)), "a reserved flag");
        for i in [1, 2, 3, 7] {
            assert_eq!(with(i, 1), Err(VxlanError::Reserved), "reserved byte {i}");
        }
        assert_eq!(decode(&header(5), 5), Ok(&[][..]), "an empty frame is the port's to refuse");
    }

    #[test]
    fn parses_addresses_and_refuses_bad_ones() {
        let a: VxlanAddr = "42@10.0.0.1,remote=10.0.0.2,remote=10.0.0.3:4790".parse().unwrap();
        assert_eq!(a.vni, 42);
        assert_eq!(a.local, "10.0.0.1:4789".parse().unwrap());
        assert_eq!(a.remotes, vec!["10.0.0.2:4789".parse().unwrap(), "10.0.0.3:4790".parse().unwrap()]);
        assert_eq!(a.to_string(), "vxlan:42@10.0.0.1:4789,remote=10.0.0.2:4789,remote=10.0.0.3:4790");
        assert_eq!("16777215@0.0.0.0:5000,remote=10.0.0.2".parse::<VxlanAddr>().unwrap().vni, MAX_VNI);
        let too_many = (0..=MAX_REMOTES).map(|i| format!(",remote=10.1.{}.{}", i / 200, i % 200 + 1)).collect::<String>();
        for bad in [
            "",
            "42",
            "42@10.0.0.1",
            "16777216@10.0.0.1,remote=10.0.0.2",
            "x@10.0.0.1,remote=10.0.0.2",
            "42@10.0.0.1:0,remote=10.0.0.2",
            "42@10.0.0.1,remote=10.0.0.2:0",
            "42@10.0.0.1,remote=239.1.1.1",
            "42@10.0.0.1,remote=0.0.0.0",
            "42@10.0.0.1,remote=10.0.0.1",
            "42@10.0.0.1,remote=10.0.0.2,remote=10.0.0.2:4789",
            "42@10.0.0.1,peer=10.0.0.2",
            "42@239.0.0.1,remote=10.0.0.2",
            &format!("42@10.0.0.1{too_many}"),
        ] {
            assert!(bad.parse::<VxlanAddr>().is_err(), "'{bad}' accepted");
        }
    }

    /// A VTEP on a socket of 127.0.0.1 with these remotes.
    fn vtep(vni: u32, remotes: Vec<SocketAddrV4>) -> Vxlan {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let local = v4(&s);
        Vxlan::with_socket(VxlanAddr { vni, local, remotes }, s).unwrap()
    }

    #[test]
    fn frames_are_replicated_to_every_remote_then_unicast_once_learned() {
        let (r1, r2) = (udp(), udp());
        let v = vtep(7, vec![v4(&r1), v4(&r2)]);
        let (bcast, to_x) = ([&[0xff; 6][..], &[2, 0, 0, 0, 0, 1], &[0x88, 0xb5], &[1; 46]].concat(), [&[2, 0, 0, 0, 0, 0xa][..], &[0x22; 54]].concat());
        let x: Mac = [2, 0, 0, 0, 0, 0xa];
        assert_eq!(v.destination(&[0xff; 6]), Dest::All);
        assert_eq!(v.destination(&x), Dest::All, "unknown unicast floods");
        let q = vec![(Dest::All, bcast.clone()), (v.destination(&x), to_x.clone())];
        assert_eq!(v.send(&q).0, 2);
        for r in [&r1, &r2] {
            for f in [&bcast, &to_x] {
                let mut buf = [0u8; 256];
                let (n, from) = r.recv_from(&mut buf).unwrap();
                assert_eq!(from, std::net::SocketAddr::V4(v.local), "sent from the VTEP's own socket");
                assert_eq!(decode(&buf[..n], 7), Ok(&f[..]), "header, then the frame whole");
            }
        }
        // x is behind r2: learned from r2's frame, then sent to r2 alone.
        v.learn(&x, v4(&r2));
        assert_eq!(v.destination(&x), Dest::To(v4(&r2)));
        let (frames, datagrams, err) = v.send(&[(v.destination(&x), to_x.clone())]);
        assert!((frames, datagrams, err.is_none()) == (1, 1, true), "one frame, one datagram");
        let mut buf = [0u8; 256];
        let n = r2.recv(&mut buf).unwrap();
        assert_eq!(&buf[VXLAN_HLEN..n], &to_x[..]);
        r1.set_nonblocking(true).unwrap();
        assert!(r1.recv(&mut buf).is_err(), "r1 got nothing");
        // A MAC moves when it shows up behind another VTEP; group MACs are never learned.
        v.learn(&x, v4(&r1));
        assert_eq!(v.destination(&x), Dest::To(v4(&r1)));
        v.learn(&[0xff; 6], v4(&r1));
        v.learn(&[0x33, 0x33, 0, 0, 0, 1], v4(&r1));
        assert_eq!(v.learned(), 1);
    }

    #[test]
    fn only_remote_vteps_with_a_good_header_are_heard_and_strangers_teach_nothing() {
        let remote = udp();
        let stranger = UdpSocket::bind("127.0.0.2:0").unwrap();
        let v = vtep(7, vec![v4(&remote)]);
        let frame = [&[2, 0, 0, 0, 0, 9][..], &[2, 0, 0, 0, 0, 0xa], &[0x08, 0x06], &[0; 46]].concat();
        let good = [&header(7)[..], &frame].concat();
        remote.send_to(&good, v.local).unwrap();
        assert_eq!(recv_one(&v), (v4(&remote), Ok(Some(frame.clone()))));
        // Another source port of the remote's address is the remote (Linux picks a port
        // per flow); a stranger is not, whatever it sends.
        let other_port = UdpSocket::bind("127.0.0.1:0").unwrap();
        other_port.send_to(&good, v.local).unwrap();
        assert_eq!(recv_one(&v).1, Ok(Some(frame.clone())));
        let stranger_addr = v4(&stranger);
        stranger.send_to(&good, v.local).unwrap();
        assert_eq!(recv_one(&v), (stranger_addr, Err(Dropped::Foreign)));
        let x: Mac = [2, 0, 0, 0, 0, 0xa];
        v.learn(&x, stranger_addr);
        assert_eq!((v.learned(), v.destination(&x)), (0, Dest::All), "a stranger's frame teaches nothing");
        for (bad, why) in [
            ([&header(8)[..], &frame].concat(), Dropped::Vxlan(VxlanError::Vni { got: 8, want: 7 })),
            ([&[0x0c, 0, 0, 0, 0, 0, 7, 0][..], &frame].concat(), Dropped::Vxlan(VxlanError::Flags(0x0c))),
            ([&[0x08, 0, 1, 0, 0, 0, 7, 0][..], &frame].concat(), Dropped::Vxlan(VxlanError::Reserved)),
            (vec![0x08, 0, 0], Dropped::Vxlan(VxlanError::Short(3))),
        ] {
            remote.send_to(&bad, v.local).unwrap();
            assert_eq!(recv_one(&v).1, Err(why));
        }
    }

    #[test]
    fn remotes_sharing_an_address_are_told_apart_by_port() {
        let (a, b) = (udp(), udp());
        let v = vtep(1, vec![v4(&a), v4(&b)]);
        assert_eq!(v.remote_of(&v4(&a)), Some(0));
        assert_eq!(v.remote_of(&v4(&b)), Some(1));
        assert_eq!(v.remote_of(&SocketAddrV4::new(Ipv4Addr::LOCALHOST, 1)), None, "which of the two? neither");
        let x: Mac = [2, 0, 0, 0, 0, 0xa];
        v.learn(&x, v4(&b));
        assert_eq!(v.destination(&x), Dest::To(v4(&b)));
    }

    #[test]
    fn learning_is_bounded() {
        let (a, b) = (udp(), udp());
        let v = vtep(1, vec![v4(&a), v4(&b)]);
        let mac = |i: usize| -> Mac { [2, 0, 0, (i >> 16) as u8, (i >> 8) as u8, i as u8] };
        for i in 0..2 * MAX_LEARNED {
            v.learn(&mac(i), v4(&a));
        }
        assert_eq!(v.learned(), MAX_LEARNED);
        assert_eq!(v.destination(&mac(MAX_LEARNED)), Dest::All, "beyond the bound: flooded, not learned");
        v.learn(&mac(0), v4(&b));
        assert_eq!((v.learned(), v.destination(&mac(0))), (MAX_LEARNED, Dest::To(v4(&b))), "a known MAC still moves at the bound");
    }
}
