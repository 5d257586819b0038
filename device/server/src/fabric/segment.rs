//! The L2 segment a node's port is plugged into (docs/fabric.md "The segment" and
//! "Backends: multicast, VXLAN, TAP"): where it is ([`SegmentAddr`], what `--segment`
//! parses) and the port's attachment to it ([`Segment`]), over one of three backends:
//!
//! - [`super::multicast`] (`GROUP:PORT[@IF]`, the default): frames, one per UDP datagram,
//!   on an IPv4 multicast group of a host interface, QEMU's `-netdev dgram` framing;
//! - [`super::vxlan`] (`vxlan:VNI@LOCAL[:PORT],remote=IP[:PORT],...`): frames in VXLAN
//!   (RFC 7348) to configured remote VTEPs, so that nodes on other hosts, or Linux's own
//!   `vxlan` device, share the segment;
//! - [`super::tap`] (`tap:NAME`): a Linux TAP device, a frame per read and write, so that
//!   the host's bridge, vxlan and qdiscs (`tc netem`) are part of the fabric.
//!
//! The port ([`super::port`]) sees one interface whatever the backend: the descriptors to
//! wait on ([`Segment::fds`]), a batch receive ([`Segment::recv`]), the frame a received
//! datagram carries ([`Segment::decap`]: the VXLAN header checked and stripped, the
//! port's own frames and datagrams from strangers dropped), where a frame goes
//! ([`Segment::destination`]), what to learn from a received one ([`Segment::learn`]), and
//! a batch send ([`Segment::send`]: the VXLAN header prepended without a copy, a frame for
//! every member replicated). What the segment drops and moves is counted here
//! ([`SegmentStats`], the `<node>-segment` entry of `rnic-emu stats`); the port counts the
//! drops in `ETH_RX_ERRORS` too.

use super::batch::RecvBatch;
use super::multicast::Multicast;
pub use super::multicast::{reserve, MulticastAddr, DEFAULT_GROUP};
use super::tap::Tap;
use super::vxlan::{Vxlan, VxlanAddr, VxlanError};
use rnic_emu_core::rnic::fabric::frame::Mac;
use std::io;
use std::net::SocketAddrV4;
use std::os::fd::RawFd;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use thiserror::Error;

/// MACs a port remembers at most (multicast: other servers' sockets; VXLAN: remote
/// VTEPs); beyond it, frames to new MACs go to every member.
pub const MAX_LEARNED: usize = 1024;

/// Where a segment is: what `serve --segment` and `run --segment` take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SegmentAddr {
    /// `GROUP:PORT[@INTERFACE]`.
    Multicast(MulticastAddr),
    /// `vxlan:VNI@LOCAL[:PORT],remote=IP[:PORT],...`.
    Vxlan(VxlanAddr),
    /// `tap:NAME`: the TAP device NAME (created when it does not exist).
    Tap(String),
}

impl SegmentAddr {
    /// True for a segment only one port can be on at a time (a VXLAN socket, a TAP
    /// device): one node of a run, not all of them.
    pub fn is_exclusive(&self) -> bool {
        !matches!(self, SegmentAddr::Multicast(_))
    }
}

impl std::fmt::Display for SegmentAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SegmentAddr::Multicast(m) => write!(f, "{m}"),
            SegmentAddr::Vxlan(v) => write!(f, "{v}"),
            SegmentAddr::Tap(name) => write!(f, "tap:{name}"),
        }
    }
}

impl FromStr for SegmentAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(rest) = s.strip_prefix("vxlan:") {
            return rest.parse().map(SegmentAddr::Vxlan);
        }
        if let Some(name) = s.strip_prefix("tap:") {
            return super::tap::check_name(name).map(|()| SegmentAddr::Tap(name.to_string()));
        }
        s.parse().map(SegmentAddr::Multicast)
    }
}

impl From<MulticastAddr> for SegmentAddr {
    fn from(m: MulticastAddr) -> Self {
        SegmentAddr::Multicast(m)
    }
}

/// Where a queued frame goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    /// One member: a server learned on the multicast segment, a learned remote VTEP.
    To(SocketAddrV4),
    /// Every member: the multicast group, every remote VTEP (head-end replication), the
    /// TAP device.
    All,
}

impl std::fmt::Display for Dest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dest::To(a) => write!(f, "{a}"),
            Dest::All => write!(f, "every member"),
        }
    }
}

/// Why a received datagram carried no frame for the port.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum Dropped {
    /// Not from a remote VTEP of the segment.
    #[error("not from a remote VTEP of the segment")]
    Foreign,
    #[error("{0}")]
    Vxlan(#[from] VxlanError),
}

/// What the segment took in and sent out, and what it dropped (every value counts up).
#[derive(Debug, Default)]
pub struct SegmentStats {
    /// Datagrams (TAP: frames) received from the segment, own and dropped ones included.
    pub rx_datagrams: AtomicU64,
    /// Received from an address that is no remote VTEP of the segment.
    pub rx_foreign: AtomicU64,
    /// A VXLAN header that is short, has flags or reserved bits other than the I flag
    /// set, or another VNI.
    pub rx_bad_header: AtomicU64,
    /// Datagrams (TAP: frames) handed to the kernel; a frame to every remote VTEP counts
    /// once per VTEP.
    pub tx_datagrams: AtomicU64,
    /// Frames sent to every member (group MACs, MACs not learned).
    pub tx_flooded: AtomicU64,
}

enum Backend {
    Multicast(Multicast),
    Vxlan(Vxlan),
    Tap(Tap),
}

/// A port's attachment to its segment.
pub struct Segment {
    addr: SegmentAddr,
    backend: Backend,
    pub stats: SegmentStats,
}

fn count(c: &AtomicU64, n: usize) {
    c.fetch_add(n as u64, Ordering::Relaxed);
}

impl Segment {
    /// Joins the segment at `addr` (binds its sockets, opens its device).
    pub fn join(addr: &SegmentAddr) -> io::Result<Segment> {
        let backend = match addr {
            SegmentAddr::Multicast(m) => Backend::Multicast(Multicast::join(*m)?),
            SegmentAddr::Vxlan(v) => Backend::Vxlan(Vxlan::join(v.clone())?),
            SegmentAddr::Tap(name) => Backend::Tap(Tap::open(name)?),
        };
        Ok(Segment { addr: addr.clone(), backend, stats: SegmentStats::default() })
    }

    /// Where the segment is.
    pub fn addr(&self) -> &SegmentAddr {
        &self.addr
    }

    /// The descriptors to wait on (readable: frames to receive).
    pub fn fds(&self) -> &[RawFd] {
        match &self.backend {
            Backend::Multicast(m) => m.fds(),
            Backend::Vxlan(v) => v.fds(),
            Backend::Tap(t) => t.fds(),
        }
    }

    /// Receives what `fd` (one of [`Segment::fds`]) holds now, without waiting, into
    /// `batch`; returns how many datagrams (or frames).
    pub fn recv(&self, batch: &mut RecvBatch, fd: RawFd) -> io::Result<usize> {
        let n = match &self.backend {
            Backend::Multicast(m) => m.recv(batch, fd),
            Backend::Vxlan(v) => v.recv(batch, fd),
            Backend::Tap(t) => t.recv(batch, fd),
        }?;
        count(&self.stats.rx_datagrams, n);
        Ok(n)
    }

    /// The frame a datagram received from `from` carries (a slice of it); None for a
    /// frame this port sent itself; an error (counted here) for a datagram to drop.
    pub fn decap<'a>(&self, from: SocketAddrV4, datagram: &'a [u8]) -> Result<Option<&'a [u8]>, Dropped> {
        let r = match &self.backend {
            Backend::Multicast(m) => m.decap(from, datagram),
            Backend::Vxlan(v) => v.decap(from, datagram),
            Backend::Tap(_) => Ok(Some(datagram)),
        };
        match &r {
            Err(Dropped::Foreign) => count(&self.stats.rx_foreign, 1),
            Err(Dropped::Vxlan(_)) => count(&self.stats.rx_bad_header, 1),
            Ok(_) => {}
        }
        r
    }

    /// Where a frame to `dst` goes.
    pub fn destination(&self, dst: &Mac) -> Dest {
        match &self.backend {
            Backend::Multicast(m) => m.destination(dst),
            Backend::Vxlan(v) => v.destination(dst),
            Backend::Tap(_) => Dest::All,
        }
    }

    /// Notes that frames from `src` came from `from` (called for well-formed frames only).
    pub fn learn(&self, src: &Mac, from: SocketAddrV4) {
        match &self.backend {
            Backend::Multicast(m) => m.learn(src, from),
            Backend::Vxlan(v) => v.learn(src, from),
            Backend::Tap(_) => {}
        }
    }

    /// MACs learned so far.
    pub fn learned(&self) -> usize {
        match &self.backend {
            Backend::Multicast(m) => m.learned(),
            Backend::Vxlan(v) => v.learned(),
            Backend::Tap(_) => 0,
        }
    }

    /// Sends the queued frames (as few system calls as it takes); returns how many of
    /// them left whole (every datagram of a replicated one), with the error that stopped
    /// the rest.
    pub fn send(&self, queue: &[(Dest, Vec<u8>)]) -> (usize, Option<io::Error>) {
        let (frames, datagrams, err) = match &self.backend {
            Backend::Multicast(m) => {
                let (n, e) = m.send(queue);
                (n, n, e)
            }
            Backend::Vxlan(v) => v.send(queue),
            Backend::Tap(t) => {
                let (n, e) = t.send(queue);
                (n, n, e)
            }
        };
        count(&self.stats.tx_datagrams, datagrams);
        count(&self.stats.tx_flooded, queue[..frames].iter().filter(|(d, _)| *d == Dest::All).count());
        (frames, err)
    }

    /// The counters as (name, value), for the statistics.
    pub fn counters(&self) -> [(&'static str, u64); 6] {
        let s = &self.stats;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        [
            ("rx_datagrams", get(&s.rx_datagrams)),
            ("rx_foreign", get(&s.rx_foreign)),
            ("rx_bad_header", get(&s.rx_bad_header)),
            ("tx_datagrams", get(&s.tx_datagrams)),
            ("tx_flooded", get(&s.tx_flooded)),
            ("learned", self.learned() as u64),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn parses_every_backend_and_prints_what_it_parses() {
        for s in ["239.1.2.3:5000@127.0.0.1", "vxlan:42@10.1.0.1:4789,remote=10.1.0.2:4789,remote=10.1.0.3:5000", "tap:rnic0"] {
            let a: SegmentAddr = s.parse().unwrap();
            assert_eq!(a.to_string(), s);
            assert_eq!(a.to_string().parse::<SegmentAddr>(), Ok(a));
        }
        let m: SegmentAddr = "239.1.2.3:5000".parse().unwrap();
        assert_eq!(m, SegmentAddr::Multicast(MulticastAddr { group: Ipv4Addr::new(239, 1, 2, 3), port: 5000, interface: Ipv4Addr::LOCALHOST }));
        assert!(!m.is_exclusive());
        let v: SegmentAddr = "vxlan:7@10.1.0.1,remote=10.1.0.2".parse().unwrap();
        assert_eq!(v.to_string(), "vxlan:7@10.1.0.1:4789,remote=10.1.0.2:4789", "the standard port by default");
        assert!(v.is_exclusive() && "tap:t0".parse::<SegmentAddr>().unwrap().is_exclusive());
        for bad in ["tap:", "tap:a/b", "tap:sixteen-bytes-xx", "vxlan:", "10.0.0.1:5000"] {
            assert!(bad.parse::<SegmentAddr>().is_err(), "{bad}");
        }
    }
}
