//! The MMIO/DMA trace of a node (`rnic-emu trace --mmio --dma`, docs/trace.md): every
//! register access a client made through the vfio-user socket (configuration space and
//! BARs, with the register's name from the contract in [`crate::regs`]) and every DMA the
//! RNIC made through its router (address, length, direction, PCIe path, and what it was:
//! WQE fetch, payload, CQE write, command table read), in one bounded ring per node.
//!
//! What it does not see: stores the guest makes into memory the client maps (the doorbell
//! page, BAR2, and the GPU's BAR1 when QEMU mmaps them), MSI-X table accesses QEMU
//! emulates itself, and the GPU engine's copies inside its own BAR1 (not PCIe traffic).
//!
//! Recording is off until asked for (control request `iotrace on`); off, a recording
//! site costs one relaxed atomic load. On, each event takes a short lock and, for named
//! registers outside the contract's tables, a small allocation. The ring holds
//! [`CAPACITY`] events; when full the oldest goes and the overflow count grows. Sequence
//! numbers are per node and never reused, so a reader that falls behind can tell how many
//! events it lost. Times are host nanoseconds since recording was turned on.

use crate::contract::counters::COUNTERS;
use crate::contract::render::snake_lower;
use crate::platform::mem::access::{DmaTag, PciePath};
use crate::platform::mem::router::DmaObserver;
use crate::platform::pci::caps::{CAP_ID_MSIX, CAP_ID_PCIE, CAP_ID_PM, EXT_CAP_ID_AER, EXT_CAP_ID_VSEC};
use crate::platform::pci::config::{ConfigSpace, CONFIG_SPACE_SIZE};
use crate::regs::pci_ids::{MSIX_PBA_OFFSET, MSIX_TABLE_OFFSET, RNIC_DB_BAR};
use crate::regs::rnic::{dbpage, MAX_CQ, MAX_QP, STATS_BASE};
use crate::regs::{gpu, rnic, RegDef};
use serde::Serialize;
use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Events kept per node.
pub const CAPACITY: usize = 16384;
/// Events one `iotrace since=N` reply carries at most (a reader asks again for more).
pub const MAX_REPLY: usize = 2048;

/// Which function model an access concerns (the `--function` filter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FunctionKind {
    Rnic,
    Gpu,
}

/// One traced access.
#[derive(Clone, Debug, Serialize)]
pub struct Event {
    pub seq: u64,
    /// Host nanoseconds since recording was turned on.
    pub ns: u64,
    /// "mmio" or "dma".
    pub kind: &'static str,
    /// The function ("node0-rnic0").
    #[serde(serialize_with = "as_str")]
    pub function: Arc<str>,
    pub dev: FunctionKind,
    /// "read" or "write".
    pub dir: &'static str,
    /// MMIO: the BAR (None: configuration space).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bar: Option<u8>,
    /// MMIO: the offset in the BAR or configuration space.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// MMIO: the access width in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub width: Option<u32>,
    /// MMIO: the value read or written (accesses of at most 8 bytes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<u64>,
    /// MMIO: the register's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reg: Option<Cow<'static, str>>,
    /// DMA: bus address and length.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub addr: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub len: Option<u64>,
    /// DMA: the PCIe path ("host", "p2p-switch", "p2p-root-complex"); None: refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<&'static str>,
    /// DMA: what it was for ("wqe_fetch", "rq_wqe_fetch", "payload", "cqe", "command",
    /// "qp_ctx", "other").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub what: Option<&'static str>,
    /// The QP, CQ or MR the access concerns, where known (MMIO: from the doorbell value
    /// or the doorbell page offset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qp: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cq: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mr: Option<u32>,
    /// DMA: the router refused it (unmapped address, aperture).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub error: bool,
}

fn as_str<S: serde::Serializer>(s: &Arc<str>, ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_str(s)
}

impl Event {
    fn new(kind: &'static str, function: &Arc<str>, dev: FunctionKind, write: bool) -> Event {
        Event {
            seq: 0,
            ns: 0,
            kind,
            function: function.clone(),
            dev,
            dir: if write { "write" } else { "read" },
            bar: None,
            offset: None,
            width: None,
            value: None,
            reg: None,
            addr: None,
            len: None,
            path: None,
            what: None,
            qp: None,
            cq: None,
            mr: None,
            error: false,
        }
    }
}

struct Ring {
    events: VecDeque<Event>,
    next_seq: u64,
    overflow: u64,
    t0: Instant,
}

/// A node's trace: shared by the vfio-user adapter of every function and the RNICs' DMA
/// routers.
pub struct IoTrace {
    enabled: AtomicBool,
    ring: Mutex<Ring>,
}

impl Default for IoTrace {
    fn default() -> Self {
        let ring = Ring { events: VecDeque::new(), next_seq: 1, overflow: 0, t0: Instant::now() };
        IoTrace { enabled: AtomicBool::new(false), ring: Mutex::new(ring) }
    }
}

/// The reply to `iotrace since=N`.
#[derive(Debug, Serialize)]
pub struct Batch {
    pub on: bool,
    pub capacity: usize,
    /// Events dropped from the full ring since the trace was cleared.
    pub overflow: u64,
    /// The oldest sequence number still in the ring (the next one when empty).
    pub first: u64,
    pub events: Vec<Event>,
}

impl IoTrace {
    /// Whether recording is on: the one check every recording site makes first.
    #[inline]
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ring> {
        self.ring.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn set(&self, on: bool) {
        let mut ring = self.lock();
        if on && !self.enabled() {
            ring.t0 = Instant::now();
        }
        self.enabled.store(on, Ordering::Relaxed);
    }

    pub fn clear(&self) {
        let mut ring = self.lock();
        ring.events.clear();
        ring.overflow = 0;
    }

    fn push(&self, mut e: Event) {
        let mut ring = self.lock();
        e.seq = ring.next_seq;
        ring.next_seq += 1;
        e.ns = u64::try_from(ring.t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        if ring.events.len() == CAPACITY {
            ring.events.pop_front();
            ring.overflow += 1;
        }
        ring.events.push_back(e);
    }

    /// A client's access to configuration space (`bar` None; `config` names the
    /// capability it falls in) or a BAR of `function`.
    #[allow(clippy::too_many_arguments)]
    pub fn mmio(&self, function: &Arc<str>, dev: FunctionKind, bar: Option<usize>, offset: u64, data: &[u8], write: bool, config: Option<&ConfigSpace>) {
        if !self.enabled() {
            return;
        }
        let mut e = Event::new("mmio", function, dev, write);
        e.bar = bar.and_then(|b| u8::try_from(b).ok());
        e.offset = Some(offset);
        e.width = u32::try_from(data.len()).ok();
        let value = (data.len() <= 8).then(|| {
            let mut v = [0u8; 8];
            v[..data.len()].copy_from_slice(data);
            u64::from_le_bytes(v)
        });
        e.value = value;
        let capability = config.filter(|_| bar.is_none() && offset >= 0x40).and_then(|cs| capability_name(cs, offset));
        e.reg = Some(capability.map_or_else(|| register_name(dev, bar, offset), Cow::Owned));
        if let (FunctionKind::Rnic, Some(0), Some(v)) = (dev, bar, value) {
            match offset {
                rnic::WQE_DB_IDX | rnic::RQ_DB_IDX => e.qp = Some((v >> rnic::DB_OBJECT_SHIFT) as u32),
                rnic::CQE_CONS_IDX | rnic::CQ_ARM => e.cq = Some((v >> rnic::DB_OBJECT_SHIFT) as u32),
                _ => {}
            }
        }
        if (dev, bar) == (FunctionKind::Rnic, Some(RNIC_DB_BAR)) {
            let page = offset / dbpage::PAGE;
            if page < MAX_QP {
                e.qp = u32::try_from(page).ok();
            } else {
                e.cq = u32::try_from(page - MAX_QP).ok();
            }
        }
        self.push(e);
    }

    /// A DMA by `function`: `path` is where it went (None: refused).
    pub fn dma(&self, function: &Arc<str>, addr: u64, len: usize, write: bool, path: Option<PciePath>, tag: DmaTag) {
        if !self.enabled() {
            return;
        }
        let mut e = Event::new("dma", function, FunctionKind::Rnic, write);
        e.addr = Some(addr);
        e.len = Some(len as u64);
        e.path = path.map(PciePath::name);
        e.error = path.is_none();
        e.what = Some(tag.what.name());
        (e.qp, e.cq, e.mr) = (tag.qp, tag.cq, tag.mr);
        self.push(e);
    }

    /// Events after `since`, at most `max`, oldest first.
    pub fn since(&self, since: u64, max: usize) -> Batch {
        let ring = self.lock();
        let first = ring.events.front().map_or(ring.next_seq, |e| e.seq);
        let skip = since.saturating_add(1).saturating_sub(first).min(ring.events.len() as u64) as usize;
        let events = ring.events.iter().skip(skip).take(max).cloned().collect();
        Batch { on: self.enabled(), capacity: CAPACITY, overflow: ring.overflow, first, events }
    }

    /// The `iotrace ...` control request: `on`, `off`, `clear`, or `[since=N] [max=N]`
    /// (a [`Batch`] as JSON).
    pub fn control(&self, args: &str) -> Result<String, String> {
        match args.trim() {
            "on" | "off" => {
                self.set(args.trim() == "on");
                return Ok(format!("iotrace {}", args.trim()));
            }
            "clear" => {
                self.clear();
                return Ok("iotrace cleared".into());
            }
            _ => {}
        }
        let (mut since, mut max) = (0u64, MAX_REPLY);
        for kv in args.split_whitespace() {
            match kv.split_once('=') {
                Some(("since", v)) => since = v.parse().map_err(|_| format!("bad since '{v}'"))?,
                Some(("max", v)) => max = v.parse::<usize>().map_err(|_| format!("bad max '{v}'"))?.min(MAX_REPLY),
                _ => return Err(format!("expected 'iotrace on|off|clear' or 'iotrace [since=N] [max=N]', got '{kv}'")),
            }
        }
        serde_json::to_string(&self.since(since, max)).map_err(|e| e.to_string())
    }
}

/// The RNICs' DMA routers report their accesses here ([`IoTrace::dma`]).
impl DmaObserver for IoTrace {
    #[inline]
    fn enabled(&self) -> bool {
        IoTrace::enabled(self)
    }

    fn dma(&self, function: &Arc<str>, addr: u64, len: usize, write: bool, path: Option<PciePath>, tag: DmaTag) {
        IoTrace::dma(self, function, addr, len, write, path, tag);
    }
}

/// The name of the register at `offset` in a table, with "+N" inside a wide register.
fn table_name(regs: &'static [RegDef], offset: u64) -> Option<Cow<'static, str>> {
    let r = regs.iter().find(|r| offset >= r.offset && offset < r.offset + u64::from(r.width))?;
    Some(if offset == r.offset { Cow::Borrowed(r.name) } else { Cow::Owned(format!("{}+{}", r.name, offset - r.offset)) })
}

/// The capability of `cs` that holds `offset` (at or above 0x40), as "MSIX+0x2": the
/// standard one starting closest below it, or the extended one whose range holds it.
pub fn capability_name(cs: &ConfigSpace, offset: u64) -> Option<String> {
    let size = CONFIG_SPACE_SIZE as u64;
    if offset >= 0x100 {
        let mut at = 0x100u64;
        for _ in 0..64 {
            if at < 0x100 || at + 4 > size {
                break;
            }
            let header = cs.get32(at as usize);
            let (id, next) = ((header & 0xffff) as u16, u64::from(header >> 20) & 0xffc);
            // The last capability ends where its structure does (AER: 0x48 bytes; a VSEC
            // gives its length in bits 31:20 of its VSEC header, the dword at +4).
            let end = match (next > at, id) {
                (true, _) => next,
                (false, EXT_CAP_ID_AER) => at + 0x48,
                (false, EXT_CAP_ID_VSEC) if at + 8 <= size => at + u64::from(cs.get32(at as usize + 4) >> 20),
                (false, _) => size,
            };
            if id != 0 && offset >= at && offset < end {
                let name = match id {
                    EXT_CAP_ID_AER => "AER".to_string(),
                    EXT_CAP_ID_VSEC => "VSEC".to_string(),
                    _ => format!("EXTCAP{id:#x}"),
                };
                return Some(format!("{name}+{:#x}", offset - at));
            }
            if next == 0 {
                break;
            }
            at = next;
        }
        return None;
    }
    let mut at = u64::from(cs.get16(0x34) as u8) & 0xfc;
    let mut best: Option<(u64, u8)> = None;
    for _ in 0..48 {
        if !(0x40..0xff).contains(&at) {
            break;
        }
        let word = cs.get16(at as usize);
        let (id, next) = (word as u8, u64::from(word >> 8) & 0xfc);
        if offset >= at && best.is_none_or(|(b, _)| at > b) {
            best = Some((at, id));
        }
        if next == 0 {
            break;
        }
        at = next;
    }
    let (at, id) = best?;
    let name = match id {
        CAP_ID_PM => "PM".to_string(),
        0x05 => "MSI".to_string(),
        CAP_ID_PCIE => "PCIE".to_string(),
        CAP_ID_MSIX => "MSIX".to_string(),
        other => format!("CAP{other:#x}"),
    };
    Some(format!("{name}+{:#x}", offset - at))
}

/// Standard configuration header fields (type 0).
const CONFIG_HEADER: &[(u64, u64, &str)] = &[
    (0x00, 2, "VENDOR_ID"),
    (0x02, 2, "DEVICE_ID"),
    (0x04, 2, "COMMAND"),
    (0x06, 2, "STATUS"),
    (0x08, 4, "CLASS_REVISION"),
    (0x0c, 4, "HEADER_TYPE"),
    (0x10, 4, "BAR0"),
    (0x14, 4, "BAR1"),
    (0x18, 4, "BAR2"),
    (0x1c, 4, "BAR3"),
    (0x20, 4, "BAR4"),
    (0x24, 4, "BAR5"),
    (0x28, 4, "CARDBUS_CIS"),
    (0x2c, 4, "SUBSYSTEM"),
    (0x30, 4, "ROM_BAR"),
    (0x34, 4, "CAP_PTR"),
    (0x38, 4, "RESERVED"),
    (0x3c, 4, "INTERRUPT"),
];

/// The name of what lies at `offset` of configuration space (`bar` None) or a BAR.
pub fn register_name(dev: FunctionKind, bar: Option<usize>, offset: u64) -> Cow<'static, str> {
    let named = match (dev, bar) {
        (_, None) => CONFIG_HEADER
            .iter()
            .find(|(at, w, _)| offset >= *at && offset < at + w)
            .map(|(at, _, n)| if offset == *at { Cow::Borrowed(*n) } else { Cow::Owned(format!("{n}+{}", offset - at)) })
            .or_else(|| Some(Cow::Owned(if offset < 0x100 { format!("CAP+{offset:#x}") } else { format!("EXTCAP+{offset:#x}") }))),
        (_, Some(0)) if offset >= MSIX_PBA_OFFSET => Some(Cow::Borrowed("MSIX_PBA")),
        (_, Some(0)) if offset >= MSIX_TABLE_OFFSET => Some(Cow::Borrowed("MSIX_TABLE")),
        (FunctionKind::Rnic, Some(0)) if offset >= STATS_BASE => {
            let i = ((offset - STATS_BASE) / 8) as usize;
            COUNTERS.get(i).map(|(n, _)| Cow::Owned(format!("STATS.{}", snake_lower(n))))
        }
        (FunctionKind::Rnic, Some(0)) => table_name(rnic::REGS, offset),
        (FunctionKind::Rnic, Some(RNIC_DB_BAR)) => {
            let (page, at) = (offset / dbpage::PAGE, offset % dbpage::PAGE);
            if page < MAX_QP {
                let field = match at {
                    dbpage::SQ_PI => "SQ_PI",
                    dbpage::RQ_PI => "RQ_PI",
                    dbpage::SQ_EVENT => "SQ_EVENT",
                    dbpage::RQ_EVENT => "RQ_EVENT",
                    _ => "?",
                };
                Some(Cow::Owned(format!("DBPAGE.QP{page}.{field}")))
            } else {
                let field = if at == dbpage::CQ_CI { "CQ_CI" } else { "?" };
                (page - MAX_QP < MAX_CQ).then(|| Cow::Owned(format!("DBPAGE.CQ{}.{field}", page - MAX_QP)))
            }
        }
        (FunctionKind::Gpu, Some(0)) => table_name(gpu::REGS, offset),
        (FunctionKind::Gpu, Some(1)) => Some(Cow::Borrowed("BAR1")),
        _ => None,
    };
    named.unwrap_or_else(|| Cow::Owned(format!("BAR{}+{offset:#x}", bar.unwrap_or(0))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::mem::access::DmaKind;

    #[test]
    fn names_come_from_the_contract() {
        let r = FunctionKind::Rnic;
        assert_eq!(register_name(r, Some(0), rnic::WQE_DB_IDX), "WQE_DB_IDX");
        assert_eq!(register_name(r, Some(0), rnic::QP_CTX_BASE + 4), "QP_CTX_BASE+4");
        assert_eq!(register_name(r, Some(0), STATS_BASE + 16), "STATS.cqes");
        assert_eq!(register_name(r, Some(0), MSIX_TABLE_OFFSET + 16), "MSIX_TABLE");
        assert_eq!(register_name(r, Some(2), 3 * dbpage::PAGE + dbpage::RQ_PI), "DBPAGE.QP3.RQ_PI");
        assert_eq!(register_name(r, Some(2), dbpage::CQ_PAGES + dbpage::PAGE), "DBPAGE.CQ1.CQ_CI");
        assert_eq!(register_name(r, None, 0x04), "COMMAND");
        assert_eq!(register_name(r, None, 0x12), "BAR0+2");
        assert_eq!(register_name(r, None, 0x104), "EXTCAP+0x104");
        assert_eq!(register_name(FunctionKind::Gpu, Some(0), gpu::GPU_ENG_LAUNCH), "GPU_ENG_LAUNCH");
        assert_eq!(register_name(r, Some(0), 0x0fff), "BAR0+0xfff", "a hole in the map");
    }

    #[test]
    fn the_ring_is_bounded_counts_its_overflow_and_costs_nothing_when_off() {
        let t = IoTrace::default();
        let f: Arc<str> = Arc::from("n-rnic0");
        t.mmio(&f, FunctionKind::Rnic, Some(0), rnic::WQE_DB_IDX, &(3u32 << 16 | 5).to_le_bytes(), true, None);
        assert!(t.since(0, MAX_REPLY).events.is_empty(), "off: nothing recorded");
        assert_eq!(t.control("on").unwrap(), "iotrace on");
        t.mmio(&f, FunctionKind::Rnic, Some(0), rnic::WQE_DB_IDX, &(3u32 << 16 | 5).to_le_bytes(), true, None);
        t.dma(&f, 0x1000, 64, false, Some(PciePath::Host), DmaTag { what: DmaKind::WqeFetch, qp: Some(3), cq: None, mr: None });
        t.dma(&f, 0x9000, 8, true, None, DmaTag::default());
        let b = t.since(0, MAX_REPLY);
        assert_eq!(b.events.len(), 3);
        let db = &b.events[0];
        assert_eq!((db.reg.as_deref(), db.qp, db.value, db.width), (Some("WQE_DB_IDX"), Some(3), Some(3 << 16 | 5), Some(4)));
        assert_eq!((b.events[1].what, b.events[1].path, b.events[1].qp), (Some("wqe_fetch"), Some("host"), Some(3)));
        assert!(b.events[2].error && b.events[2].path.is_none());
        let json: serde_json::Value = serde_json::from_str(&t.control("since=1 max=1").unwrap()).unwrap();
        assert_eq!(json["events"].as_array().unwrap().len(), 1);
        assert_eq!(json["events"][0]["seq"], 2);
        for i in 0..CAPACITY as u64 + 5 {
            t.dma(&f, i, 1, true, Some(PciePath::Host), DmaTag::default());
        }
        let b = t.since(0, MAX_REPLY);
        assert_eq!(b.overflow, 8, "three earlier events and five more went");
        assert_eq!(b.first, 9);
        assert_eq!(b.events[0].seq, 9, "a reader that was at 0 lost 8 events");
        assert_eq!(t.since(b.first + CAPACITY as u64 - 1, MAX_REPLY).events.len(), 0, "nothing newer");
        assert!(t.control("since=x").is_err() && t.control("bogus").is_err());
        t.control("off").unwrap();
        t.dma(&f, 0, 1, true, Some(PciePath::Host), DmaTag::default());
        assert_eq!(t.since(0, 1).first, 9, "off again: nothing more");
        t.control("clear").unwrap();
        assert_eq!(t.since(0, 1).events.len(), 0);
    }
}
