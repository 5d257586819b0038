//! The device's WQE log: a bounded ring of records of recent work requests, each one's
//! stages as the engine reached them in host time (nanoseconds since the doorbell that
//! covered it, or since its fetch when the doorbell time is unknown) and the PCIe path
//! its payload took at each end. `rnic-emu trace` prints them beside the modelled
//! timeline ([`super::model`]) of the same request. (The node's MMIO/DMA trace is
//! another thing: [`crate::observe::iotrace`].)
//!
//! The requester logs its WQEs (doorbell, WQE fetched, SGL parsed, first and last
//! request handed to the transport, ACK, CQE written); the responder logs where and
//! when it placed the last byte of each WRITE/SEND, and where it read the data of each
//! RDMA READ it answers (`remote_read`, the READ's source path). On one engine
//! (loopback) the two are joined into one record; across the fabric each node holds its
//! own side. The verbs engine owns its RNIC's log; the RNIC answers the control requests
//! and clears it with the counters on reset.
//! Recording is off until asked for (`rnic-emu trace --record on`, control request
//! `trace on`): it costs one clock read per stage and a short lock and a small allocation
//! per finished WQE, about half the engine's rate of 64-byte WRITEs. The ring
//! holds [`CAPACITY`] records, the oldest dropped first. Host time here is the
//! emulator's, not hardware time.

use crate::platform::mem::access::PciePath;
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Records kept.
pub const CAPACITY: usize = 256;

/// The stages a record can hold, in pipeline order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Doorbell,
    WqeData,
    SglParsed,
    Packetized,
    OnWire,
    RemoteRead,
    Placed,
    Ack,
    Cqe,
}

/// The stages' names (the modelled timeline's keys where they correspond).
pub const STAGE_NAMES: [&str; 9] = ["doorbell", "wqe_data", "sgl_parsed", "packetized", "on_wire", "remote_read", "placed", "ack", "cqe"];

const UNSET: u64 = u64::MAX;

/// A WQE being logged (kept with the WQE while it is in flight): a clock read and a
/// store per stage, nothing allocated until it finishes.
#[derive(Clone, Debug)]
pub struct Pending {
    /// Recording (the device's WQE log is on); off, stamps cost nothing.
    pub on: bool,
    t0: Instant,
    at: [u64; STAGE_NAMES.len()],
    /// Payload paths on this node (a READ's destination is local, its source remote).
    pub src: Option<PciePath>,
    pub dst: Option<PciePath>,
}

impl Pending {
    /// Starts a record at `t0` (the doorbell), recording when `on`.
    pub fn start(t0: Instant, on: bool) -> Pending {
        let mut at = [UNSET; STAGE_NAMES.len()];
        at[Stage::Doorbell as usize] = 0;
        Pending { on, t0, at, src: None, dst: None }
    }

    /// Stamps `stage` now (only its first time: retransmissions do not move it).
    pub fn stamp(&mut self, stage: Stage) {
        if self.on && self.at[stage as usize] == UNSET {
            self.at[stage as usize] = self.since(Instant::now());
        }
    }

    fn since(&self, when: Instant) -> u64 {
        u64::try_from(when.saturating_duration_since(self.t0).as_nanos()).unwrap_or(UNSET - 1)
    }

    /// (name, ns) of the stamped stages in time order.
    fn stages(&self) -> Vec<(&'static str, u64)> {
        let mut v: Vec<(&'static str, u64)> = STAGE_NAMES.iter().zip(self.at).filter(|s| s.1 != UNSET).map(|(n, t)| (*n, t)).collect();
        v.sort_by_key(|s| s.1);
        v
    }
}

/// One finished record.
#[derive(Clone, Debug, Serialize)]
pub struct Record {
    pub seq: u64,
    /// "requester" or "responder".
    pub role: &'static str,
    pub qpn: u32,
    pub wr_id: u64,
    pub op: &'static str,
    pub len: u64,
    /// "loopback" or "fabric".
    pub transport: &'static str,
    /// PCIe path of the payload at the source and at the destination (None: not on
    /// this node, or no payload).
    pub src: Option<&'static str>,
    pub dst: Option<&'static str>,
    /// WC status of the completion (0: success).
    pub status: u8,
    /// (stage, measured host-time ns since the doorbell), in order.
    pub stages: Vec<(&'static str, u64)>,
}

/// What a responder did with a message's payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// Placed the last byte of a WRITE/SEND (the destination's path).
    Placed,
    /// Read the data of an RDMA READ it answers (the source's path).
    Sourced,
}

/// The ring, and the responder stages waiting for their loopback requester.
pub struct WqeLog {
    enabled: AtomicBool,
    ring: Mutex<VecDeque<Record>>,
    seq: AtomicU64,
    responder: Mutex<HashMap<(u32, Side), (PciePath, Instant)>>,
}

impl Default for WqeLog {
    /// Off: nothing is recorded until `trace on`.
    fn default() -> Self {
        WqeLog { enabled: AtomicBool::new(false), ring: Mutex::default(), seq: AtomicU64::new(0), responder: Mutex::default() }
    }
}

impl WqeLog {
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    fn push(&self, mut r: Record) {
        r.seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        if ring.len() == CAPACITY {
            ring.pop_front();
        }
        ring.push_back(r);
    }

    /// The responder QP `qpn` placed the last byte of a message on `path`, or read a
    /// READ's data from it (`side`) (fabric: a responder record; loopback: kept for the
    /// requester to join).
    pub fn responder(&self, qpn: u32, op: &'static str, len: u64, path: Option<PciePath>, fabric: bool, side: Side) {
        if !self.enabled() {
            return;
        }
        let now = Instant::now();
        if !fabric {
            if let Some(p) = path {
                self.responder.lock().unwrap_or_else(|p| p.into_inner()).insert((qpn, side), (p, now));
            }
            return;
        }
        let (src, dst, stage) = match side {
            Side::Placed => (None, path.map(PciePath::name), "placed"),
            Side::Sourced => (path.map(PciePath::name), None, "remote_read"),
        };
        let r = Record { seq: 0, role: "responder", qpn, wr_id: 0, op, len, transport: "fabric", src, dst, status: 0, stages: vec![(stage, 0)] };
        self.push(r);
    }

    /// A requester WQE completed: its record joins the loopback placement at `dest_qpn`.
    #[allow(clippy::too_many_arguments)]
    pub fn finish(&self, mut p: Pending, qpn: u32, wr_id: u64, op: &'static str, len: u64, dest_qpn: Option<u32>, status: u8) {
        if !p.on {
            return;
        }
        let (mut src, mut dst) = (p.src.map(PciePath::name), p.dst.map(PciePath::name));
        if let Some(d) = dest_qpn {
            let mut joined = self.responder.lock().unwrap_or_else(|p| p.into_inner());
            if dst.is_none() {
                if let Some((path, when)) = joined.remove(&(d, Side::Placed)) {
                    dst = Some(path.name());
                    p.at[Stage::Placed as usize] = p.since(when);
                }
            }
            if src.is_none() {
                if let Some((path, when)) = joined.remove(&(d, Side::Sourced)) {
                    src = Some(path.name());
                    p.at[Stage::RemoteRead as usize] = p.since(when);
                }
            }
        }
        p.stamp(Stage::Cqe);
        let transport = if dest_qpn.is_some() { "loopback" } else { "fabric" };
        let r = Record { seq: 0, role: "requester", qpn, wr_id, op, len, transport, src, dst, status, stages: p.stages() };
        self.push(r);
    }

    /// Records after `since` (a sequence number), for QP `qpn` if given, oldest first.
    pub fn since(&self, since: u64, qpn: Option<u32>) -> Vec<Record> {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        ring.iter().filter(|r| r.seq > since && qpn.is_none_or(|q| r.qpn == q)).cloned().collect()
    }

    pub fn clear(&self) {
        self.ring.lock().unwrap_or_else(|p| p.into_inner()).clear();
        self.responder.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// The `trace [qp=Q] [since=N]` control request: the records as JSON; `trace on` and
    /// `trace off` start and stop recording.
    pub fn control(&self, args: &str) -> Result<String, String> {
        if let Some(on) = match args.trim() {
            "on" => Some(true),
            "off" => Some(false),
            _ => None,
        } {
            self.enabled.store(on, Ordering::Relaxed);
            return Ok(format!("trace {}", if on { "on" } else { "off" }));
        }
        let (mut qp, mut since) = (None, 0);
        for kv in args.split_whitespace() {
            match kv.split_once('=') {
                Some(("qp", v)) => qp = Some(v.parse::<u32>().map_err(|_| format!("bad qp '{v}'"))?),
                Some(("since", v)) => since = v.parse::<u64>().map_err(|_| format!("bad since '{v}'"))?,
                _ => return Err(format!("expected 'trace [qp=N] [since=N]', got '{kv}'")),
            }
        }
        serde_json::to_string(&self.since(since, qp)).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::topology::P2pPath;

    #[test]
    fn the_ring_is_bounded_and_joins_loopback_placements() {
        let t = WqeLog::default();
        assert!(!t.enabled(), "off until asked for");
        assert_eq!(t.control("on").unwrap(), "trace on");
        for i in 0..(CAPACITY as u64 + 10) {
            let mut p = Pending::start(Instant::now(), true);
            p.stamp(Stage::WqeData);
            t.finish(p, 1, i, "write", 8, None, 0);
        }
        let all = t.since(0, None);
        assert_eq!(all.len(), CAPACITY);
        assert_eq!(all[0].wr_id, 10, "the oldest went first");
        let last = all.last().unwrap().seq;
        let mut p = Pending::start(Instant::now(), true);
        p.src = Some(PciePath::P2p(P2pPath::Switch));
        p.stamp(Stage::Packetized);
        t.responder(7, "write", 4096, Some(PciePath::P2p(P2pPath::Switch)), false, Side::Placed);
        p.stamp(Stage::Ack);
        t.finish(p, 2, 99, "write", 4096, Some(7), 0);
        let r = t.since(last, Some(2));
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].src, r[0].dst, r[0].transport), (Some("p2p-switch"), Some("p2p-switch"), "loopback"));
        let keys: Vec<&str> = r[0].stages.iter().map(|s| s.0).collect();
        assert_eq!(keys, ["doorbell", "packetized", "placed", "ack", "cqe"]);
        assert!(r[0].stages.windows(2).all(|w| w[0].1 <= w[1].1));
        assert!(t.control("qp=x").is_err() && t.control("since=3").unwrap().starts_with('['));
        // A loopback READ: the responder's source path joins the requester's record.
        let mut p = Pending::start(Instant::now(), true);
        p.dst = Some(PciePath::Host);
        t.responder(7, "read", 4096, Some(PciePath::P2p(P2pPath::RootComplex)), false, Side::Sourced);
        t.finish(p, 2, 100, "read", 4096, Some(7), 0);
        let r = t.since(r[0].seq, Some(2));
        assert_eq!((r[0].src, r[0].dst), (Some("p2p-root-complex"), Some("host")));
        assert!(r[0].stages.iter().any(|s| s.0 == "remote_read"), "{:?}", r[0].stages);
        // Across the fabric: a responder record naming the source.
        t.responder(9, "read", 64, Some(PciePath::Host), true, Side::Sourced);
        let r = t.since(r[0].seq, Some(9));
        assert_eq!((r[0].role, r[0].src, r[0].dst, r[0].stages[0].0), ("responder", Some("host"), None, "remote_read"));
        assert_eq!(t.control("off").unwrap(), "trace off");
        let last = t.since(0, None).last().unwrap().seq;
        let p = Pending::start(Instant::now(), t.enabled());
        t.finish(p, 2, 101, "write", 1, None, 0);
        assert!(t.since(last, None).is_empty(), "off: nothing recorded");
        t.control("on").unwrap();
    }
}
