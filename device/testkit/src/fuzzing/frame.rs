//! The `frame` target: arbitrary bytes as Ethernet frames from the segment, through the
//! frame decoder and the port's receive path (`rnic_emu_core::rnic::fabric::frame`).
//!
//! An input is one configuration byte, then records of a 16-bit little-endian prefix
//! (bits 13..0: the frame's length, cut to what is left; bit 15: the frame was turned
//! around inside the port rather than heard on the segment) and the frame's bytes.
//!
//! (a) The decoder, on every frame and on the whole input: no panic; what [`classify`]
//! says matches the bytes (addresses, ranges inside the frame); and a RoCE frame whose
//! packet decodes (ICRC checked) re-encodes with [`encode_roce`] to a frame that
//! classifies to the same addresses, decodes to the same packet (its pad count made
//! canonical) and is a fixed point of decode + encode; the two frames agree byte for byte
//! except in the fields the decoder does not keep ([`same_but_unkept`]).
//!
//! (b) The receive path: an engine in the event loop's [`EngineRunner`] with one fabric QP
//! connected to [`PEER`] (a CQ, an MR, RECVs posted, a WRITE and a READ outstanding so
//! ACKs and READ responses have something to answer) and the Ethernet receive ring with
//! the buffers the configuration byte posts. Each frame goes through [`sort`], as the
//! server's fabric port runs it, then to the runner's `on_packet` or `on_frame` as the
//! event loop hands them on, or its drop is counted. After each frame the counters moved
//! exactly as its verdict says (a drop: its counters and nothing else; a netdev frame:
//! placed byte for byte in the next posted buffer or counted as no buffer; a RoCE packet:
//! received or dropped by the engine, nothing of the Ethernet port); at the end, after the
//! engine ran, nothing in guest RAM changed outside the posted buffers (the written part
//! of each Ethernet buffer, the descriptors' `len` and `flags`, the CQ ring, the MR, the QP
//! context), and the engine did not fail.
//!
//! The configuration byte: bit 0 promiscuous; bits 2..1 the MTU (1500, 9000, 1024, 68);
//! bits 5..3 how many receive buffers are posted (0..=7); bit 6 every second buffer is
//! 256 bytes (too small for most frames) and the seventh is not mapped guest memory; bit
//! 7 the receive ring stays off.

use super::layout::{self, CQ_TABLE, MR_TABLE, MTT, QP_TABLE, RAM_BASE};
use super::wire::RecordingWire;
use rnic_emu_core::contract::abi::*;
use rnic_emu_core::contract::counters::{Counter, Stats, COUNTERS};
use rnic_emu_core::platform::mem::dma::{test_ram, DmaMaps};
use rnic_emu_core::platform::msix::Interrupts;
use rnic_emu_core::platform::shm::SharedMemory;
use rnic_emu_core::regs::rnic::eth::{CTRL_RX_EN, DESC_DONE, DESC_ERR};
use rnic_emu_core::ring::{self, WrId};
use rnic_emu_core::rnic::eth::RingCfg;
use rnic_emu_core::rnic::fabric::frame::{
    classify, decode_roce, encode_roce, is_group, mac_of_ipv4, sort, Kind, RoceAddr, RxPort, Verdict, DEFAULT_TTL, ETHERTYPE_ARP, ETHERTYPE_IPV4, ETH_HLEN,
};
use rnic_emu_core::rnic::fabric::packet::{op, syndrome, Aeth, Bth, Deth, Packet, Reth, ICRC_LEN};
use rnic_emu_core::rnic::verbs::clock::Clock;
use rnic_emu_core::rnic::verbs::engine::{Engine, Shared, Tables};
use rnic_emu_core::rnic::verbs::runner::{EngineRunner, Event};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use vm_memory::ByteValued;

/// The RNIC's address (its MAC is [`mac_of_ipv4`] of it) and its QP's peer.
pub const LOCAL: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
pub const PEER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
/// The size of guest RAM (at layout::RAM_BASE); offsets in it after the tables.
const RAM: u64 = 0x5_0000;
const SQ: u64 = 0x8000;
const RQ: u64 = 0xa000;
const CQ_RING: u64 = 0xc000;
const RXQ: u64 = 0xe000;
const RX_BUFS: u64 = 0x1_0000;
const MR_DATA: u64 = 0x3_0000;
const MR_LEN: u64 = RAM - MR_DATA;
/// The harness's objects: QP 1 talks to the peer's QP 2; CQ 1; MR 1 (its keys, VA).
pub const QPN: u32 = 1;
pub const PEER_QPN: u32 = 2;
const CQ_LOG: u8 = 6;
const RING_LOG: u8 = 4;
const RXQ_LOG: u64 = 3;
const RX_BUF: u64 = 0x4000;
pub const MR_VA: u64 = 0x7000_0000;
pub const MR_KEY: u32 = 1 << 8 | 0x11;
/// The first PSN the QP expects (requests from the peer) and sends (its WRITE, then its
/// READ).
pub const RQ_PSN: u32 = 0x200;
pub const SQ_PSN: u32 = 0x100;
/// Length of the READ the QP has outstanding.
pub const READ_LEN: u32 = 64;
/// Frames per input, the prefix's length bits, engine passes at the end.
const MAX_FRAMES: usize = 64;
const LEN_MASK: u16 = 0x3fff;
const HAIRPIN: u16 = 0x8000;
const MAX_PASSES: usize = 64;
/// Packets the recording wire keeps.
const WIRE_KEEP: usize = 64;

/// The target's entry point.
pub fn frame(data: &[u8]) {
    check_decoder(data);
    let Some((&cfg, rest)) = data.split_first() else { return };
    let Some(mut h) = Harness::new(cfg) else { return };
    for (f, from_wire) in records(rest) {
        check_decoder(f);
        h.receive(f, from_wire);
    }
    h.finish();
}

/// The frames of an input after its configuration byte, each with whether it came from
/// the segment (at most [`MAX_FRAMES`]).
fn records(mut rest: &[u8]) -> Vec<(&[u8], bool)> {
    let mut out = Vec::new();
    while out.len() < MAX_FRAMES {
        let [lo, hi, tail @ ..] = rest else { break };
        let prefix = u16::from_le_bytes([*lo, *hi]);
        let (f, more) = tail.split_at(usize::from(prefix & LEN_MASK).min(tail.len()));
        out.push((f, prefix & HAIRPIN == 0));
        rest = more;
    }
    out
}

// ---------------------------------------------------------------------------------------
// (a) The decoder.

/// Frames longer than this are not re-encoded (the device builds none near the 64 KiB
/// bound of the IP lengths, which a re-encoding with another pad could cross).
const MAX_ROUND_TRIP: usize = 16 << 10;

/// [`classify`] and [`decode_roce`] on `f`, with the invariants of the module header.
fn check_decoder(f: &[u8]) {
    let Ok(c) = classify(f) else { return };
    assert_eq!((&c.dst_mac[..], &c.src_mac[..], c.ethertype), (&f[0..6], &f[6..12], u16::from_be_bytes([f[12], f[13]])), "the Ethernet header as it is");
    let Kind::Roce { addr, l3, payload } = c.kind else { return };
    assert!(l3 == ETH_HLEN && l3 < payload.start && payload.start + 12 + ICRC_LEN <= payload.end && payload.end <= f.len(), "ranges inside the frame");
    assert_eq!((addr.dst_mac, addr.src_mac), (c.dst_mac, c.src_mac));
    assert_eq!(addr.src_ip.is_ipv4(), addr.dst_ip.is_ipv4(), "one family");
    let mut p = Packet::default();
    if decode_roce(f, l3, &payload, &mut p).is_err() || f.len() > MAX_ROUND_TRIP {
        return;
    }
    let mut g = Vec::new();
    encode_roce(&addr, &p, &mut g);
    let again = classify(&g).expect("a re-encoded frame classifies");
    let Kind::Roce { addr: addr2, l3: l3g, payload: payload_g } = again.kind else { panic!("a re-encoded frame is RoCE") };
    assert_eq!(addr2, addr, "the same addresses");
    let mut q = Packet::default();
    decode_roce(&g, l3g, &payload_g, &mut q).expect("a re-encoded frame decodes");
    let canonical_pad = ((4 - p.payload.len() % 4) % 4) as u8;
    // A UD packet's GRH area is the IP header it came with (ID, checksum, flow label and
    // all), so only the re-encoding's own compares with the re-encoding.
    assert_eq!(q, Packet { bth: Bth { pad: canonical_pad, ..p.bth }, grh: q.grh, ..p.clone() }, "the same packet");
    if p.deth.is_some() {
        let v6 = f[l3] >> 4 == 6;
        let (at, n) = if v6 { (0, 40) } else { (20, 20) };
        assert_eq!((&p.grh.0[..at], &p.grh.0[at..]), (&[0u8; 20][..at], &f[l3..l3 + n]), "the GRH area is the frame's IP header");
    }
    let mut h = Vec::new();
    encode_roce(&addr2, &q, &mut h);
    assert_eq!(h, g, "decode + encode is a fixed point");
    same_but_unkept(f, payload.start, &g, payload_g.start, p.payload.len(), canonical_pad);
}

/// A received RoCE frame `f` and its re-encoding `g` (UDP payloads at `fb` and `gb`)
/// agree byte for byte except in what the decoder does not keep: Ethernet padding; the
/// IPv4 header length and options, total length (it follows), identification, flags and
/// fragment offset, header checksum; the IPv6 flow label; the UDP checksum; BTH MigReq,
/// pad count and reserved bits; the pad bytes; the ICRC.
fn same_but_unkept(f: &[u8], fb: usize, g: &[u8], gb: usize, payload_len: usize, g_pad: u8) {
    assert_eq!(f[..ETH_HLEN], g[..ETH_HLEN], "Ethernet header");
    let (fi, gi) = (&f[ETH_HLEN..], &g[ETH_HLEN..]);
    if u16::from_be_bytes([f[12], f[13]]) == ETHERTYPE_IPV4 {
        assert_eq!((fi[1], &fi[8..10], &fi[12..20]), (gi[1], &gi[8..10], &gi[12..20]), "IPv4 TOS, TTL, protocol, addresses");
    } else {
        assert_eq!((fi[0], fi[1] >> 4, &fi[4..40]), (gi[0], gi[1] >> 4, &gi[4..40]), "IPv6 version, class, lengths, addresses");
    }
    assert_eq!(f[fb - 8..fb - 2], g[gb - 8..gb - 2], "UDP ports and length");
    let g_body = &g[gb..g.len() - ICRC_LEN];
    let n = g_body.len() - usize::from(g_pad);
    assert!(n >= payload_len);
    let f_body = &f[fb..fb + n];
    for (i, (a, b)) in f_body.iter().zip(&g_body[..n]).enumerate() {
        let keep = match i {
            1 => 0x8f, // solicited, transport version
            4 => 0x00, // reserved
            8 => 0x80, // AckReq
            _ => 0xff,
        };
        assert_eq!(a & keep, b & keep, "RoCE byte {i}");
    }
}

// ---------------------------------------------------------------------------------------
// (b) The receive path.

/// A posted Ethernet receive buffer (descriptor i of the ring holds buffer i).
#[derive(Clone, Copy)]
struct RxBuf {
    addr: u64,
    size: u16,
}

struct Harness {
    ram: SharedMemory,
    mem: DmaMaps,
    d: EngineRunner,
    stats: Arc<Stats>,
    wire: Arc<RecordingWire>,
    port: RxPort<'static>,
    pkt: Packet,
    /// RAM as the setup left it.
    before: Vec<u8>,
    /// The posted receive buffers, by descriptor index.
    bufs: Vec<RxBuf>,
    /// What each completed descriptor holds (index, frame), for the final check.
    placed: Vec<(u16, usize)>,
}

fn tables() -> Tables {
    layout::tables(128)
}

impl Harness {
    fn new(cfg: u8) -> Option<Harness> {
        let (ram, fd) = test_ram(RAM).ok()?;
        let mut mem = DmaMaps::default();
        mem.map(RAM_BASE, RAM, Some(fd), 0).ok()?;
        let stats = Arc::new(Stats::default());
        let shared = Shared {
            irqs: Arc::new(Interrupts::new(4)),
            stats: stats.clone(),
            last_error: Default::default(),
            fatal: Default::default(),
            clock: Clock::manual(),
        };
        let mut e = Engine::new("fuzz-frame".into(), shared);
        let wire = Arc::new(RecordingWire::new(LOCAL, WIRE_KEEP));
        e.set_wire(wire.clone());
        let mut d = EngineRunner::new(e, None);
        d.set_test_hooks(false);
        let eth = d.eth_shared().clone();
        eth.reset_config(mac_of_ipv4(LOCAL));
        eth.set_mtu([1500, 9000, 1024, 68][usize::from(cfg >> 1 & 3)]);
        eth.set_promisc(cfg & 1 == 1);
        eth.set_link(true);
        let port = RxPort { mac: eth.mac(), ip: LOCAL, gids: None, promisc: eth.promisc(), max_frame: eth.max_frame() };
        let mut h = Harness { ram, mem, d, stats, wire, port, pkt: Packet::default(), before: Vec::new(), bufs: Vec::new(), placed: Vec::new() };
        h.setup(cfg)?;
        h.before = h.snapshot();
        Some(h)
    }

    fn event(&mut self, ev: Event) {
        self.d.handle(&self.mem, ev);
    }

    fn cmd(&mut self, op: u32, index: u32) -> u32 {
        let (reply, rx) = rnic_emu_core::rnic::verbs::call::channel();
        self.event(Event::Command { op, index, tables: tables(), reply });
        rx.try_recv().unwrap_or(CMD_ERR_FATAL)
    }

    fn put<T: ByteValued>(&self, off: u64, v: &T) {
        let _ = self.ram.write(off, v.as_slice());
    }

    fn run(&mut self) {
        for _ in 0..MAX_PASSES {
            if !self.d.pass(&self.mem) {
                break;
            }
        }
    }

    /// The QP, CQ, MR, RECVs, outstanding WRITE and READ, and the Ethernet receive ring.
    fn setup(&mut self, cfg: u8) -> Option<()> {
        let (reply, _rx) = rnic_emu_core::rnic::verbs::call::channel();
        self.event(Event::DmaCtrl { enabled: true, int_enabled: true, db_page: false, reply });
        self.put(CQ_TABLE + 32, &CqCtx { ring_addr: RAM_BASE + CQ_RING, log_size: CQ_LOG, ..Default::default() });
        let pages = MR_LEN >> 12;
        for i in 0..pages {
            let _ = self.ram.write(MTT + i * 8, &(RAM_BASE + MR_DATA + i * 4096).to_le_bytes());
        }
        self.put(
            MR_TABLE + 32,
            &MrCtx { iova: MR_VA, length: MR_LEN, npages: pages as u32, access: 7, key: MR_KEY as u8, page_shift: 12, ..Default::default() },
        );
        let mut qp = QpCtx {
            state: QPS_INIT,
            sq_log_size: RING_LOG,
            rq_log_size: RING_LOG,
            sq_log_stride: 6,
            rq_log_stride: 6,
            access: 7,
            rnr_retry: 7,
            send_cqn: 1,
            recv_cqn: 1,
            sq_addr: RAM_BASE + SQ,
            rq_addr: RAM_BASE + RQ,
            ..Default::default()
        };
        let mut ok = self.cmd(CMD_CREATE_CQ, 1) == CMD_OK && self.cmd(CMD_REG_MR, 1) == CMD_OK;
        for state in [QPS_INIT, QPS_RTR, QPS_RTS] {
            (qp.state, qp.dest_qpn, qp.dest_ip, qp.rq_psn, qp.sq_psn, qp.path_mtu, qp.retry_cnt) = (state, PEER_QPN, u32::from(PEER), RQ_PSN, SQ_PSN, 10, 7);
            self.put(QP_TABLE + u64::from(QPN) * 64, &qp);
            ok &= self.cmd(CMD_MODIFY_QP, QPN) == CMD_OK;
        }
        if !ok {
            return None;
        }
        // RECVs of 4 KiB each in the MR's first half; a WRITE of 64 bytes and a READ into
        // the second half outstanding.
        let wqe = |opcode, index: u16, recv, remote_addr, len, local: u64| {
            let hdr = WqeHeader { opcode, flags: 1, num_sge: 1, wr_id: WrId { gen: 0, recv, index }.encode(), remote_addr, rkey: 0x99, ..Default::default() };
            let sge = Sge { addr: MR_VA + local, length: len, lkey: MR_KEY };
            [hdr.as_slice(), sge.as_slice()].concat()
        };
        let recvs = 1u16 << RING_LOG;
        for i in 0..recvs {
            let _ = self.ram.write(RQ + ring::slot_offset(i, RING_LOG, 6), &wqe(WQE_OP_RECV, i, true, 0, 4096, u64::from(i) * 4096));
        }
        self.event(Event::RqDoorbell { qpn: QPN, pi: recvs });
        let _ = self.ram.write(SQ + ring::slot_offset(0, RING_LOG, 6), &wqe(WQE_OP_RDMA_WRITE, 0, false, 0x5000, 64, MR_LEN / 2));
        let _ = self.ram.write(SQ + ring::slot_offset(1, RING_LOG, 6), &wqe(WQE_OP_RDMA_READ, 1, false, 0x6000, READ_LEN, MR_LEN / 2 + 4096));
        self.event(Event::SqDoorbell { qpn: QPN, pi: 2 });
        self.run();
        // The Ethernet receive ring and its buffers.
        if cfg & 0x80 == 0 {
            let (reply, _rx) = rnic_emu_core::rnic::verbs::call::channel();
            self.event(Event::EthCtrl { ctrl: CTRL_RX_EN, tx: RingCfg::default(), rx: RingCfg { base: RAM_BASE + RXQ, log2: RXQ_LOG }, reply });
        }
        let n = usize::from(cfg >> 3 & 7);
        for i in 0..n {
            let odd = cfg & 0x40 != 0 && i % 2 == 1;
            let size = if odd { 256 } else { RX_BUF as u16 };
            // With odd buffers, the seventh is not mapped guest memory.
            let at = if cfg & 0x40 != 0 && i == 6 { RAM_BASE + RAM + 0x10_0000 } else { RAM_BASE + RX_BUFS + i as u64 * RX_BUF };
            let b = RxBuf { addr: at, size };
            self.put(RXQ + i as u64 * 16, &EthDesc { addr: b.addr, len: b.size, ..Default::default() });
            self.bufs.push(b);
        }
        self.event(Event::EthRxDoorbell { pi: n as u16 });
        Some(())
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut v = vec![0u8; RAM as usize];
        let _ = self.ram.read(0, &mut v);
        v
    }

    fn counters(&self) -> Vec<u64> {
        self.stats.snapshot().into_iter().map(|(_, v)| v).collect()
    }

    fn desc(&self, idx: u16) -> EthDesc {
        let mut d = EthDesc::default();
        let entry = u64::from(idx) & ((1 << RXQ_LOG) - 1);
        let _ = self.ram.read(RXQ + entry * 16, d.as_mut_slice());
        d
    }

    /// One frame from the segment (`from_wire`) or turned around in the port.
    fn receive(&mut self, f: &[u8], from_wire: bool) {
        let before = self.counters();
        let ci = self.d.eth_shared().rx_ci();
        let sent = self.wire.sent().len();
        let sorted = sort(f, &self.port, from_wire, &mut self.pkt);
        if let Some(mac) = sorted.learn {
            assert!(!is_group(&mac) && mac != self.port.mac && mac[..] == f[6..12], "learned only a peer's unicast source");
        }
        let verdict = sorted.verdict;
        match &verdict {
            Verdict::Roce(src) => self.d.on_packet(&self.mem, *src, &self.pkt),
            Verdict::Frame => self.d.on_frame(&self.mem, f),
            Verdict::Dropped(d) => d.count(&self.stats),
        }
        assert!(!self.d.is_fatal(), "the engine failed (contained panic) on {verdict:?}");
        let after = self.counters();
        let delta = |c: Counter| after[c as usize] - before[c as usize];
        let moved: Vec<&str> = COUNTERS.iter().zip(before.iter().zip(&after)).filter(|(_, (b, a))| a != b).map(|((n, _), _)| *n).collect();
        let ci_now = self.d.eth_shared().rx_ci();
        match &verdict {
            Verdict::Dropped(d) => {
                let mut expect = before.clone();
                d.counters().iter().for_each(|c| expect[*c as usize] += 1);
                assert!(after == expect, "{d:?} counts what it names once, nothing else: {moved:?}");
                assert_eq!(ci_now, ci, "a drop places nothing");
                assert_eq!(self.wire.sent().len(), sent, "a drop sends nothing");
            }
            Verdict::Frame => {
                let allowed = [Counter::EthRxFrames, Counter::EthRxBytes, Counter::EthRxNoBuffer, Counter::DmaErrors, Counter::Interrupts];
                assert!(moved.iter().all(|n| allowed.iter().any(|c| COUNTERS[*c as usize].0 == *n)), "a netdev frame moved {moved:?}");
                let placed = delta(Counter::EthRxFrames);
                assert_eq!(placed + delta(Counter::EthRxNoBuffer), 1, "placed or no buffer: {moved:?}");
                if placed == 1 {
                    assert_eq!(delta(Counter::EthRxBytes), f.len() as u64);
                    assert_eq!(ci_now, ci.wrapping_add(1));
                    let d = self.desc(ci);
                    assert_eq!((usize::from(d.len), d.flags), (f.len(), DESC_DONE), "the descriptor says what it holds");
                    let mut got = vec![0u8; f.len()];
                    let _ = self.ram.read(d.addr - RAM_BASE, &mut got);
                    assert!(got == f, "placed byte for byte");
                    self.placed.push((ci, f.len()));
                } else if ci_now != ci {
                    let d = self.desc(ci);
                    assert_eq!((d.len, d.flags), (0, DESC_DONE | DESC_ERR), "a buffer too small or not mapped is handed back empty");
                    self.placed.push((ci, 0));
                }
            }
            Verdict::Roce(_) => {
                assert_eq!(delta(Counter::PktsReceived) + delta(Counter::PktsDropped), 1, "the engine took or dropped it: {moved:?}");
                let eth =
                    [Counter::EthRxFrames, Counter::EthRxErrors, Counter::EthRxNoBuffer, Counter::EthRxFiltered, Counter::IcrcErrors, Counter::EthTxFrames];
                assert!(eth.iter().all(|c| delta(*c) == 0), "the Ethernet port untouched: {moved:?}");
                assert_eq!(ci_now, ci);
            }
        }
    }

    /// The engine runs; then RAM outside what the device may write is as it was.
    fn finish(mut self) {
        self.run();
        assert!(!self.d.is_fatal(), "the engine failed (contained panic)");
        let now = self.snapshot();
        // What the device may write, as (offset, length) in RAM; everything between must
        // be as it was (compared a gap at a time): the QP's context (state and indices
        // written back), the CQ ring, the MR, each descriptor's len and flags, and the
        // part of each receive buffer a frame was placed in.
        let mut may = vec![(QP_TABLE + u64::from(QPN) * 64, 64), (CQ_RING, 32 << CQ_LOG), (MR_DATA, MR_LEN)];
        may.extend((0..1u64 << RXQ_LOG).map(|i| (RXQ + i * 16 + 8, 3)));
        for &(idx, len) in &self.placed {
            let b = self.bufs[usize::from(idx)];
            assert!(len <= usize::from(b.size), "within the buffer");
            if len > 0 {
                may.push((b.addr - RAM_BASE, len as u64));
            }
        }
        may.sort_unstable();
        let mut at = 0usize;
        for (start, len) in may.into_iter().chain([(RAM, 0)]) {
            let start = start as usize;
            if start > at && now[at..start] != self.before[at..start] {
                let off = (at..start).find(|&i| now[i] != self.before[i]).unwrap_or(at);
                panic!("guest RAM at {off:#x} (bus {:#x}) changed outside the posted buffers", RAM_BASE + off as u64);
            }
            at = at.max(start + len as usize);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Seeds: frames as the unit tests build them.

/// The addresses of a RoCE frame from [`PEER`] to [`LOCAL`].
fn peer_addr() -> RoceAddr {
    RoceAddr {
        dst_mac: mac_of_ipv4(LOCAL),
        src_mac: mac_of_ipv4(PEER),
        src_ip: IpAddr::V4(PEER),
        dst_ip: IpAddr::V4(LOCAL),
        src_port: 0xc123,
        tclass: 0,
        ttl: DEFAULT_TTL,
    }
}

/// The frame of `pkt` with the addresses of [`peer_addr`] as `edit` changes them.
fn roce_with(pkt: &Packet, edit: impl FnOnce(&mut RoceAddr)) -> Vec<u8> {
    let mut a = peer_addr();
    edit(&mut a);
    let mut f = Vec::new();
    encode_roce(&a, pkt, &mut f);
    f
}

/// A RoCE frame from [`PEER`] to [`LOCAL`] (IPv4, or IPv6 with their mapped addresses).
pub fn roce(pkt: &Packet, v6: bool) -> Vec<u8> {
    roce_with(pkt, |a| {
        if v6 {
            (a.src_ip, a.dst_ip) = (IpAddr::V6(PEER.to_ipv6_mapped()), IpAddr::V6(LOCAL.to_ipv6_mapped()));
        }
    })
}

/// The requests and responses the harness's QP takes: a SEND and a WRITE into its MR and
/// a READ of it (PSNs from [`RQ_PSN`]), the ACK of its WRITE and the response to its READ.
pub fn seed_packets() -> Vec<Packet> {
    let bth = |opcode, psn| Bth { opcode, pkey: 0xffff, dest_qp: QPN, psn, ack_req: true, ..Default::default() };
    vec![
        Packet { bth: bth(op::SEND_ONLY, RQ_PSN), payload: vec![0x5e; 100], ..Default::default() },
        Packet {
            bth: bth(op::WRITE_ONLY, RQ_PSN + 1),
            reth: Some(Reth { va: MR_VA + 0x1_0000, rkey: MR_KEY, len: 64 }),
            payload: vec![0x77; 64],
            ..Default::default()
        },
        Packet { bth: bth(op::READ_REQUEST, RQ_PSN + 2), reth: Some(Reth { va: MR_VA, rkey: MR_KEY, len: 128 }), ..Default::default() },
        Packet { bth: bth(op::ACK, SQ_PSN), aeth: Some(Aeth { syndrome: syndrome::ACK, msn: 1 }), ..Default::default() },
        Packet {
            bth: bth(op::READ_RESPONSE_ONLY, SQ_PSN + 1),
            aeth: Some(Aeth { syndrome: syndrome::ACK, msn: 2 }),
            payload: vec![0xad; READ_LEN as usize],
            ..Default::default()
        },
        // A UD SEND with immediate (minor 16) to the same QP: its DETH, dropped by an RC QP.
        Packet {
            bth: Bth { ack_req: false, ..bth(op::UD_SEND_ONLY_IMM, 9) },
            deth: Some(Deth { qkey: 0x1111, src_qp: 3 }),
            imm: Some(5),
            payload: vec![0x3d; 61],
            ..Default::default()
        },
    ]
}

/// An input: the configuration byte, then each frame with its prefix.
pub fn input(cfg: u8, frames: &[(Vec<u8>, bool)]) -> Vec<u8> {
    let mut out = vec![cfg];
    for (f, hairpin) in frames {
        let prefix = (f.len() as u16 & LEN_MASK) | if *hairpin { HAIRPIN } else { 0 };
        out.extend_from_slice(&prefix.to_le_bytes());
        out.extend_from_slice(f);
    }
    out
}

/// Rewrites the IPv4 header checksum of a frame after an edit of its header.
fn fix_ipv4_sum(f: &mut [u8]) {
    f[24..26].fill(0);
    let sum = f[14..34].chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum::<u32>();
    let sum = !(((sum & 0xffff) + (sum >> 16)) as u16);
    f[24..26].copy_from_slice(&sum.to_be_bytes());
}

/// The one's-complement sum of `data` as 16-bit words, folded, added to `sum`.
fn ones(data: &[u8], sum: u32) -> u16 {
    let mut sum = data.chunks(2).fold(sum, |s, c| s + u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])));
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// Puts a UDP checksum into an IPv4 RoCE frame (the device sends 0; another sender may not).
fn with_udp_sum(mut f: Vec<u8>) -> Vec<u8> {
    let ulen = f.len() - 34;
    let pseudo = u32::from(ones(&f[26..34], 0)) + ulen as u32 + 17;
    let sum = !ones(&f[34..], pseudo);
    f[40..42].copy_from_slice(&sum.to_be_bytes());
    f
}

/// A frame of `ethertype` with `body` (ARP, unknown types).
fn raw(dst: [u8; 6], ethertype: u16, body: &[u8]) -> Vec<u8> {
    [&dst[..], &mac_of_ipv4(PEER)[..], &ethertype.to_be_bytes(), body].concat()
}

/// Seed inputs: RoCE over IPv4 (every packet the QP takes; 4 receive buffers) and IPv6
/// (the netdev's: the RNIC's address is IPv4); ARP and other ethertypes; fragments;
/// runts, frames cut short or corrupted, oversized; RoCE from impossible sources and
/// turned around with the port's own; another MAC, promiscuous; the ring off.
pub fn seeds() -> Vec<Vec<u8>> {
    let pkts = seed_packets();
    let mut v4: Vec<(Vec<u8>, bool)> = pkts.iter().map(|p| (roce(p, false), false)).collect();
    v4[0].0 = with_udp_sum(v4[0].0.clone()); // a UDP checksum that checks
    let v6: Vec<(Vec<u8>, bool)> = pkts.iter().map(|p| (roce(p, true), false)).collect();
    let send = roce(&pkts[0], false);
    let mut arp_body = vec![0, 1, 8, 0, 6, 4, 0, 1];
    arp_body.extend_from_slice(&mac_of_ipv4(PEER));
    arp_body.extend_from_slice(&PEER.octets());
    arp_body.extend_from_slice(&[0; 6]);
    arp_body.extend_from_slice(&LOCAL.octets());
    // An IPv6 packet to the all-nodes group (ICMPv6, 8 bytes).
    let mut ipv6_icmp = vec![0x60, 0, 0, 0, 0, 8, 58, 255];
    ipv6_icmp.extend_from_slice(&PEER.to_ipv6_mapped().octets());
    ipv6_icmp.extend_from_slice(&"ff02::1".parse::<std::net::Ipv6Addr>().map_or([0; 16], |a| a.octets()));
    ipv6_icmp.extend_from_slice(&[128, 0, 0, 0, 0, 0, 0, 1]);
    let others = vec![
        (raw([0xff; 6], ETHERTYPE_ARP, &arp_body), false),
        (raw(mac_of_ipv4(LOCAL), ETHERTYPE_ARP, &arp_body), false),
        (raw(mac_of_ipv4(LOCAL), 0x88b5, &[1; 46]), false),
        (raw(mac_of_ipv4(LOCAL), 0x0030, &[2; 46]), false),
        (raw([0x33, 0x33, 0, 0, 0, 1], 0x86dd, &ipv6_icmp), false),
        (raw(mac_of_ipv4(LOCAL), 0x88b6, &[4; 1000]), false),
    ];
    let mut first = send.clone();
    first[20] |= 0x20;
    fix_ipv4_sum(&mut first);
    let mut later = send.clone();
    later[20..22].copy_from_slice(&0x0010u16.to_be_bytes());
    fix_ipv4_sum(&mut later);
    let mut v6_frag = roce(&pkts[0], true)[..54].to_vec();
    v6_frag[20] = 44;
    let plen = u16::from_be_bytes([v6_frag[18], v6_frag[19]]) + 8;
    v6_frag[18..20].copy_from_slice(&plen.to_be_bytes());
    v6_frag.extend_from_slice(&[17, 0, 0, 1, 0, 0, 0, 9]);
    v6_frag.extend_from_slice(&roce(&pkts[0], true)[54..]);
    let fragments = vec![(first, false), (later, false), (v6_frag, false)];
    let mut bad_icrc = send.clone();
    *bad_icrc.last_mut().unwrap_or(&mut 0) ^= 1;
    let mut corrupt = send.clone();
    corrupt[14 + 12] ^= 4;
    let mut udp_len = send.clone();
    udp_len[14 + 25] ^= 1;
    let mut big = pkts[0].clone();
    big.payload = vec![3; 1500];
    // UDP to 4791 too short for a BTH and an ICRC.
    let mut short = send[..42 + 12].to_vec();
    short[16..18].copy_from_slice(&40u16.to_be_bytes());
    short[38..40].copy_from_slice(&20u16.to_be_bytes());
    fix_ipv4_sum(&mut short);
    let bad_sum = {
        let mut f = with_udp_sum(send.clone());
        f[41] ^= 1;
        f
    };
    let malformed = vec![
        (short, false),
        (bad_sum, false),
        (send[..0].to_vec(), false),
        (send[..13].to_vec(), false),
        (send[..14].to_vec(), false),
        (send[..40].to_vec(), false),
        (send[..send.len() - 4].to_vec(), false),
        (corrupt, false),
        (udp_len, false),
        (bad_icrc, false),
        (roce(&big, false), false),
    ];
    let ip = |a, b, c, d| IpAddr::V4(Ipv4Addr::new(a, b, c, d));
    let sources: Vec<(Vec<u8>, bool)> = [
        roce_with(&pkts[0], |a| a.src_mac[0] |= 1),
        roce_with(&pkts[0], |a| a.src_mac = mac_of_ipv4(LOCAL)),
        roce_with(&pkts[0], |a| a.src_ip = ip(224, 0, 0, 1)),
        roce_with(&pkts[0], |a| a.src_ip = ip(255, 255, 255, 255)),
        roce_with(&pkts[0], |a| a.src_ip = ip(0, 0, 0, 0)),
        roce_with(&pkts[0], |a| a.src_ip = ip(127, 0, 0, 1)),
        roce_with(&pkts[0], |a| a.src_ip = IpAddr::V4(LOCAL)),
        roce_with(&pkts[0], |a| a.src_port = 0),
    ]
    .into_iter()
    .map(|f| (f, false))
    .collect();
    // The port's own packet to itself, turned around inside it (a QP of this RNIC
    // connected to another by its address): its own MAC and address are its source.
    let own = vec![(roce_with(&pkts[0], |a| (a.src_mac, a.src_ip) = (mac_of_ipv4(LOCAL), IpAddr::V4(LOCAL))), true)];
    let mut other_mac = send.clone();
    other_mac[5] = 9;
    let posted = |n: u8| n << 3;
    vec![
        input(posted(4), &v4),
        input(posted(4), &[v4.clone(), v4.clone()].concat()), // the requests again: duplicates
        input(posted(5), &v6),
        input(posted(7) | 0x40, &[others.clone(), others.clone()].concat()), // some too small, one not mapped, then none
        input(posted(2), &fragments),
        input(posted(2), &malformed),
        input(posted(1) | 2, &malformed), // MTU 9000
        input(posted(2), &sources),
        input(posted(1), &own),
        input(posted(2) | 1, &[(other_mac.clone(), false), (send.clone(), false)]), // promiscuous
        input(posted(2), &[(other_mac, false)]),
        input(0x80 | posted(3), &others), // the receive ring off
        input(posted(1) | 6, &others),    // MTU 68
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeds_reach_the_engine_and_the_netdev_and_pass_the_checks() {
        for s in seeds() {
            frame(&s);
        }
        // The first seed: every packet taken by the QP (a SEND placed, a WRITE, a READ
        // answered, the QP's WRITE acknowledged and its READ answered) but the UD SEND.
        let mut h = Harness::new(seeds()[0][0]).unwrap();
        for p in seed_packets() {
            h.receive(&roce(&p, false), true);
        }
        let stats = h.stats.clone();
        h.finish();
        assert_eq!(stats.get(Counter::PktsReceived), 5);
        assert_eq!(stats.get(Counter::PktsDropped), 1, "the UD SEND: not the RC QP's service");
        assert_eq!(stats.get(Counter::BytesSent), 100);
        assert_eq!(stats.get(Counter::BytesWritten), 64);
        assert!(stats.get(Counter::Cqes) >= 3, "the RECV, the WRITE and the READ completed: {}", stats.get(Counter::Cqes));
        // The netdev's seed with odd buffers (12 frames, the sixth of 1014 bytes): placed,
        // too small, not mapped, none left.
        let s = &seeds()[3];
        let mut h = Harness::new(s[0]).unwrap();
        for (f, from_wire) in records(&s[1..]) {
            h.receive(f, from_wire);
        }
        let stats = h.stats.clone();
        h.finish();
        let got = [Counter::EthRxFrames, Counter::EthRxNoBuffer, Counter::DmaErrors].map(|c| stats.get(c));
        assert_eq!(got, [5, 7, 1], "frames placed, dropped for no buffer (1 too small, 1 not mapped, 5 none left), DMA errors");
    }

    /// The seeds take every case of the receive path (docs/fabric.md "Frames").
    #[test]
    fn the_seeds_cover_every_verdict() {
        use rnic_emu_core::rnic::fabric::frame::{Dropped, FrameError};
        let mut seen = std::collections::BTreeSet::new();
        for s in seeds() {
            let h = Harness::new(s[0]).unwrap();
            for (f, from_wire) in records(&s[1..]) {
                let v = sort(f, &h.port, from_wire, &mut Packet::default()).verdict;
                seen.insert(match v {
                    Verdict::Roce(src) if src == LOCAL => "roce turned around".to_string(),
                    Verdict::Roce(_) => "roce".into(),
                    Verdict::Frame => "frame".into(),
                    Verdict::Dropped(Dropped::Malformed(FrameError::Runt(_))) => "runt".into(),
                    Verdict::Dropped(Dropped::Malformed(FrameError::BadIp(_))) => "bad ip".into(),
                    Verdict::Dropped(Dropped::Malformed(FrameError::BadUdp(why))) => format!("bad udp: {why}"),
                    Verdict::Dropped(Dropped::Malformed(FrameError::Fragment)) => "fragment".into(),
                    Verdict::Dropped(Dropped::Malformed(FrameError::Packet(_))) => "short".into(),
                    Verdict::Dropped(Dropped::Oversized { .. }) => "oversized".into(),
                    Verdict::Dropped(Dropped::Filtered) => "filtered".into(),
                    Verdict::Dropped(Dropped::BadSource(why)) => why.into(),
                    Verdict::Dropped(Dropped::Packet(e)) => format!("packet {}", e.to_string().split(':').next().unwrap_or("")),
                });
            }
        }
        let seen: Vec<&str> = seen.iter().map(|s| s.as_str()).collect();
        for case in [
            "roce",
            "roce turned around",
            "frame",
            "runt",
            "bad ip",
            "bad udp: length disagrees with the IP length",
            "bad udp: UDP checksum",
            "short",
            "fragment",
            "oversized",
            "filtered",
            "a group source MAC",
            "the port's own MAC, from the segment",
            "a multicast source address",
            "the broadcast source address",
            "an unspecified source address (0.0.0.0/8)",
            "a loopback source address",
            "the port's own address, from the segment",
            "UDP source port 0",
        ] {
            assert!(seen.contains(&case), "no seed is {case}: {seen:?}");
        }
        assert!(seen.iter().any(|s| s.starts_with("packet")), "a packet that does not decode: {seen:?}");
    }

    #[test]
    fn frames_survive_random_and_mutated_bytes() {
        for seed in 0..300u64 {
            let mut s = seeds()[seed as usize % seeds().len()].clone();
            let noise = super::super::smoke_bytes(seed, 8);
            for pair in noise.chunks(2) {
                let i = 1 + usize::from(pair[0]) * s.len() / 256 % (s.len() - 1).max(1);
                s[i] ^= pair[1] | 1;
            }
            frame(&s);
            frame(&super::super::smoke_bytes(seed, 600));
        }
    }
}
