//! Tests of the Ethernet port (`eth.rs`): the rings driven through the engine runner's
//! events against a memfd standing in for guest RAM, with a wire that records the frames
//! it is handed; and the `ETH_*` registers of the RNIC model. The harness plays the
//! driver of docs/programming.md "The Ethernet port".

use super::eth::{mac_to_reg, perm_mac, TX_BUDGET};
use crate::contract::abi::EthDesc;
use crate::contract::counters::{Counter, Stats};
use crate::function::PciFunction;
use crate::platform::mem::dma::{test_ram, DmaMaps};
use crate::platform::msix::Interrupts;
use crate::platform::shm::SharedMemory;
use crate::regs::rnic::eth::MAX_RING_LOG2;
use crate::regs::rnic::eth::*;
use crate::regs::rnic::*;
use crate::rnic::eth::RingCfg;
use crate::rnic::fabric::packet::Packet;
use crate::rnic::verbs::engine::{Engine, Shared};
use crate::rnic::verbs::runner::{EngineRunner, Event};
use crate::rnic::verbs::transport::{Dest, Wire};
use std::io::Read;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use vm_memory::ByteValued;

const RAM: u64 = 160 << 20;
const TXQ: u64 = 0x1_0000;
const RXQ: u64 = 0x2_0000;
/// Transmit frames: slot i of the ring keeps its frame at TX_BUFS + i * 0x4000.
const TX_BUFS: u64 = 0x10_0000;
const RX_BUFS: u64 = 0x480_0000;
const VECTOR: u16 = 3;

/// A wire that keeps every frame it is handed.
#[derive(Default)]
struct Recorder {
    frames: Mutex<Vec<Vec<u8>>>,
}

impl Wire for Recorder {
    fn address(&self) -> Ipv4Addr {
        Ipv4Addr::new(127, 0, 0, 11)
    }

    fn send(&self, _dst: &Dest, _pkt: &Packet) {}

    fn send_frame(&self, frame: &[u8]) {
        self.frames.lock().unwrap().push(frame.to_vec());
    }
}

struct Port {
    r: EngineRunner,
    mem: DmaMaps,
    ram: SharedMemory,
    stats: Arc<Stats>,
    wire: Arc<Recorder>,
    irq: std::fs::File,
    tx_pi: u16,
    rx_pi: u16,
    /// log2 of both rings' entries, as the last ETH_CTRL gave them.
    ring_log2: u32,
}

fn eventfd() -> std::fs::File {
    // SAFETY: eventfd returns a new descriptor or -1 (checked); we own it.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    assert!(fd >= 0);
    // SAFETY: fd is valid and owned.
    unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) }
}

/// A frame of `len` bytes whose content names `seed`.
fn frame(len: usize, seed: u32) -> Vec<u8> {
    (0..len).map(|i| (i as u32).wrapping_mul(31).wrapping_add(seed.wrapping_mul(7)) as u8).collect()
}

impl Port {
    /// DMA and interrupts enabled, link up, a recording wire; both rings off.
    fn new() -> Port {
        Port::with_wire(true)
    }

    /// As [`Port::new`]; `wired` false: no wire attached (a node without a fabric).
    fn with_wire(wired: bool) -> Port {
        let (ram, fd) = test_ram(RAM).unwrap();
        let mut mem = DmaMaps::default();
        mem.map(0, RAM, Some(fd), 0).unwrap();
        let stats = Arc::new(Stats::default());
        let irqs = Arc::new(Interrupts::new(4));
        let shared = Shared { irqs: irqs.clone(), stats: stats.clone(), last_error: Default::default(), fatal: Default::default(), clock: Default::default() };
        let mut r = EngineRunner::new(Engine::new("eth".into(), shared), None);
        let wire = Arc::new(Recorder::default());
        if wired {
            r.engine.set_wire(wire.clone());
        }
        r.eth_shared().set_link(true);
        let irq = eventfd();
        let flags = vfio_bindings::bindings::vfio::VFIO_IRQ_SET_DATA_EVENTFD | vfio_bindings::bindings::vfio::VFIO_IRQ_SET_ACTION_TRIGGER;
        irqs.set(flags, u32::from(VECTOR), 1, vec![irq.try_clone().unwrap()]).unwrap();
        let mut p = Port { r, mem, ram, stats, wire, irq, tx_pi: 0, rx_pi: 0, ring_log2: 1 };
        p.dma_ctrl(true, true);
        p
    }

    /// Handles one event, then runs passes while they do something (as the loop does).
    fn ev(&mut self, e: Event) {
        self.r.handle(&self.mem, e);
        self.run();
    }

    fn run(&mut self) {
        for _ in 0..10_000 {
            if !self.r.pass(&self.mem) {
                return;
            }
        }
        panic!("the runner never went idle");
    }

    fn dma_ctrl(&mut self, enabled: bool, int_enabled: bool) {
        let (reply, _rx) = crate::rnic::verbs::call::channel();
        self.ev(Event::DmaCtrl { enabled, int_enabled, db_page: false, reply });
    }

    fn ctrl_raw(&mut self, ctrl: u64, tx: RingCfg, rx: RingCfg) {
        let (reply, _rx) = crate::rnic::verbs::call::channel();
        self.ev(Event::EthCtrl { ctrl, tx, rx, reply });
    }

    /// ETH_CTRL with both rings at TXQ/RXQ of 2^log2 entries; the driver's indices restart.
    fn ctrl(&mut self, ctrl: u64, log2: u64) {
        self.ctrl_raw(ctrl, RingCfg { base: TXQ, log2 }, RingCfg { base: RXQ, log2 });
        self.ring_log2 = log2 as u32;
        if ctrl & CTRL_TX_EN != 0 {
            self.tx_pi = 0;
        }
        if ctrl & CTRL_RX_EN != 0 {
            self.rx_pi = 0;
        }
    }

    fn desc(&self, base: u64, idx: u16) -> EthDesc {
        let mut d = EthDesc::default();
        let entry = u64::from(idx) & ((1u64 << self.ring_log2) - 1);
        self.ram.read(base + entry * 16, d.as_mut_slice()).unwrap();
        d
    }

    fn put_desc(&self, base: u64, idx: u16, d: EthDesc) {
        let entry = u64::from(idx) & ((1u64 << self.ring_log2) - 1);
        self.ram.write(base + entry * 16, d.as_slice()).unwrap();
    }

    /// Writes descriptors for `frames` (addr/len, flags 0) without ringing the doorbell.
    fn queue_tx(&mut self, frames: &[Vec<u8>]) {
        for f in frames {
            let entry = u64::from(self.tx_pi) & ((1u64 << self.ring_log2) - 1);
            let addr = TX_BUFS + entry * 0x4000;
            self.ram.write(addr, f).unwrap();
            self.put_desc(TXQ, self.tx_pi, EthDesc { addr, len: f.len() as u16, ..Default::default() });
            self.tx_pi = self.tx_pi.wrapping_add(1);
        }
    }

    fn send(&mut self, frames: &[Vec<u8>]) {
        self.queue_tx(frames);
        self.ev(Event::EthTxDoorbell { pi: self.tx_pi });
    }

    /// Posts `n` receive buffers of `size` bytes.
    fn post_rx(&mut self, n: usize, size: u16) {
        for _ in 0..n {
            let entry = u64::from(self.rx_pi) & ((1u64 << self.ring_log2) - 1);
            let addr = RX_BUFS + entry * 0x4000;
            self.put_desc(RXQ, self.rx_pi, EthDesc { addr, len: size, ..Default::default() });
            self.rx_pi = self.rx_pi.wrapping_add(1);
        }
        self.ev(Event::EthRxDoorbell { pi: self.rx_pi });
    }

    /// The received frame in RX descriptor `idx` (None: not DONE or DESC_ERR).
    fn received(&self, idx: u16) -> Option<Vec<u8>> {
        let d = self.desc(RXQ, idx);
        if d.flags != DESC_DONE {
            return None;
        }
        let mut b = vec![0u8; usize::from(d.len)];
        self.ram.read(d.addr, &mut b).unwrap();
        Some(b)
    }

    fn count(&self, c: Counter) -> u64 {
        self.stats.get(c)
    }

    fn sent(&self) -> Vec<Vec<u8>> {
        std::mem::take(&mut *self.wire.frames.lock().unwrap())
    }

    fn irq_fired(&mut self) -> bool {
        let mut n = [0u8; 8];
        self.irq.read(&mut n).is_ok()
    }

    fn arm(&mut self, tx_ci: u16, rx_ci: u16) {
        self.ev(Event::EthArm { tx_ci, rx_ci, vector: VECTOR });
    }
}

const BOTH: u64 = CTRL_TX_EN | CTRL_RX_EN;

#[test]
fn transmit_sends_every_frame_byte_for_byte_and_completes_in_order() {
    let mut p = Port::new();
    p.ctrl(BOTH, 3);
    let frames = [frame(14, 1), frame(60, 2), frame(1514, 3)];
    p.send(&frames);
    assert_eq!(p.sent(), frames.to_vec(), "the wire got the frames, in order, unchanged");
    for i in 0..3 {
        assert_eq!(p.desc(TXQ, i).flags, DESC_DONE, "descriptor {i} done");
        assert_eq!(usize::from(p.desc(TXQ, i).len), frames[usize::from(i)].len(), "len untouched");
    }
    assert_eq!(p.r.eth_shared().tx_ci(), 3);
    assert_eq!(p.count(Counter::EthTxFrames), 3);
    assert_eq!(p.count(Counter::EthTxBytes), 14 + 60 + 1514);
    assert_eq!(p.count(Counter::EthTxErrors), 0);
}

#[test]
fn a_pass_sends_at_most_its_budget_and_reports_the_rest_pending() {
    let mut p = Port::new();
    p.ctrl(BOTH, 8);
    let frames: Vec<_> = (0..100).map(|i| frame(64, i)).collect();
    p.queue_tx(&frames);
    p.r.handle(&p.mem, Event::EthTxDoorbell { pi: 100 });
    assert!(p.r.pass(&p.mem));
    assert_eq!(p.sent().len(), TX_BUDGET);
    assert!(p.r.eth.tx_pending(), "the loop keeps polling");
    assert!(p.r.pass(&p.mem));
    assert_eq!(p.sent().len(), 100 - TX_BUDGET);
    assert!(!p.r.pass(&p.mem), "nothing left: the loop may sleep");
}

#[test]
fn indices_wrap_around_the_ring_and_past_u16() {
    // A ring of 4 entries, 10 frames: the ring wraps twice.
    let mut p = Port::new();
    p.ctrl(BOTH, 2);
    for round in 0..5u32 {
        let frames = [frame(100, 2 * round), frame(101, 2 * round + 1)];
        p.send(&frames);
        assert_eq!(p.sent(), frames.to_vec());
    }
    assert_eq!(p.r.eth_shared().tx_ci(), 10);
    // The largest ring, filled again and again until the 16-bit indices wrap.
    let mut p = Port::new();
    p.ctrl(BOTH, MAX_RING_LOG2);
    let size = 1u32 << MAX_RING_LOG2;
    let total = 65536 + 2 * size;
    let mut seq = 0u32;
    while seq < total {
        let frames: Vec<_> = (seq..seq + size).map(|s| s.to_le_bytes().iter().copied().cycle().take(14).collect()).collect();
        p.send(&frames);
        let sent = p.sent();
        assert_eq!(sent.len(), size as usize);
        assert_eq!(sent[0][..4], seq.to_le_bytes(), "in order across the wrap");
        assert_eq!(sent[size as usize - 1][..4], (seq + size - 1).to_le_bytes());
        seq += size;
    }
    assert_eq!(p.r.eth_shared().tx_ci(), (total % 65536) as u16, "free-running u16");
    assert_eq!(p.count(Counter::EthTxFrames), u64::from(total));
    // Receive across the wrap as well: post and fill the ring past index 65535.
    let mut p = Port::new();
    p.ctrl(BOTH, 4);
    for i in 0..(65536 + 40u32) {
        if i % 16 == 0 {
            p.post_rx(16, 64);
        }
        let f = frame(20, i);
        p.r.on_frame(&p.mem, &f);
        assert_eq!(p.received(i as u16).as_deref(), Some(&f[..]));
    }
    assert_eq!(p.r.eth_shared().rx_ci(), 40);
}

#[test]
fn runts_giants_unmapped_frames_and_a_dead_link_are_refused_with_desc_err() {
    let mut p = Port::new();
    p.ctrl(BOTH, 4);
    let ok = frame(60, 9);
    let bad = [frame(0, 1), frame(13, 2), frame(1515, 3), frame(1514, 4)];
    p.send(&bad);
    let flags: Vec<u8> = (0..4).map(|i| p.desc(TXQ, i).flags).collect();
    assert_eq!(flags, [DESC_DONE | DESC_ERR, DESC_DONE | DESC_ERR, DESC_DONE | DESC_ERR, DESC_DONE], "0, 13 and MTU + 15 bytes refused");
    assert_eq!(p.sent(), vec![frame(1514, 4)]);
    assert_eq!(p.count(Counter::EthTxErrors), 3);
    // A frame outside guest memory, or whose address + length wraps.
    for addr in [RAM - 10, u64::MAX - 20] {
        let idx = p.tx_pi;
        p.put_desc(TXQ, idx, EthDesc { addr, len: 60, ..Default::default() });
        p.tx_pi = idx.wrapping_add(1);
        p.ev(Event::EthTxDoorbell { pi: p.tx_pi });
        assert_eq!(p.desc(TXQ, idx).flags, DESC_DONE | DESC_ERR);
    }
    assert_eq!(p.count(Counter::DmaErrors), 2);
    // A larger MTU takes a larger frame.
    assert!(p.r.eth_shared().set_mtu(9000));
    p.send(&[frame(9014, 5)]);
    assert_eq!(p.sent().len(), 1);
    // Link down, then no wire at all: refused, the ring keeps moving.
    p.r.eth_shared().set_link(false);
    p.send(std::slice::from_ref(&ok));
    assert_eq!(p.desc(TXQ, p.tx_pi - 1).flags, DESC_DONE | DESC_ERR);
    let mut q = Port::with_wire(false);
    q.ctrl(BOTH, 2);
    q.send(std::slice::from_ref(&ok));
    assert_eq!(q.desc(TXQ, 0).flags, DESC_DONE | DESC_ERR, "no wire: as with the link down");
    assert_eq!(q.r.eth_shared().tx_ci(), 1);
    assert_eq!(p.count(Counter::EthTxErrors), 3 + 2 + 1);
    assert_eq!(p.count(Counter::EthTxFrames), 2);
}

#[test]
fn receive_places_frames_in_posted_buffers() {
    let mut p = Port::new();
    p.ctrl(BOTH, 3);
    p.post_rx(4, 2048);
    assert!(p.r.eth_shared().rx_enabled());
    let frames = [frame(14, 1), frame(342, 2), frame(1514, 3)];
    for f in &frames {
        p.r.on_frame(&p.mem, f);
    }
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(p.received(i as u16).as_deref(), Some(&f[..]), "frame {i} in its buffer, len written");
    }
    assert_eq!(p.desc(RXQ, 3).flags, 0, "the fourth buffer is still empty");
    assert_eq!(p.r.eth_shared().rx_ci(), 3);
    assert_eq!(p.count(Counter::EthRxFrames), 3);
    assert_eq!(p.count(Counter::EthRxBytes), 14 + 342 + 1514);
}

#[test]
fn receive_without_a_buffer_or_into_a_small_one_is_dropped_and_counted() {
    let mut p = Port::new();
    let f = frame(200, 1);
    p.r.on_frame(&p.mem, &f);
    assert_eq!(p.count(Counter::EthRxNoBuffer), 1, "receive ring off");
    p.ctrl(BOTH, 3);
    p.r.on_frame(&p.mem, &f);
    assert_eq!(p.count(Counter::EthRxNoBuffer), 2, "no buffer posted");
    p.post_rx(1, 100);
    p.r.on_frame(&p.mem, &f);
    assert_eq!(p.count(Counter::EthRxNoBuffer), 3, "buffer too small");
    let d = p.desc(RXQ, 0);
    assert_eq!((d.flags, d.len), (DESC_DONE | DESC_ERR, 0), "the small buffer is handed back empty");
    assert_eq!(p.r.eth_shared().rx_ci(), 1);
    // A buffer outside guest memory: handed back empty too.
    p.put_desc(RXQ, 1, EthDesc { addr: RAM - 8, len: 2048, ..Default::default() });
    p.rx_pi = 2;
    p.ev(Event::EthRxDoorbell { pi: 2 });
    p.r.on_frame(&p.mem, &f);
    assert_eq!(p.desc(RXQ, 1).flags, DESC_DONE | DESC_ERR);
    assert_eq!(p.count(Counter::DmaErrors), 1);
    // Malformed lengths never reach a buffer.
    p.post_rx(1, 2048);
    p.r.on_frame(&p.mem, &frame(13, 0));
    p.r.on_frame(&p.mem, &frame(1515, 0));
    assert_eq!(p.count(Counter::EthRxErrors), 2);
    assert_eq!(p.desc(RXQ, 2).flags, 0);
    assert_eq!(p.count(Counter::EthRxFrames), 0);
}

#[test]
fn arm_raises_at_once_over_unseen_completions_else_at_the_next_one() {
    let mut p = Port::new();
    p.ctrl(BOTH, 3);
    p.arm(0, 0);
    assert!(!p.irq_fired(), "nothing done yet: armed, quiet");
    p.send(&[frame(60, 1)]);
    assert!(p.irq_fired(), "the next completed descriptor raises the vector");
    p.send(&[frame(60, 2)]);
    assert!(!p.irq_fired(), "once: the port is disarmed");
    p.arm(1, 0);
    assert!(p.irq_fired(), "the driver saw 1, the device is at 2: at once");
    p.arm(2, 0);
    assert!(!p.irq_fired());
    p.post_rx(2, 2048);
    assert!(!p.irq_fired(), "posting buffers completes nothing");
    p.r.on_frame(&p.mem, &frame(60, 3));
    assert!(p.irq_fired(), "a received frame raises it too");
    p.arm(2, 0);
    assert!(p.irq_fired(), "the receive index differs: at once");
    assert_eq!(p.count(Counter::Interrupts), 4);
    // INT_ENABLE clear: nothing raised; an arm over unseen completions disarms, a
    // completion leaves the port armed.
    p.dma_ctrl(true, false);
    p.arm(2, 0);
    p.arm(2, 1);
    p.send(&[frame(60, 4)]);
    assert!(!p.irq_fired());
    p.dma_ctrl(true, true);
    p.send(&[frame(60, 5)]);
    assert!(p.irq_fired(), "still armed from before: the next completion raises");
}

#[test]
fn dma_disabled_stops_both_rings_until_enabled_again() {
    let mut p = Port::new();
    p.ctrl(BOTH, 3);
    p.post_rx(2, 2048);
    p.dma_ctrl(false, true);
    p.send(&[frame(60, 1), frame(61, 2)]);
    assert!(p.sent().is_empty(), "no frame leaves");
    assert_eq!(p.desc(TXQ, 0).flags, 0, "no descriptor written");
    assert!(!p.r.eth.tx_pending() && !p.r.pass(&p.mem), "nothing to poll while disabled");
    p.r.on_frame(&p.mem, &frame(60, 3));
    assert_eq!(p.count(Counter::EthRxNoBuffer), 1, "received frames are dropped");
    assert_eq!(p.desc(RXQ, 0).flags, 0);
    p.dma_ctrl(true, true);
    assert_eq!(p.sent().len(), 2, "ENABLE again: the waiting descriptors go");
    p.r.on_frame(&p.mem, &frame(60, 4));
    assert_eq!(p.received(0), Some(frame(60, 4)));
}

#[test]
fn reset_stops_both_rings_and_zeroes_the_indices() {
    let mut p = Port::new();
    p.ctrl(BOTH, 3);
    p.send(&[frame(60, 1)]);
    p.post_rx(2, 2048);
    p.r.on_frame(&p.mem, &frame(60, 2));
    p.arm(1, 1);
    assert_eq!(p.sent().len(), 1);
    let (reply, _rx) = crate::rnic::verbs::call::channel();
    p.ev(Event::Reset { reply });
    let s = p.r.eth_shared().clone();
    assert_eq!((s.tx_ci(), s.rx_ci(), s.tx_enabled(), s.rx_enabled()), (0, 0, false, false));
    p.queue_tx(&[frame(60, 3)]);
    p.ev(Event::EthTxDoorbell { pi: 2 });
    p.r.on_frame(&p.mem, &frame(60, 4));
    assert!(p.sent().is_empty(), "rings off after the reset");
    assert!(s.link_up(), "the link is physical: a reset leaves it");
    // Interrupts are off after a reset (DMA_CTRL's reset value) until enabled.
    p.dma_ctrl(true, true);
    p.ctrl(BOTH, 3);
    p.arm(0, 0);
    p.send(&[frame(60, 5)]);
    assert!(p.irq_fired(), "the ring restarted at index 0");
    assert_eq!(s.tx_ci(), 1);
}

#[test]
fn bad_ring_enables_and_doorbells_are_refused() {
    let mut p = Port::new();
    let cfgs = [
        (RingCfg { base: TXQ + 8, log2: 3 }, "unaligned"),
        (RingCfg { base: TXQ, log2: 0 }, "log below MIN"),
        (RingCfg { base: TXQ, log2: MAX_RING_LOG2 + 1 }, "log above MAX"),
        (RingCfg { base: u64::MAX - 15, log2: 3 }, "past the end of the address space"),
    ];
    for (i, (cfg, why)) in cfgs.iter().enumerate() {
        p.ctrl_raw(BOTH, *cfg, *cfg);
        assert_eq!(p.r.eth_shared().ctrl(), 0, "{why}: both rings stay off");
        assert_eq!(p.count(Counter::GuestErrors), 2 * (i as u64 + 1));
    }
    p.ctrl(BOTH, 2);
    assert_eq!(p.r.eth_shared().ctrl(), BOTH);
    p.queue_tx(&[frame(60, 1)]);
    p.ev(Event::EthTxDoorbell { pi: 5 });
    assert!(p.sent().is_empty(), "5 ahead of a 4-entry ring: refused");
    assert_eq!(p.count(Counter::GuestErrors), 9);
    p.ev(Event::EthTxDoorbell { pi: 1 });
    assert_eq!(p.sent().len(), 1);
    // A descriptor ring outside guest memory stops its ring.
    p.ctrl_raw(0, RingCfg::default(), RingCfg::default());
    p.ctrl_raw(BOTH, RingCfg { base: RAM - 16, log2: 2 }, RingCfg { base: RAM, log2: 2 });
    p.ev(Event::EthTxDoorbell { pi: 2 }); // slot 1 is past the end of RAM
    p.ev(Event::EthRxDoorbell { pi: 1 });
    p.r.on_frame(&p.mem, &frame(60, 2));
    assert_eq!(p.r.eth_shared().ctrl(), 0, "both rings stopped by their DMA faults");
    assert_eq!(p.count(Counter::DmaErrors), 2);
    assert_eq!(p.r.eth_shared().tx_ci(), 1, "the descriptor before the fault completed");
}

// ---- the registers (RNIC model, engine inline) ----

fn rnic(address: Option<Ipv4Addr>) -> crate::rnic::Rnic {
    let mut r = crate::rnic::tests::test_rnic("node0-rnic0", address);
    bus_master(&mut r, true);
    r
}

/// What Linux's pci_set_master / pci_clear_master do to the COMMAND register.
fn bus_master(r: &mut crate::rnic::Rnic, on: bool) {
    use crate::platform::pci::config::{COMMAND, COMMAND_BUS_MASTER, COMMAND_MEMORY};
    let v = if on { COMMAND_MEMORY | COMMAND_BUS_MASTER } else { COMMAND_MEMORY };
    r.config_mut().write(COMMAND, &v.to_le_bytes());
    r.config_written();
}

fn rd(r: &mut crate::rnic::Rnic, off: u64) -> u64 {
    let mut b = [0u8; 8];
    let width = REGS.iter().find(|d| d.offset == off).map_or(4, |d| usize::from(d.width));
    r.bar_read(0, off, &mut b[..width]);
    u64::from_le_bytes(b)
}

fn wr(r: &mut crate::rnic::Rnic, off: u64, v: u64) {
    let width = REGS.iter().find(|d| d.offset == off).map_or(4, |d| usize::from(d.width));
    r.bar_write(0, off, &v.to_le_bytes()[..width]);
}

#[test]
fn permanent_mac_comes_from_the_address_or_the_name() {
    let ip = Ipv4Addr::new(127, 0, 0, 12);
    let mut r = rnic(Some(ip));
    assert_eq!(rd(&mut r, ETH_PERM_MAC), mac_to_reg([0x02, 0xe1, 127, 0, 0, 12]));
    assert_eq!(rd(&mut r, ETH_MAC), rd(&mut r, ETH_PERM_MAC), "ETH_MAC starts as the permanent one");
    assert_eq!(r.eth_shared().mac(), [0x02, 0xe1, 127, 0, 0, 12]);
    let by_name = perm_mac(None, "node0-rnic0");
    assert_eq!(by_name, perm_mac(None, "node0-rnic0"), "stable");
    assert_ne!(by_name, perm_mac(None, "node1-rnic0"));
    assert_eq!(by_name[0] & 0x03, 0x02, "locally administered unicast");
    let mut r = rnic(None);
    assert_eq!(rd(&mut r, ETH_PERM_MAC), mac_to_reg(by_name));
    wr(&mut r, ETH_PERM_MAC, 0);
    assert_eq!(rd(&mut r, ETH_PERM_MAC), mac_to_reg(by_name), "read-only");
}

#[test]
fn mac_mtu_and_vector_registers_take_legal_values_only() {
    let mut r = rnic(None);
    let s = r.eth_shared();
    assert_eq!((rd(&mut r, ETH_MTU), s.mtu()), (1500, 1500));
    for (v, kept) in [(68, 68), (9000, 9000), (67, 9000), (9001, 9000), (0, 9000), (1500, 1500)] {
        wr(&mut r, ETH_MTU, v);
        assert_eq!((rd(&mut r, ETH_MTU), u64::from(s.mtu())), (kept, kept), "ETH_MTU = {v}");
    }
    assert_eq!(r.stats().iter().find(|(n, _)| *n == "GuestErrors").map(|c| c.1), Some(3));
    wr(&mut r, ETH_MAC, 0xffff_0605_0403_0206);
    assert_eq!(rd(&mut r, ETH_MAC), 0x0605_0403_0206, "48 bits");
    assert_eq!(s.mac(), [0x06, 0x02, 0x03, 0x04, 0x05, 0x06]);
    wr(&mut r, ETH_VECTOR, 3);
    wr(&mut r, ETH_VECTOR, 4);
    assert_eq!(rd(&mut r, ETH_VECTOR), 3, "the function has 4 vectors");
    assert_eq!(rd(&mut r, ETH_SPEED), 100_000);
    assert_eq!(rd(&mut r, ETH_LINK), 0);
    s.set_link(true);
    assert_eq!(rd(&mut r, ETH_LINK), LINK_UP, "live");
    wr(&mut r, ETH_CTRL, CTRL_PROMISC);
    assert!(s.promisc());
    wr(&mut r, RNIC_REG_RESET, RESET_MAGIC);
    assert_eq!((s.mtu(), s.mac(), s.promisc()), (1500, s.perm_mac(), false), "reset: MAC, MTU, promisc");
    assert_eq!((rd(&mut r, ETH_MTU), rd(&mut r, ETH_VECTOR), rd(&mut r, ETH_CTRL)), (1500, 0, 0));
    assert!(s.link_up());
}

#[test]
fn rings_through_the_registers_inline() {
    let mut r = rnic(None);
    let (ram, fd) = test_ram(RAM).unwrap();
    r.dma().write().unwrap().map(0, RAM, Some(fd), 0).unwrap();
    let s = r.eth_shared();
    wr(&mut r, ETH_TXQ_BASE, TXQ);
    wr(&mut r, ETH_TXQ_LOG, 2);
    wr(&mut r, ETH_RXQ_BASE, RXQ + 8);
    wr(&mut r, ETH_RXQ_LOG, 2);
    wr(&mut r, ETH_TXQ_PI, 3); // a stale index before the enable
    wr(&mut r, ETH_CTRL, CTRL_TX_EN | CTRL_RX_EN);
    assert_eq!(rd(&mut r, ETH_CTRL), CTRL_TX_EN, "the misaligned receive ring reads back off");
    assert_eq!(rd(&mut r, ETH_TXQ_PI), 0, "a ring starts at index 0");
    assert!(s.tx_enabled() && !s.rx_enabled());
    let f = frame(60, 1);
    ram.write(TX_BUFS, &f).unwrap();
    ram.write(TXQ, EthDesc { addr: TX_BUFS, len: 60, ..Default::default() }.as_slice()).unwrap();
    wr(&mut r, ETH_TXQ_PI, 1);
    assert_eq!(rd(&mut r, ETH_TXQ_CI), 1, "done by the time the doorbell write returns (inline)");
    let mut d = EthDesc::default();
    ram.read(TXQ, d.as_mut_slice()).unwrap();
    assert_eq!(d.flags, DESC_DONE | DESC_ERR, "no fabric attached: link down, refused");
    wr(&mut r, ETH_CTRL, 0);
    assert_eq!(rd(&mut r, ETH_CTRL), 0);
    assert_eq!(rd(&mut r, ETH_TXQ_CI), 1, "a stopped ring keeps its index until it starts again");
    wr(&mut r, ETH_CTRL, CTRL_TX_EN);
    assert_eq!(rd(&mut r, ETH_TXQ_CI), 0);
    wr(&mut r, ETH_ARM, 0);
    wr(&mut r, RNIC_REG_RESET, RESET_MAGIC);
    assert_eq!((rd(&mut r, ETH_CTRL), rd(&mut r, ETH_TXQ_CI), rd(&mut r, ETH_RXQ_CI)), (0, 0, 0));
}

#[test]
fn no_dma_while_bus_mastering_is_off() {
    let mut r = rnic(None);
    let (ram, fd) = test_ram(RAM).unwrap();
    r.dma().write().unwrap().map(0, RAM, Some(fd), 0).unwrap();
    wr(&mut r, ETH_TXQ_BASE, TXQ);
    wr(&mut r, ETH_TXQ_LOG, 2);
    wr(&mut r, ETH_CTRL, CTRL_TX_EN);
    ram.write(TX_BUFS, &frame(60, 1)).unwrap();
    ram.write(TXQ, EthDesc { addr: TX_BUFS, len: 60, ..Default::default() }.as_slice()).unwrap();
    bus_master(&mut r, false);
    wr(&mut r, ETH_TXQ_PI, 1);
    let stat = |r: &mut crate::rnic::Rnic, c: Counter| rd(r, STATS_BASE + 8 * c as u64);
    assert!(stat(&mut r, Counter::BusMasterErrors) > 0, "the descriptor read was refused and counted");
    let mut d = EthDesc::default();
    ram.read(TXQ, d.as_mut_slice()).unwrap();
    assert_eq!(d.flags, 0, "nothing written back with bus mastering off");
    bus_master(&mut r, true);
    wr(&mut r, ETH_CTRL, 0);
    wr(&mut r, ETH_CTRL, CTRL_TX_EN);
    wr(&mut r, ETH_TXQ_PI, 1);
    ram.read(TXQ, d.as_mut_slice()).unwrap();
    assert_eq!(d.flags, DESC_DONE | DESC_ERR, "bus mastering on: the ring runs (link down, refused)");
}

// Minor 9: frames over several descriptors, checksum and TSO requests through the ring.

impl Port {
    /// Writes one frame as consecutive descriptors, one per piece, TX_MORE on all but the
    /// last; `first` gives the first's request bits and offload fields. No doorbell.
    fn queue_chain(&mut self, pieces: &[&[u8]], first: EthDesc) {
        for (i, piece) in pieces.iter().enumerate() {
            let entry = u64::from(self.tx_pi) & ((1u64 << self.ring_log2) - 1);
            let addr = TX_BUFS + entry * 0x4000;
            self.ram.write(addr, piece).unwrap();
            let mut d = if i == 0 { first } else { EthDesc::default() };
            (d.addr, d.len) = (addr, piece.len() as u16);
            if i + 1 < pieces.len() {
                d.flags |= TX_MORE;
            }
            self.put_desc(TXQ, self.tx_pi, d);
            self.tx_pi = self.tx_pi.wrapping_add(1);
        }
    }

    fn doorbell(&mut self) {
        self.ev(Event::EthTxDoorbell { pi: self.tx_pi });
    }

    fn tx_flags(&self, from: u16, n: u16) -> Vec<u8> {
        (from..from + n).map(|i| self.desc(TXQ, i).flags).collect()
    }
}

/// An IPv4 TCP frame with `payload` bytes (the checksum field holds junk).
fn tcp4(payload: usize) -> Vec<u8> {
    let mut f = vec![2, 0xe1, 10, 0, 0, 12, 2, 0xe1, 10, 0, 0, 11, 0x08, 0x00];
    f.extend_from_slice(&[0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 11, 10, 0, 0, 12]);
    f.extend_from_slice(&[0x13, 0x89, 0x13, 0x8a, 0, 0, 0, 100, 0, 0, 0, 1, 0x50, 0x18, 0xff, 0xff, 0xab, 0xcd, 0, 0]);
    f.extend_from_slice(&frame(payload, 77));
    f
}

#[test]
fn a_frame_over_several_descriptors_goes_out_whole_and_completes_each() {
    let mut p = Port::new();
    p.ctrl(BOTH, 4);
    let f = frame(1514, 5);
    p.queue_chain(&[&f[..100], &f[100..101], &f[101..]], EthDesc::default());
    p.send(std::slice::from_ref(&f));
    assert_eq!(p.sent(), vec![f.clone(), f], "one frame gathered from three pieces, then a plain one");
    assert_eq!(p.tx_flags(0, 4), [DESC_DONE; 4]);
    assert_eq!(p.r.eth_shared().tx_ci(), 4);
    assert_eq!((p.count(Counter::EthTxFrames), p.count(Counter::EthTxBytes)), (2, 2 * 1514));
    // A frame whose last descriptor is not posted yet waits for it.
    let g = frame(300, 6);
    p.queue_chain(&[&g[..10], &g[10..20], &g[20..]], EthDesc::default());
    p.ev(Event::EthTxDoorbell { pi: p.tx_pi - 1 });
    assert!(p.sent().is_empty() && p.r.eth_shared().tx_ci() == 4, "waits for its last piece");
    p.doorbell();
    assert_eq!(p.sent(), vec![g]);
    assert_eq!(p.r.eth_shared().tx_ci(), 7);
}

#[test]
fn malformed_chains_are_dropped_whole_and_counted_and_the_ring_goes_on() {
    let mut p = Port::new();
    p.ctrl(BOTH, 6);
    let ok = frame(60, 1);
    // TX_MAX_DESCS descriptors that all say more follows: refused, each marked.
    let f = frame(TX_MAX_DESCS as usize * 2, 2);
    let pieces: Vec<&[u8]> = f.chunks(2).collect();
    p.queue_chain(&pieces, EthDesc::default());
    let last = p.tx_pi - 1;
    let mut d = p.desc(TXQ, last);
    d.flags |= TX_MORE;
    p.put_desc(TXQ, last, d);
    p.send(std::slice::from_ref(&ok));
    assert_eq!(p.tx_flags(0, TX_MAX_DESCS as u16), vec![DESC_DONE | DESC_ERR; TX_MAX_DESCS as usize]);
    assert_eq!(p.sent(), vec![ok.clone()], "the next frame goes out");
    assert_eq!(p.count(Counter::EthTxErrors), 1, "one frame refused");
    // Exactly TX_MAX_DESCS pieces is a frame.
    p.queue_chain(&pieces, EthDesc::default());
    p.doorbell();
    assert_eq!(p.sent(), vec![f.clone()]);
    // Too long in total, a piece outside guest memory, TSO without a checksum request.
    let big = frame(1515, 3);
    p.queue_chain(&[&big[..1000], &big[1000..]], EthDesc::default());
    let start = p.tx_pi;
    p.queue_chain(&[&ok[..30], &ok[30..]], EthDesc::default());
    let mut d = p.desc(TXQ, start + 1);
    d.addr = RAM - 10;
    p.put_desc(TXQ, start + 1, d);
    p.queue_chain(&[&tcp4(3000)], EthDesc { flags: TX_TSO, csum_start: 34, csum_offset: 16, mss: 1000, ..Default::default() });
    p.queue_chain(&[&ok[..14]], EthDesc { flags: TX_CSUM, csum_start: 13, csum_offset: 0, ..Default::default() });
    p.send(std::slice::from_ref(&ok));
    assert_eq!(p.tx_flags(start - 2, 6), [vec![DESC_DONE | DESC_ERR; 6]].concat());
    assert_eq!(p.sent(), vec![ok], "only the good frame");
    assert_eq!(p.count(Counter::EthTxErrors), 1 + 4);
    assert_eq!(p.count(Counter::DmaErrors), 1);
}

#[test]
fn checksum_and_tso_requests_through_the_ring() {
    let mut p = Port::new();
    p.ctrl(BOTH, 4);
    // TX_CSUM: the sum from byte 34 stored at 34 + 16; a frame without it is unchanged.
    let f = tcp4(500);
    p.queue_chain(&[&f[..54], &f[54..]], EthDesc { flags: TX_CSUM, csum_start: 34, csum_offset: 16, ..Default::default() });
    p.doorbell();
    let sent = p.sent().remove(0);
    let mut want = f.clone();
    crate::rnic::eth_offload::insert_csum(&mut want, 34, 16).unwrap();
    assert_eq!(sent, want);
    assert_ne!(sent[50..52], f[50..52]);
    assert_eq!(p.count(Counter::EthTxCsum), 1);
    // TX_TSO: 3000 payload bytes, mss 1000: three 1054-byte segments.
    let f = tcp4(3000);
    let tso = EthDesc { flags: TX_CSUM | TX_TSO, csum_start: 34, csum_offset: 16, mss: 1000, ..Default::default() };
    p.queue_chain(&[&f[..54], &f[54..2000], &f[2000..]], tso);
    p.doorbell();
    let segs = p.sent();
    assert_eq!(segs.iter().map(Vec::len).collect::<Vec<_>>(), [1054; 3]);
    assert_eq!(segs.iter().flat_map(|s| s[54..].to_vec()).collect::<Vec<_>>(), f[54..]);
    assert_eq!((p.count(Counter::EthTsoFrames), p.count(Counter::EthTsoSegments)), (1, 3));
    assert_eq!(p.count(Counter::EthTxFrames), 1 + 3);
    assert_eq!(p.count(Counter::EthTxBytes), 554 + 3 * 1054);
    // Segments must fit the MTU: mss 1461 with 54 bytes of headers is one byte over.
    p.queue_chain(&[&f], EthDesc { mss: 1461, ..tso });
    p.queue_chain(&[&f], EthDesc { mss: 1460, ..tso });
    p.doorbell();
    assert_eq!(p.sent().len(), 3, "1460 fits: 3 segments");
    assert_eq!(p.count(Counter::EthTxErrors), 1);
}

#[test]
fn received_frames_with_right_checksums_are_marked_when_asked() {
    let mut p = Port::new();
    p.ctrl(BOTH, 4);
    p.post_rx(4, 2048);
    let mut good = tcp4(100);
    let len = (good.len() - 14) as u16;
    good[16..18].copy_from_slice(&len.to_be_bytes());
    let ip = !crate::rnic::eth_offload::fold(crate::rnic::eth_offload::sum16(0, &good[14..34]));
    good[24..26].copy_from_slice(&ip.to_be_bytes());
    // The TCP checksum as the TSO path computes it: one segment.
    let t = crate::rnic::eth_offload::Tso::parse(&good, 34, 16, 1460, 1514).unwrap();
    let mut seg = Vec::new();
    t.segment(&good.clone(), &mut Vec::new(), |s| seg = s.to_vec());
    p.r.on_frame(&p.mem, &seg);
    assert_eq!(p.desc(RXQ, 0).flags, DESC_DONE, "not asked: DONE only, as before");
    p.r.eth_shared().set_rx_csum(true);
    p.r.on_frame(&p.mem, &seg);
    let mut bad = seg.clone();
    bad[60] ^= 1;
    p.r.on_frame(&p.mem, &bad);
    p.r.on_frame(&p.mem, &frame(100, 1));
    let flags: Vec<u8> = (1..4).map(|i| p.desc(RXQ, i).flags).collect();
    assert_eq!(flags, [DESC_DONE | DESC_CSUM_OK, DESC_DONE, DESC_DONE]);
}
