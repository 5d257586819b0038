//! The RNIC's Ethernet port (contract minor 7, `CAP_ETH`; docs/programming.md "The
//! Ethernet port"): the netdev's frames, beside the RoCE traffic of the verbs engine, on
//! the same link. One transmit and one receive ring of 16-byte `rnic_eth_desc`
//! ([`EthDesc`]) in guest memory, free-running 16-bit indices, one MSI-X vector with a
//! one-shot arm (`ETH_ARM`).
//!
//! Two halves:
//!
//! - [`EthShared`]: atomics the socket-side register model (`Rnic`), the event loop and
//!   the server's fabric port all see: the MAC filter, the MTU, promiscuous mode, the link,
//!   which rings run and the device's consumer indices (`ETH_TXQ_CI`, `ETH_RXQ_CI`).
//! - [`EthPort`]: the rings themselves, owned by the engine's runner on the event loop
//!   (`crate::rnic::verbs::runner`): transmit ([`EthPort::transmit`], a bounded budget per
//!   pass, each frame handed to [`Wire::send_frame`]) and receive ([`EthPort::receive`],
//!   one frame the fabric port accepted).
//!
//! Every index, length and address from the guest is checked before it is used; a bad
//! descriptor ends in `DESC_ERR` and a counter, a bad register value in a guest error, a
//! descriptor ring the device cannot read or write stops that ring. Nothing panics on
//! guest input.
//!
//! Minor 9 (`CAP_ETH_OFFLOAD`): a transmitted frame may span up to TX_MAX_DESCS
//! descriptors (TX_MORE on all but the last), and its first descriptor may ask for a
//! checksum (TX_CSUM) or TCP segmentation (TX_TSO), done by [`crate::rnic::eth_offload`];
//! a malformed chain or request is dropped whole (DESC_ERR on each of its descriptors,
//! ETH_TX_ERRORS once) and the ring goes on. With `ETH_CTRL_RX_CSUM` the receive side
//! checks TCP/UDP checksums and marks good frames DESC_CSUM_OK.
//!
//! Not modelled: VLAN tags, receive segmentation or hashing, multicast filters (every
//! multicast and broadcast frame is received), several queues, interrupt moderation, the
//! FCS (frames carry none). MAC filtering and the checks of malformed frames belong to
//! the port's receive path ([`crate::rnic::fabric::frame::sort`], which the server's
//! fabric port runs on every frame), before [`EthPort::receive`].

use crate::contract::abi::EthDesc;
use crate::contract::counters::{Counter, Stats};
use crate::platform::mem::access::{DmaTag, GuestMem};
use crate::platform::msix::Interrupts;
use crate::regs::rnic::eth::{
    CTRL_PROMISC, CTRL_RX_CSUM, CTRL_RX_EN, CTRL_TX_EN, DESC_CSUM_OK, DESC_DONE, DESC_ERR, HEADER_LEN, MAX_MTU, MAX_RING_LOG2, MIN_FRAME, MIN_MTU,
    MIN_RING_LOG2, TX_CSUM, TX_MAX_DESCS, TX_MORE, TX_TSO,
};
use crate::rnic::eth_offload::{insert_csum, rx_csum_ok, Tso, TSO_MAX_FRAME};
use crate::rnic::verbs::transport::Wire;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use vm_memory::ByteValued;

/// Descriptors the transmit ring completes per pass before other work gets its turn.
pub const TX_BUDGET: usize = 64;
/// `ETH_MTU` at reset.
pub const DEFAULT_MTU: u32 = 1500;
/// Size of one descriptor (`rnic_eth_desc`).
pub const DESC_SIZE: u64 = 16;
/// Offset of `len` in a descriptor.
const LEN_OFFSET: u64 = 8;
/// Offset of `flags` in a descriptor.
const FLAGS_OFFSET: u64 = 10;

/// A MAC address as `ETH_PERM_MAC`/`ETH_MAC` hold it: byte 0 (first on the wire) in
/// bits [7:0], byte 5 in [47:40].
pub fn mac_to_reg(mac: [u8; 6]) -> u64 {
    let mut b = [0u8; 8];
    b[..6].copy_from_slice(&mac);
    u64::from_le_bytes(b)
}

/// The MAC address in a register value (bits above 47 ignored).
pub fn mac_from_reg(v: u64) -> [u8; 6] {
    let b = v.to_le_bytes();
    [b[0], b[1], b[2], b[3], b[4], b[5]]
}

/// The permanent MAC of an RNIC: `02:e1:a:b:c:d` from its fabric address a.b.c.d (the
/// address the guest driver used so far), else `06:e1:` and four bytes of a stable hash
/// (FNV-1a) of the function's name. Both are locally administered unicast addresses and
/// the two families never collide.
pub fn perm_mac(address: Option<Ipv4Addr>, name: &str) -> [u8; 6] {
    if let Some(ip) = address {
        let [a, b, c, d] = ip.octets();
        return [0x02, 0xe1, a, b, c, d];
    }
    let mut h: u32 = 0x811c_9dc5;
    for byte in name.bytes() {
        h ^= u32::from(byte);
        h = h.wrapping_mul(0x0100_0193);
    }
    let [a, b, c, d] = h.to_be_bytes();
    [0x06, 0xe1, a, b, c, d]
}

/// The port's state that the register model, the event loop and the fabric port share.
pub struct EthShared {
    perm_mac: AtomicU64,
    mac: AtomicU64,
    mtu: AtomicU32,
    promisc: AtomicBool,
    rx_csum: AtomicBool,
    link: AtomicBool,
    tx_running: AtomicBool,
    rx_running: AtomicBool,
    tx_ci: AtomicU32,
    rx_ci: AtomicU32,
    /// The port's addresses (CMD_SET_GID).
    pub gids: super::gid::GidTable,
}

impl Default for EthShared {
    fn default() -> Self {
        EthShared {
            perm_mac: AtomicU64::new(0),
            mac: AtomicU64::new(0),
            mtu: AtomicU32::new(DEFAULT_MTU),
            promisc: AtomicBool::new(false),
            rx_csum: AtomicBool::new(false),
            link: AtomicBool::new(false),
            tx_running: AtomicBool::new(false),
            rx_running: AtomicBool::new(false),
            tx_ci: AtomicU32::new(0),
            rx_ci: AtomicU32::new(0),
            gids: Default::default(),
        }
    }
}

impl EthShared {
    /// The port's current MAC (`ETH_MAC`): the unicast receive filter and the source of
    /// the frames the device builds.
    pub fn mac(&self) -> [u8; 6] {
        mac_from_reg(self.mac.load(Ordering::SeqCst))
    }

    /// The permanent MAC (`ETH_PERM_MAC`).
    pub fn perm_mac(&self) -> [u8; 6] {
        mac_from_reg(self.perm_mac.load(Ordering::SeqCst))
    }

    /// The MTU in bytes of an L3 packet (`ETH_MTU`): frames carry at most MTU + 14 bytes.
    pub fn mtu(&self) -> u32 {
        self.mtu.load(Ordering::SeqCst)
    }

    /// The longest frame either ring takes: MTU + the Ethernet header.
    pub fn max_frame(&self) -> usize {
        self.mtu() as usize + HEADER_LEN as usize
    }

    /// Promiscuous mode (`ETH_CTRL_PROMISC`): unicast frames for any MAC are received.
    pub fn promisc(&self) -> bool {
        self.promisc.load(Ordering::SeqCst)
    }

    /// Whether the receive ring runs (enabled and accepted); frames for the netdev are
    /// worth handing to [`EthPort::receive`] only then.
    pub fn rx_enabled(&self) -> bool {
        self.rx_running.load(Ordering::SeqCst)
    }

    /// Whether the transmit ring runs.
    pub fn tx_enabled(&self) -> bool {
        self.tx_running.load(Ordering::SeqCst)
    }

    /// The link (`ETH_LINK_UP`): set by whoever attaches the node to a segment (the
    /// server's fabric port); a device reset leaves it as it is.
    pub fn set_link(&self, up: bool) {
        self.link.store(up, Ordering::SeqCst);
    }

    pub fn link_up(&self) -> bool {
        self.link.load(Ordering::SeqCst)
    }

    /// The device's transmit consumer index (`ETH_TXQ_CI`): descriptors before it are done.
    pub fn tx_ci(&self) -> u16 {
        self.tx_ci.load(Ordering::SeqCst) as u16
    }

    /// The device's receive index (`ETH_RXQ_CI`): descriptors before it hold frames.
    pub fn rx_ci(&self) -> u16 {
        self.rx_ci.load(Ordering::SeqCst) as u16
    }

    /// Receive checksum check (`ETH_CTRL_RX_CSUM`, minor 9).
    pub fn rx_csum(&self) -> bool {
        self.rx_csum.load(Ordering::SeqCst)
    }

    /// Register side: the RX_CSUM bit of an `ETH_CTRL` write.
    pub fn set_rx_csum(&self, on: bool) {
        self.rx_csum.store(on, Ordering::SeqCst);
    }

    /// `ETH_CTRL` as it reads: the rings that run, the promiscuous and RX_CSUM bits.
    pub fn ctrl(&self) -> u64 {
        let mut v = 0;
        if self.rx_enabled() {
            v |= CTRL_RX_EN;
        }
        if self.tx_enabled() {
            v |= CTRL_TX_EN;
        }
        if self.promisc() {
            v |= CTRL_PROMISC;
        }
        if self.rx_csum() {
            v |= CTRL_RX_CSUM;
        }
        v
    }

    /// Register side: a new `ETH_MAC`.
    pub fn set_mac(&self, mac: [u8; 6]) {
        self.mac.store(mac_to_reg(mac), Ordering::SeqCst);
    }

    /// Register side: an `ETH_MTU` already checked against MIN_MTU..=MAX_MTU. False (and
    /// nothing changes) for a value outside.
    pub fn set_mtu(&self, mtu: u32) -> bool {
        if !(MIN_MTU..=MAX_MTU).contains(&u64::from(mtu)) {
            return false;
        }
        self.mtu.store(mtu, Ordering::SeqCst);
        true
    }

    /// Register side: the promiscuous bit of an `ETH_CTRL` write.
    pub fn set_promisc(&self, on: bool) {
        self.promisc.store(on, Ordering::SeqCst);
    }

    /// Device reset, register side: MAC back to `perm`, MTU 1500, not promiscuous, no GIDs.
    pub fn reset_config(&self, perm: [u8; 6]) {
        self.perm_mac.store(mac_to_reg(perm), Ordering::SeqCst);
        self.set_mac(perm);
        self.mtu.store(DEFAULT_MTU, Ordering::SeqCst);
        self.set_promisc(false);
        self.set_rx_csum(false);
        self.gids.clear();
    }
}

/// What software wrote into a ring's `ETH_*Q_BASE` and `ETH_*Q_LOG` registers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingCfg {
    pub base: u64,
    pub log2: u64,
}

/// A running descriptor ring.
#[derive(Clone, Copy, Debug)]
struct Ring {
    base: u64,
    log2: u32,
    /// The driver's producer index (last doorbell).
    pi: u16,
    /// The device's consumer index.
    ci: u16,
}

impl Ring {
    /// The ring `cfg` names, starting at index 0; Err: why it is refused.
    fn start(cfg: RingCfg) -> Result<Ring, String> {
        if !(MIN_RING_LOG2..=MAX_RING_LOG2).contains(&cfg.log2) {
            return Err(format!("log2 {} outside {MIN_RING_LOG2}..={MAX_RING_LOG2}", cfg.log2));
        }
        if !cfg.base.is_multiple_of(DESC_SIZE) {
            return Err(format!("base {:#x} not {DESC_SIZE}-byte aligned", cfg.base));
        }
        if cfg.base.checked_add(DESC_SIZE << cfg.log2).is_none() {
            return Err(format!("base {:#x} wraps the address space", cfg.base));
        }
        Ok(Ring { base: cfg.base, log2: cfg.log2 as u32, pi: 0, ci: 0 })
    }

    fn size(&self) -> u32 {
        1 << self.log2
    }

    /// Descriptors posted and not yet done.
    fn pending(&self) -> u32 {
        u32::from(self.pi.wrapping_sub(self.ci))
    }

    /// Bus address of the descriptor of free-running index `idx` (inside the ring,
    /// checked at start).
    fn slot(&self, idx: u16) -> u64 {
        let entry = u64::from(u32::from(idx) & (self.size() - 1));
        self.base + entry * DESC_SIZE
    }

    /// A doorbell: accepted when it posts at most a ring's worth of descriptors.
    fn post(&mut self, pi: u16) -> bool {
        if u32::from(pi.wrapping_sub(self.ci)) > self.size() {
            return false;
        }
        self.pi = pi;
        true
    }
}

/// Why a descriptor of a ring could not be read or written back: the ring stops.
struct RingFault;

/// The rings of the Ethernet port (event-loop side).
pub struct EthPort {
    name: String,
    shared: Arc<EthShared>,
    irqs: Arc<Interrupts>,
    stats: Arc<Stats>,
    tx: Option<Ring>,
    rx: Option<Ring>,
    /// DMA_CTRL ENABLE: with it clear nothing moves.
    enabled: bool,
    /// DMA_CTRL INT_ENABLE.
    int_enabled: bool,
    /// Armed with this vector: the next completed descriptor raises it.
    armed: Option<u16>,
    /// The frame being sent (at most MAX_MTU + 14 bytes, or TSO_MAX_FRAME for TX_TSO).
    buf: Vec<u8>,
    /// The descriptors of that frame (at most TX_MAX_DESCS).
    chain: Vec<EthDesc>,
    /// The TSO segment being built (at most MAX_MTU + 14 bytes).
    seg: Vec<u8>,
}

impl EthPort {
    /// A port with both rings off, DMA enabled, interrupts disabled (the device's reset
    /// state).
    pub fn new(name: String, shared: Arc<EthShared>, irqs: Arc<Interrupts>, stats: Arc<Stats>) -> EthPort {
        EthPort {
            name,
            shared,
            irqs,
            stats,
            tx: None,
            rx: None,
            enabled: true,
            int_enabled: false,
            armed: None,
            buf: Vec::new(),
            chain: Vec::new(),
            seg: Vec::new(),
        }
    }

    pub fn shared(&self) -> &Arc<EthShared> {
        &self.shared
    }

    /// Device reset (register, FLR, vfio-user): both rings stop, indices are zero, the arm
    /// is forgotten; DMA_CTRL back to its reset value (ENABLE, no interrupts).
    pub fn reset(&mut self) {
        (self.tx, self.rx, self.armed) = (None, None, None);
        (self.enabled, self.int_enabled) = (true, false);
        for (running, ci) in [(&self.shared.tx_running, &self.shared.tx_ci), (&self.shared.rx_running, &self.shared.rx_ci)] {
            running.store(false, Ordering::SeqCst);
            ci.store(0, Ordering::SeqCst);
        }
    }

    /// A DMA_CTRL write: ENABLE clear stops all Ethernet DMA (descriptors wait, received
    /// frames are dropped); INT_ENABLE gates the vector.
    pub fn set_dma_ctrl(&mut self, enabled: bool, int_enabled: bool) {
        (self.enabled, self.int_enabled) = (enabled, int_enabled);
    }

    /// An `ETH_CTRL` write: an enable bit that is set starts its ring (if it does not run
    /// yet) at index 0 from `tx`/`rx`; a clear one stops it. A refused ring (base not
    /// 16-byte aligned, log2 outside MIN..=MAX_RING_LOG2, a ring past the end of the
    /// address space) stays off and counts a guest error.
    pub fn ctrl(&mut self, ctrl: u64, tx: RingCfg, rx: RingCfg) {
        let shared = self.shared.clone();
        self.tx = self.apply(ctrl & CTRL_TX_EN != 0, self.tx, tx, "transmit", &shared.tx_ci);
        self.rx = self.apply(ctrl & CTRL_RX_EN != 0, self.rx, rx, "receive", &shared.rx_ci);
        self.shared.tx_running.store(self.tx.is_some(), Ordering::SeqCst);
        self.shared.rx_running.store(self.rx.is_some(), Ordering::SeqCst);
    }

    /// One ring's enable bit; `ci` is the index the ring publishes.
    fn apply(&mut self, on: bool, ring: Option<Ring>, cfg: RingCfg, what: &str, ci: &AtomicU32) -> Option<Ring> {
        if !on {
            return None;
        }
        if ring.is_some() {
            return ring;
        }
        match Ring::start(cfg) {
            Ok(r) => {
                ci.store(0, Ordering::SeqCst);
                Some(r)
            }
            Err(why) => {
                self.stats.inc(Counter::GuestErrors);
                crate::guest_warn!("{}: Ethernet {what} ring refused: {why}; it stays off", self.name);
                None
            }
        }
    }

    /// `ETH_TXQ_PI`. Ignored while the ring is off; a value more than a ring's worth
    /// ahead of the device's index is refused (guest error, the old one stays).
    pub fn tx_doorbell(&mut self, pi: u16) {
        let ok = self.tx.as_mut().is_none_or(|r| r.post(pi));
        self.doorbell_checked(ok, "ETH_TXQ_PI", pi);
    }

    /// `ETH_RXQ_PI`, as [`EthPort::tx_doorbell`].
    pub fn rx_doorbell(&mut self, pi: u16) {
        let ok = self.rx.as_mut().is_none_or(|r| r.post(pi));
        self.doorbell_checked(ok, "ETH_RXQ_PI", pi);
    }

    fn doorbell_checked(&self, ok: bool, reg: &str, pi: u16) {
        if !ok {
            self.stats.inc(Counter::GuestErrors);
            crate::guest_warn!("{}: {reg} = {pi} posts more than the ring holds: ignored", self.name);
        }
    }

    /// `ETH_ARM = rx_ci << 16 | tx_ci`: raise `vector` once, at once if a device index
    /// differs from the driver's (completions it has not seen), else at the next
    /// completed descriptor. With INT_ENABLE clear nothing is raised: an arm over unseen
    /// completions disarms, a completion leaves the port armed.
    pub fn arm(&mut self, tx_ci: u16, rx_ci: u16, vector: u16) {
        self.armed = Some(vector);
        if self.shared.tx_ci() != tx_ci || self.shared.rx_ci() != rx_ci {
            if self.int_enabled {
                self.raise();
            } else {
                self.armed = None;
            }
        }
    }

    /// A descriptor was completed: the armed vector fires.
    fn raise(&mut self) {
        if !self.int_enabled {
            return;
        }
        if let Some(v) = self.armed.take() {
            if self.irqs.trigger(usize::from(v)) {
                self.stats.inc(Counter::Interrupts);
            }
        }
    }

    /// Whether the transmit ring holds descriptors the device has not done.
    pub fn tx_pending(&self) -> bool {
        self.enabled && self.tx.is_some_and(|r| r.pending() > 0)
    }

    /// Sends up to `budget` descriptors' worth of frames of the transmit ring through
    /// `wire`. With no wire, or the link down, every frame is refused (DESC_ERR,
    /// ETH_TX_ERRORS): the ring keeps moving as on a NIC whose carrier is off. A frame whose
    /// last descriptor (no TX_MORE) is not posted yet waits for the next doorbell. True
    /// when a descriptor was completed.
    pub fn transmit(&mut self, mem: &dyn GuestMem, wire: Option<&dyn Wire>, budget: usize) -> bool {
        if !self.enabled {
            return false;
        }
        let mut done = 0;
        while done < budget {
            let Some(ring) = self.tx.filter(|r| r.pending() > 0) else { break };
            mem.tag(DmaTag::default());
            let n = match self.read_chain(mem, &ring) {
                Ok(Some(n)) => n,
                Ok(None) => break,
                Err(at) => {
                    self.stop_tx(at);
                    break;
                }
            };
            let flags = if self.send_chain(mem, wire) { DESC_DONE } else { DESC_DONE | DESC_ERR };
            let mut fault = None;
            for k in 0..n {
                let at = ring.slot(ring.ci.wrapping_add(k));
                if mem.write(at + FLAGS_OFFSET, &[flags]).is_err() {
                    fault = Some(at);
                    break;
                }
            }
            if let Some(at) = fault {
                self.stop_tx(at);
                break;
            }
            let ci = ring.ci.wrapping_add(n);
            if let Some(r) = self.tx.as_mut() {
                r.ci = ci;
            }
            self.shared.tx_ci.store(u32::from(ci), Ordering::SeqCst);
            done += usize::from(n);
        }
        if done > 0 {
            self.raise();
        }
        done > 0
    }

    /// Reads the descriptors of the frame at the ring's consumer index into `self.chain`:
    /// up to the first without TX_MORE, at most TX_MAX_DESCS (or the ring's size). Ok(None):
    /// the frame's last descriptor is not posted yet. Err: a descriptor that cannot be read.
    fn read_chain(&mut self, mem: &dyn GuestMem, ring: &Ring) -> Result<Option<u16>, u64> {
        let limit = (TX_MAX_DESCS as u32).min(ring.size());
        self.chain.clear();
        for k in 0..ring.pending().min(limit) {
            let at = ring.slot(ring.ci.wrapping_add(k as u16));
            let d = read_desc(mem, at).map_err(|_| at)?;
            self.chain.push(d);
            if d.flags & TX_MORE == 0 || k + 1 == limit {
                return Ok(Some(self.chain.len() as u16));
            }
        }
        Ok(None)
    }

    /// Refuses the frame of `self.chain`: counted in ETH_TX_ERRORS, a rate-limited warning.
    fn refuse(&self, why: std::fmt::Arguments) -> bool {
        self.stats.inc(Counter::EthTxErrors);
        crate::guest_warn!("{}: Ethernet frame refused: {why}", self.name);
        false
    }

    /// The frame of `self.chain` (its first descriptor's request bits and offload fields),
    /// gathered, offloads applied and sent; true when it went to the wire. Minor 7 frames
    /// (one descriptor, flags 0) go out byte for byte as they are.
    fn send_chain(&mut self, mem: &dyn GuestMem, wire: Option<&dyn Wire>) -> bool {
        let (Some(first), Some(last)) = (self.chain.first().copied(), self.chain.last()) else { return false };
        if last.flags & TX_MORE != 0 {
            return self.refuse(format_args!("more than {} descriptors (TX_MAX_DESCS or the ring's size)", self.chain.len()));
        }
        let (csum, tso) = (first.flags & TX_CSUM != 0, first.flags & TX_TSO != 0);
        if tso && !csum {
            return self.refuse(format_args!("TX_TSO without TX_CSUM"));
        }
        let len: usize = self.chain.iter().map(|d| usize::from(d.len)).sum();
        let max = if tso { TSO_MAX_FRAME } else { self.shared.max_frame() };
        if len < MIN_FRAME as usize || len > max {
            return self.refuse(format_args!("{len} bytes in {} descriptors (MIN_FRAME..={max})", self.chain.len()));
        }
        let Some(wire) = wire.filter(|_| self.shared.link_up()) else {
            self.stats.inc(Counter::EthTxErrors);
            log::debug!("{}: Ethernet frame dropped: link down", self.name);
            return false;
        };
        self.buf.resize(len, 0);
        let mut at = 0;
        for d in &self.chain {
            let piece = usize::from(d.len);
            let readable = d.addr.checked_add(piece as u64).is_some() && mem.read(d.addr, &mut self.buf[at..at + piece]).is_ok();
            if !readable {
                self.stats.inc(Counter::DmaErrors);
                return self.refuse(format_args!("piece at {:#x} (+{piece}) is not mapped guest memory", d.addr));
            }
            at += piece;
        }
        let (start, offset) = (usize::from(first.csum_start), usize::from(first.csum_offset));
        if tso {
            let t = match Tso::parse(&self.buf, start, offset, usize::from(first.mss), self.shared.max_frame()) {
                Ok(t) => t,
                Err(why) => return self.refuse(format_args!("{why}")),
            };
            let (stats, mut seg) = (&self.stats, std::mem::take(&mut self.seg));
            t.segment(&self.buf, &mut seg, |s| {
                wire.send_frame(s);
                stats.inc(Counter::EthTxFrames);
                stats.inc(Counter::EthTsoSegments);
                stats.add(Counter::EthTxBytes, s.len() as u64);
            });
            self.seg = seg;
            self.stats.inc(Counter::EthTsoFrames);
            return true;
        }
        if csum {
            if let Err(why) = insert_csum(&mut self.buf, start, offset) {
                return self.refuse(format_args!("{why}"));
            }
            self.stats.inc(Counter::EthTxCsum);
        }
        wire.send_frame(&self.buf);
        self.stats.inc(Counter::EthTxFrames);
        self.stats.add(Counter::EthTxBytes, len as u64);
        true
    }

    fn stop_tx(&mut self, at: u64) {
        self.tx = None;
        self.shared.tx_running.store(false, Ordering::SeqCst);
        self.ring_fault("transmit", at);
    }

    fn stop_rx(&mut self, at: u64) {
        self.rx = None;
        self.shared.rx_running.store(false, Ordering::SeqCst);
        self.ring_fault("receive", at);
    }

    fn ring_fault(&self, what: &str, at: u64) {
        self.stats.inc(Counter::DmaErrors);
        crate::guest_warn!("{}: Ethernet {what} descriptor at {at:#x} is not mapped guest memory: ring stopped", self.name);
    }

    /// A frame for the netdev (the fabric port has filtered it): placed in the next posted
    /// buffer, its length written, then DONE. Dropped and counted with the receive ring
    /// off, DMA disabled or no buffer posted (ETH_RX_NO_BUFFER), or a length outside
    /// MIN_FRAME..=MTU + 14 (ETH_RX_ERRORS). A buffer smaller than the frame, or one that
    /// is not mapped memory, is handed back empty: `len` 0, DONE | DESC_ERR. True when the
    /// frame was placed.
    pub fn receive(&mut self, mem: &dyn GuestMem, frame: &[u8]) -> bool {
        if frame.len() < MIN_FRAME as usize || frame.len() > self.shared.max_frame() {
            self.stats.inc(Counter::EthRxErrors);
            return false;
        }
        let Some(ring) = self.rx.filter(|r| self.enabled && r.pending() > 0) else {
            self.stats.inc(Counter::EthRxNoBuffer);
            return false;
        };
        let at = ring.slot(ring.ci);
        mem.tag(DmaTag::default());
        let placed = read_desc(mem, at).and_then(|d| {
            let placed = self.place(mem, &d, frame);
            let len = if placed { frame.len() as u16 } else { 0 };
            let mut flags = if placed { DESC_DONE } else { DESC_DONE | DESC_ERR };
            if placed && self.shared.rx_csum() && rx_csum_ok(frame) {
                flags |= DESC_CSUM_OK;
            }
            mem.write(at + LEN_OFFSET, &len.to_le_bytes()).and_then(|_| mem.write(at + FLAGS_OFFSET, &[flags])).map_err(|_| RingFault)?;
            Ok(placed)
        });
        let Ok(placed) = placed else {
            self.stats.inc(Counter::EthRxNoBuffer);
            self.stop_rx(at);
            return false;
        };
        let ci = ring.ci.wrapping_add(1);
        if let Some(r) = self.rx.as_mut() {
            r.ci = ci;
        }
        self.shared.rx_ci.store(u32::from(ci), Ordering::SeqCst);
        if placed {
            self.stats.inc(Counter::EthRxFrames);
            self.stats.add(Counter::EthRxBytes, frame.len() as u64);
        }
        self.raise();
        placed
    }

    /// Copies `frame` into the buffer `d` names; false (counted as ETH_RX_NO_BUFFER, and
    /// DMA_ERRORS for memory that is not mapped) when it does not fit or cannot be written.
    fn place(&self, mem: &dyn GuestMem, d: &EthDesc, frame: &[u8]) -> bool {
        if usize::from(d.len) < frame.len() {
            self.stats.inc(Counter::EthRxNoBuffer);
            return false;
        }
        let ok = d.addr.checked_add(frame.len() as u64).is_some() && mem.write(d.addr, frame).is_ok();
        if !ok {
            self.stats.inc(Counter::DmaErrors);
            self.stats.inc(Counter::EthRxNoBuffer);
            crate::guest_warn!("{}: Ethernet receive buffer at {:#x} is not mapped guest memory", self.name, d.addr);
        }
        ok
    }
}

/// Copies a descriptor out of the ring once.
fn read_desc(mem: &dyn GuestMem, at: u64) -> Result<EthDesc, RingFault> {
    let mut d = EthDesc::default();
    mem.read(at, d.as_mut_slice()).map_err(|_| RingFault)?;
    Ok(d)
}
