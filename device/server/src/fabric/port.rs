//! A node's attachment to the fabric: its port on an L2 segment ([`super::segment`]:
//! multicast, VXLAN or TAP, one interface whatever the backend), fault injection per
//! direction (seeded, so failures reproduce) and optional capture of the frames as they
//! are on the segment. Sending builds whole Ethernet frames (RoCEv2 packets of the verbs
//! engine, frames of the netdev's transmit ring) in pooled buffers and queues them until
//! the node's event loop flushes them (`sendmmsg`, or a TAP device's writes); receiving
//! takes a batch (`recvmmsg`, or a TAP device's reads) from each of the segment's
//! descriptors when the loop sees one readable, takes the frame out of each datagram (the
//! segment checks and strips VXLAN's header and refuses strangers: dropped, counted), and
//! sorts every frame as a NIC's receive path does: malformed (dropped, counted), for
//! another MAC (filtered), RoCE for this port (decoded and checked into one reused packet
//! for the engine), or anything else for the netdev. The port owns no thread.
//! A `delay_us` fault never sleeps: a delayed frame waits in a bounded queue
//! ([`MAX_DELAYED`]) until its time, which the event loop's timer serves
//! ([`FabricPort::next_deadline`]; released by [`FabricPort::flush`]).

use super::batch::{Pool, RecvBatch, BATCH};
use super::pcap::PcapWriter;
use super::segment::{self, Segment, SegmentAddr};
use rnic_emu_core::contract::counters::{Counter, Stats};
use rnic_emu_core::platform::topology::{NodeFaults, WireFaults};
use rnic_emu_core::prng::Rng;
use rnic_emu_core::regs::rnic::eth;
use rnic_emu_core::rnic::eth::EthShared;
use rnic_emu_core::rnic::fabric::frame::{encode_roce, Mac, RoceAddr, ETHERTYPE_IPV6, ETH_HLEN};
use rnic_emu_core::rnic::fabric::packet::Packet;
use rnic_emu_core::rnic::verbs::transport::{Dest, Wire};
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};
use std::os::fd::RawFd;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Applies one direction's faults to a datagram: what to deliver, in order. The decisions
/// come from a generator seeded by the node's `seed` ([`rnic_emu_core::prng`]), so they
/// reproduce from the seed alone.
struct FaultState {
    cfg: WireFaults,
    rng: Rng,
    held: Option<Vec<u8>>,
}

impl FaultState {
    fn new(cfg: WireFaults, seed: u64) -> Self {
        FaultState { cfg, rng: Rng::new(seed), held: None }
    }

    /// No fault configured and nothing held back: datagrams pass untouched (the fast path
    /// takes no random numbers, exactly as `apply` would not).
    fn passes_all(&self) -> bool {
        let c = &self.cfg;
        self.held.is_none() && c.drop <= 0.0 && c.corrupt <= 0.0 && c.duplicate <= 0.0 && c.reorder <= 0.0
    }

    /// Appends what to deliver for `data` to `out`, in order.
    fn apply(&mut self, mut data: Vec<u8>, out: &mut Vec<Vec<u8>>) {
        if self.rng.chance(self.cfg.drop) {
            out.extend(self.held.take());
            return;
        }
        if self.rng.chance(self.cfg.corrupt) && !data.is_empty() {
            let i = self.rng.below(data.len() as u64) as usize;
            data[i] ^= 0x40;
        }
        if self.rng.chance(self.cfg.duplicate) {
            out.push(data.clone());
        }
        if self.held.is_none() && self.rng.chance(self.cfg.reorder) {
            self.held = Some(data);
            return;
        }
        out.push(data);
        out.extend(self.held.take());
    }
}

/// Transmit side: faults, the frames queued since the last flush, free buffers.
struct TxState {
    faults: FaultState,
    queue: Vec<(segment::Dest, Vec<u8>)>,
    pool: Pool,
    /// Scratch for the fault decisions of one frame.
    out: Vec<Vec<u8>>,
    /// Frames the delay fault holds: (when to send, frame, is RoCE), in order.
    delayed: VecDeque<(Instant, Vec<u8>, bool)>,
}

/// Receive side: faults, the batch buffers and the packet every RoCE frame decodes into.
struct RxState {
    faults: FaultState,
    batch: RecvBatch,
    pool: Pool,
    out: Vec<Vec<u8>>,
    pkt: Packet,
}

/// Frames queued before `send` flushes by itself (the event loop flushes after every
/// engine pass; this bounds what one long pass holds back).
const MAX_QUEUED: usize = 4 * BATCH;

/// Frames the `delay_us` fault holds at once; one more is dropped (`WIRE_DELAY_DROPS`).
pub const MAX_DELAYED: usize = 4096;

/// The largest frame the port takes from the segment: the largest MTU plus the Ethernet
/// header.
const MAX_FRAME: usize = eth::MAX_MTU as usize + ETH_HLEN;

/// What a received frame is for.
pub enum Rx<'a> {
    /// A RoCEv2 packet for this port, from the node at this address (IPv4, or IPv6 to an
    /// IPv6 GID of the port).
    Roce(IpAddr, &'a Packet),
    /// A frame for the netdev (ARP, IP, anything not RoCE for this port).
    Frame(&'a [u8]),
}

pub struct FabricPort {
    pub address: Ipv4Addr,
    /// The Ethernet port's settings the driver made (MAC, MTU, promiscuous).
    eth: Arc<EthShared>,
    segment: Segment,
    tx: Mutex<TxState>,
    rx: Mutex<RxState>,
    pcap: Option<Mutex<PcapWriter>>,
    stats: Arc<Stats>,
    /// Frames to this port's own MAC: turned around inside the port, as a NIC loops back
    /// frames to itself, and received on the next [`FabricPort::receive`].
    hairpin: Mutex<Vec<Vec<u8>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// UDP source port of a QP's packets: RoCEv2 leaves it to the sender for flow entropy;
/// one per destination QP, in the dynamic range (as rxe and real NICs do).
fn flow_port(dest_qp: u32) -> u16 {
    0xc000 | (dest_qp.wrapping_mul(0x9e37_79b9) >> 18) as u16
}

impl FabricPort {
    /// Joins `segment` as the port of the RNIC at `address`, with the Ethernet settings
    /// `eth` (the link is up from here on).
    pub fn bind(
        address: Ipv4Addr,
        segment: SegmentAddr,
        eth: Arc<EthShared>,
        faults: &NodeFaults,
        pcap: Option<(&Path, u64)>,
        stats: Arc<Stats>,
    ) -> std::io::Result<FabricPort> {
        let segment = Segment::join(&segment)?;
        let pcap = pcap.map(|(p, max)| PcapWriter::create(p, max)).transpose()?.map(Mutex::new);
        let tx =
            TxState { faults: FaultState::new(faults.tx, faults.seed), queue: Vec::new(), pool: Pool::default(), out: Vec::new(), delayed: VecDeque::new() };
        let rx = RxState {
            faults: FaultState::new(faults.rx, faults.seed ^ 0x5eed),
            batch: RecvBatch::default(),
            pool: Pool::default(),
            out: Vec::new(),
            pkt: Packet::default(),
        };
        eth.set_link(true);
        Ok(FabricPort { address, eth, segment, tx: Mutex::new(tx), rx: Mutex::new(rx), pcap, stats, hairpin: Mutex::new(Vec::new()) })
    }

    /// The segment's sockets (or device), for the event loop to wait on (readable: frames
    /// to receive).
    pub fn raw_fds(&self) -> Vec<RawFd> {
        self.segment.fds().to_vec()
    }

    /// This port's MAC now: the receive filter and the source of its RoCE frames.
    pub fn mac(&self) -> Mac {
        self.eth.mac()
    }

    /// Where the port is plugged in.
    pub fn segment(&self) -> &SegmentAddr {
        self.segment.addr()
    }

    /// The segment's counters (`<node>-segment` in the statistics).
    pub fn segment_counters(&self) -> impl Iterator<Item = (&'static str, u64)> {
        self.segment.counters().into_iter()
    }

    /// Changes the faults at run time (control socket).
    pub fn set_faults(&self, tx: Option<WireFaults>, rx: Option<WireFaults>) {
        if let Some(f) = tx {
            lock(&self.tx).faults.cfg = f;
        }
        if let Some(f) = rx {
            lock(&self.rx).faults.cfg = f;
        }
    }

    fn capture(&self, frame: &[u8]) {
        if let Some(p) = &self.pcap {
            match lock(p).frame(frame) {
                Ok(true) => {}
                Ok(false) => self.stats.inc(Counter::PcapDropped),
                Err(e) => {
                    self.stats.inc(Counter::PcapDropped);
                    rnic_emu_core::guest_warn!("pcap: {e}");
                }
            }
        }
    }

    /// Queues a RoCE packet for `dst` (through the transmit faults); it leaves with the
    /// next [`FabricPort::flush`] (a configured delay holds it longer, as a slow link). An
    /// IPv4 destination is sent from `dst.src` or the port's address; an IPv6 one from its
    /// `dst.src` (the engine always gives one; a destination without it is dropped).
    pub fn send(&self, dst: &Dest, pkt: &Packet) {
        let src_ip = match (dst.ip, dst.src) {
            (IpAddr::V4(_), None) => IpAddr::V4(self.address),
            (IpAddr::V4(_), Some(s @ IpAddr::V4(_))) | (IpAddr::V6(_), Some(s @ IpAddr::V6(_))) => s,
            (d, s) => {
                log::debug!("fabric: a packet to {d} from {s:?}: no source of its family; dropped");
                return;
            }
        };
        let addr = RoceAddr {
            dst_mac: dst.mac,
            src_mac: self.eth.mac(),
            src_ip,
            dst_ip: dst.ip,
            src_port: flow_port(pkt.bth.dest_qp),
            tclass: dst.tclass,
            ttl: dst.ttl,
        };
        let mut data = lock(&self.tx).pool.take();
        encode_roce(&addr, pkt, &mut data);
        self.queue_frame(data, true);
    }

    /// Queues a frame of the netdev's transmit ring (already checked by the device).
    pub fn send_frame(&self, frame: &[u8]) {
        let mut data = lock(&self.tx).pool.take();
        data.extend_from_slice(frame);
        self.queue_frame(data, false);
    }

    fn queue_frame(&self, data: Vec<u8>, roce: bool) {
        let mut tx = lock(&self.tx);
        let delay = tx.faults.cfg.delay_us;
        if delay > 0 || !tx.delayed.is_empty() {
            // Behind the frames already held (a wire keeps its order), never sleeping.
            if tx.delayed.len() >= MAX_DELAYED {
                self.stats.inc(Counter::WireDelayDrops);
                rnic_emu_core::guest_warn!("fabric port {}: {MAX_DELAYED} delayed frames held; frame dropped", self.address);
                tx.pool.put(data);
                return;
            }
            self.stats.inc(Counter::WireDelayed);
            let now = Instant::now();
            // delay_us is at most a second (WireFaults::validate); checked all the same.
            tx.delayed.push_back((now.checked_add(Duration::from_micros(delay)).unwrap_or(now), data, roce));
            return;
        }
        self.queue_now(&mut tx, data, roce);
    }

    /// When the earliest delayed frame is due (the event loop's timer wakes it then).
    pub fn next_deadline(&self) -> Option<Instant> {
        lock(&self.tx).delayed.front().map(|d| d.0)
    }

    /// Queues the delayed frames whose time has come.
    fn release_due(&self, tx: &mut TxState) {
        let now = Instant::now();
        while tx.delayed.front().is_some_and(|d| d.0 <= now) {
            if let Some((_, data, roce)) = tx.delayed.pop_front() {
                self.queue_now(tx, data, roce);
            }
        }
    }

    fn queue_now(&self, tx: &mut TxState, data: Vec<u8>, roce: bool) {
        let TxState { faults, queue, out, .. } = tx;
        if faults.passes_all() {
            out.push(data);
        } else {
            faults.apply(data, out);
        }
        for d in out.drain(..) {
            self.capture(&d);
            if roce {
                self.stats.inc(Counter::PktsSent);
                if d.get(12..14) == Some(&ETHERTYPE_IPV6.to_be_bytes()[..]) {
                    self.stats.inc(Counter::PktsSentIpv6);
                }
            }
            let mut dst = [0u8; 6];
            dst.copy_from_slice(&d[..6]);
            if dst == self.eth.mac() {
                lock(&self.hairpin).push(d);
                continue;
            }
            queue.push((self.segment.destination(&dst), d));
        }
        if queue.len() >= MAX_QUEUED {
            self.flush_locked(tx);
        }
    }

    /// Sends everything queued (`sendmmsg`, up to [`BATCH`] frames a call), delayed
    /// frames whose time has come included.
    pub fn flush(&self) {
        let mut tx = lock(&self.tx);
        self.release_due(&mut tx);
        if !tx.queue.is_empty() {
            self.flush_locked(&mut tx);
        }
    }

    fn flush_locked(&self, tx: &mut TxState) {
        let (sent, err) = self.segment.send(&tx.queue);
        if let Some(e) = err {
            // As a lossy link: the transport retransmits what did not leave.
            let (dst, _) = tx.queue[sent];
            log::debug!("fabric send to {dst}: {e}; {} frames dropped", tx.queue.len() - sent);
        }
        let TxState { queue, pool, .. } = tx;
        for (_, d) in queue.drain(..) {
            pool.put(d);
        }
    }

    /// Receives what the segment's sockets hold now, without waiting (one batch of at
    /// most [`BATCH`] frames from each), handing every accepted frame to `deliver`.
    /// Returns how many frames it took from the sockets.
    pub fn receive(&self, deliver: &mut dyn FnMut(Rx<'_>)) -> usize {
        let mut rx = lock(&self.rx);
        let RxState { faults, batch, pool, out, pkt } = &mut *rx;
        let turned = std::mem::take(&mut *lock(&self.hairpin));
        let mut total = turned.len();
        for d in turned {
            self.accept(None, &d, pkt, deliver);
            pool.put(d);
        }
        for &fd in self.segment.fds() {
            let n = match self.segment.recv(batch, fd) {
                Ok(n) => n,
                Err(e) => {
                    log::warn!("fabric receive: {e}");
                    continue;
                }
            };
            total += n;
            for i in 0..n {
                let Some((Some(from), datagram, truncated)) = batch.get(i) else { continue };
                let data = match self.segment.decap(from, datagram) {
                    Ok(Some(frame)) => frame,
                    Ok(None) => continue, // the group's copy of a frame this port sent
                    Err(e) => {
                        self.stats.inc(Counter::EthRxErrors);
                        rnic_emu_core::guest_warn!("fabric: dropped a datagram from {from}: {e}");
                        continue;
                    }
                };
                if truncated || data.len() > MAX_FRAME {
                    self.stats.inc(Counter::EthRxErrors);
                    rnic_emu_core::guest_warn!("fabric: dropped a frame from {from} longer than {MAX_FRAME} bytes");
                    continue;
                }
                if faults.passes_all() {
                    self.accept(Some(from), data, pkt, deliver);
                    continue;
                }
                let mut copy = pool.take();
                copy.extend_from_slice(data);
                faults.apply(copy, out);
                for d in out.drain(..) {
                    self.accept(Some(from), &d, pkt, deliver);
                    pool.put(d);
                }
            }
        }
        total
    }

    /// Sorts one received frame (`from`: the member that sent it; None: turned around in
    /// this port) as [`rnic_emu_core::rnic::fabric::frame::sort`] says (docs/fabric.md
    /// "Frames"), learns its source MAC, and hands it on or counts and logs its drop
    /// (rate-limited; a frame for another MAC, which a hub segment delivers to every
    /// member, only at debug level). What the engine queued in answer to a RoCE packet
    /// (an ACK, a READ response) leaves right away: the peer's window must not wait for
    /// the rest of the batch.
    fn accept(&self, from: Option<SocketAddrV4>, data: &[u8], pkt: &mut Packet, deliver: &mut dyn FnMut(Rx<'_>)) {
        use rnic_emu_core::rnic::fabric::frame::{self, Dropped, RxPort, Verdict};
        if from.is_some() {
            self.capture(data); // a turned-around frame was captured as it left
        }
        let port = RxPort { mac: self.eth.mac(), ip: self.address, gids: Some(&self.eth.gids), promisc: self.eth.promisc(), max_frame: self.eth.max_frame() };
        let sorted = frame::sort(data, &port, from.is_some(), pkt);
        if let (Some(from), Some(src)) = (from, sorted.learn) {
            self.segment.learn(&src, from);
        }
        match sorted.verdict {
            Verdict::Roce(src) => {
                deliver(Rx::Roce(src, pkt));
                self.flush();
            }
            Verdict::Frame => deliver(Rx::Frame(data)),
            Verdict::Dropped(d) => {
                d.count(&self.stats);
                let src: &dyn std::fmt::Display = match &from {
                    Some(f) => f,
                    None => &"this port",
                };
                if d == Dropped::Filtered {
                    log::debug!("fabric: dropped a frame from {src}: {d}");
                } else {
                    rnic_emu_core::guest_warn!("fabric: dropped a frame from {src}: {d}");
                }
            }
        }
    }
}

impl Wire for FabricPort {
    fn address(&self) -> Ipv4Addr {
        self.address
    }

    fn send(&self, dst: &Dest, pkt: &Packet) {
        FabricPort::send(self, dst, pkt)
    }

    fn send_frame(&self, frame: &[u8]) {
        FabricPort::send_frame(self, frame)
    }
}

/// Parses a control request's fault settings (`key=value ...`: drop, duplicate, reorder,
/// corrupt, delay_us), checked like the topology file's.
pub fn parse_faults<'a>(words: impl Iterator<Item = &'a str>) -> Result<WireFaults, String> {
    let mut f = WireFaults::default();
    for kv in words {
        let Some((k, v)) = kv.split_once('=') else { return Err(format!("expected key=value, got '{kv}'")) };
        let prob = v.parse::<f64>();
        match (k, prob) {
            ("drop", Ok(p)) => f.drop = p,
            ("duplicate", Ok(p)) => f.duplicate = p,
            ("reorder", Ok(p)) => f.reorder = p,
            ("corrupt", Ok(p)) => f.corrupt = p,
            ("delay_us", _) => f.delay_us = v.parse().map_err(|_| format!("bad delay_us '{v}'"))?,
            _ => return Err(format!("unknown or bad fault '{kv}'")),
        }
    }
    f.validate()?;
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic_emu_core::rnic::fabric::frame::{classify, decode_roce, mac_of_ipv4, Kind, DEFAULT_TTL};
    use rnic_emu_core::rnic::fabric::packet::{op, Bth};

    /// Two ports on a segment of their own.
    fn two_ports(tx: WireFaults, rx: WireFaults, seed: u64) -> (FabricPort, FabricPort, Arc<Stats>, std::net::UdpSocket) {
        let (seg, hold) = super::super::segment::reserve(Ipv4Addr::LOCALHOST).unwrap();
        let (a, b, stats) = ports_on([seg.into(), seg.into()], tx, rx, seed);
        (a, b, stats, hold)
    }

    /// Two ports (10.0.0.1 on `segs[0]`, 10.0.0.2 on `segs[1]`) sharing one statistics block.
    fn ports_on(segs: [SegmentAddr; 2], tx: WireFaults, rx: WireFaults, seed: u64) -> (FabricPort, FabricPort, Arc<Stats>) {
        let stats = Arc::new(Stats::default());
        let eth = |ip: Ipv4Addr| {
            let e = Arc::new(EthShared::default());
            e.reset_config(mac_of_ipv4(ip));
            e.set_mtu(9000);
            e
        };
        let [sa, sb] = segs;
        let a = FabricPort::bind(
            Ipv4Addr::new(10, 0, 0, 1),
            sa,
            eth(Ipv4Addr::new(10, 0, 0, 1)),
            &NodeFaults { tx, rx: WireFaults::default(), seed, pcie: Vec::new() },
            None,
            stats.clone(),
        )
        .unwrap();
        let b = FabricPort::bind(
            Ipv4Addr::new(10, 0, 0, 2),
            sb,
            eth(Ipv4Addr::new(10, 0, 0, 2)),
            &NodeFaults { tx: WireFaults::default(), rx, seed, pcie: Vec::new() },
            None,
            stats.clone(),
        )
        .unwrap();
        (a, b, stats)
    }

    fn packet(psn: u32) -> Packet {
        Packet { bth: Bth { opcode: op::SEND_ONLY, dest_qp: 3, psn, ..Default::default() }, payload: vec![psn as u8; 1000], ..Default::default() }
    }

    /// Everything `b` receives within a second of the last frame: RoCE packets and frames.
    fn drain(b: &FabricPort) -> (Vec<Packet>, Vec<Vec<u8>>) {
        let (mut got, mut frames) = (Vec::new(), Vec::new());
        let mut quiet = std::time::Instant::now();
        while quiet.elapsed() < Duration::from_secs(1) {
            let n = b.receive(&mut |rx| match rx {
                Rx::Roce(_, p) => got.push(p.clone()),
                Rx::Frame(f) => frames.push(f.to_vec()),
            });
            if n > 0 {
                quiet = std::time::Instant::now();
            }
        }
        (got, frames)
    }

    fn count(stats: &Stats, c: Counter) -> u64 {
        stats.get(c)
    }

    #[test]
    fn batched_round_trip_keeps_order_and_the_seeded_faults() {
        let tx = WireFaults { drop: 0.1, duplicate: 0.05, reorder: 0.05, corrupt: 0.0, delay_us: 0 };
        let rx = WireFaults { drop: 0.05, corrupt: 0.05, ..WireFaults::default() };
        let (a, b, stats, _hold) = two_ports(tx, rx, 9);
        for psn in 0..300 {
            a.send(&Dest::of_ip(b.address), &packet(psn));
        }
        a.flush();
        let got: Vec<u32> = drain(&b).0.iter().map(|p| p.bth.psn).collect();
        // The same decisions, taken on the frames one by one without the port.
        let (mut ftx, mut frx) = (FaultState::new(tx, 9), FaultState::new(rx, 9 ^ 0x5eed));
        let (mut sent, mut delivered) = (Vec::new(), Vec::new());
        for psn in 0..300 {
            let addr = RoceAddr {
                dst_mac: b.mac(),
                src_mac: a.mac(),
                src_ip: IpAddr::V4(a.address),
                dst_ip: IpAddr::V4(b.address),
                src_port: flow_port(3),
                tclass: 0,
                ttl: DEFAULT_TTL,
            };
            let mut f = Vec::new();
            encode_roce(&addr, &packet(psn), &mut f);
            ftx.apply(f, &mut sent);
        }
        sent.into_iter().for_each(|d| frx.apply(d, &mut delivered));
        let decode = |f: &Vec<u8>| {
            let c = classify(f).ok()?;
            let Kind::Roce { l3, payload, .. } = c.kind else { return None };
            let mut p = Packet::default();
            decode_roce(f, l3, &payload, &mut p).ok().map(|()| p.bth.psn)
        };
        let expect: Vec<u32> = delivered.iter().filter_map(decode).collect();
        assert_eq!(got, expect, "batching changes neither order nor any fault decision");
        assert!(expect.len() > 200 && expect.len() < 300, "faults happened: {}", expect.len());
        assert!(count(&stats, Counter::PktsDropped) > 0, "corrupted frames counted");
    }

    #[test]
    fn packets_without_faults_arrive_intact_and_other_frames_go_to_the_netdev() {
        let (a, b, stats, _hold) = two_ports(WireFaults::default(), WireFaults::default(), 1);
        let sent: Vec<Packet> = (0..200).map(packet).collect();
        sent.iter().for_each(|p| a.send(&Dest::of_ip(b.address), p));
        // An ARP-like broadcast, a frame for b's MAC, and one for a third MAC (filtered).
        let frame = |dst: Mac, tag: u8| [&dst[..], &a.mac()[..], &[0x08, 0x06], &[tag; 46][..]].concat();
        a.send_frame(&frame([0xff; 6], 1));
        a.send_frame(&frame(b.mac(), 2));
        a.send_frame(&frame([2, 0, 0, 0, 0, 9], 3));
        a.flush();
        let (got, frames) = drain(&b);
        assert_eq!(got.len(), 200);
        assert!(got.iter().zip(&sent).all(|(g, s)| g.bth.psn == s.bth.psn && g.payload == s.payload));
        assert_eq!(frames, vec![frame([0xff; 6], 1), frame(b.mac(), 2)], "broadcast and unicast to b reach its netdev, byte for byte");
        assert_eq!(count(&stats, Counter::EthRxFiltered), 1, "the third MAC's frame filtered");
        let (own, _) = drain(&a);
        assert!(own.is_empty(), "a port does not hear its own frames");
    }

    /// The RoCE frame `a` would send `b` (one SEND), with `edit` applied to its addresses.
    fn roce_frame(a: &FabricPort, b: &FabricPort, edit: impl FnOnce(&mut RoceAddr)) -> Vec<u8> {
        let mut addr = RoceAddr {
            dst_mac: b.mac(),
            src_mac: a.mac(),
            src_ip: IpAddr::V4(a.address),
            dst_ip: IpAddr::V4(b.address),
            src_port: 0xc000,
            tclass: 0,
            ttl: DEFAULT_TTL,
        };
        edit(&mut addr);
        let mut f = Vec::new();
        encode_roce(&addr, &packet(1), &mut f);
        f
    }

    /// Rewrites the IPv4 header checksum of a frame after an edit of its header.
    fn fix_ipv4_sum(f: &mut [u8]) {
        f[24..26].fill(0);
        let sum = f[14..34].chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum::<u32>();
        let sum = !(((sum & 0xffff) + (sum >> 16)) as u16);
        f[24..26].copy_from_slice(&sum.to_be_bytes());
    }

    /// The counters that are not 0.
    fn nonzero(stats: &Stats) -> Vec<(&'static str, u64)> {
        stats.snapshot().into_iter().filter(|(_, v)| *v > 0).collect()
    }

    #[test]
    fn bad_frames_are_dropped_and_counted() {
        let (a, b, stats, _hold) = two_ports(WireFaults::default(), WireFaults::default(), 1);
        b.eth.set_mtu(1500);
        let good = roce_frame(&a, &b, |_| ());
        let mut bad_icrc = good.clone();
        *bad_icrc.last_mut().unwrap() ^= 1;
        let mut fragment = good.clone();
        fragment[14 + 6] |= 0x20;
        fix_ipv4_sum(&mut fragment);
        // Cut short or corrupted on the way (what the FCS would catch): IP and UDP lengths
        // and checksums, RoCE or not.
        let truncated = good[..good.len() - 8].to_vec();
        let mut tcp = good.clone();
        tcp[14 + 9] = 6;
        fix_ipv4_sum(&mut tcp);
        let mut tcp_corrupt = tcp.clone();
        tcp_corrupt[14 + 15] ^= 0x40;
        let mut udp_len = good.clone();
        udp_len[14 + 20 + 5] ^= 1;
        let mut ipv6_cut = good.clone();
        ipv6_cut[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
        ipv6_cut[14] = 0x60;
        ipv6_cut[18..20].copy_from_slice(&0xffffu16.to_be_bytes());
        let mut over_mtu = vec![0u8; 1515];
        over_mtu[..6].copy_from_slice(&b.mac());
        over_mtu[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        a.send_frame(&good[..8]); // runt
        a.send_frame(&bad_icrc);
        a.send_frame(&fragment);
        a.send_frame(&vec![0u8; MAX_FRAME + 1]); // beyond any MTU
        a.send_frame(&over_mtu); // beyond b's MTU
        for f in [&truncated, &tcp_corrupt, &udp_len, &ipv6_cut] {
            a.send_frame(f);
        }
        a.flush();
        let (got, frames) = drain(&b);
        assert!(got.is_empty() && frames.is_empty(), "nothing reached the engine or the netdev");
        let expect = [("PktsDropped", 2), ("EthRxErrors", 8), ("IcrcErrors", 1)];
        assert_eq!(nonzero(&stats), expect, "runt, fragment, two oversized, four cut or corrupted; the ICRC and the fragment also as packets");
        // The same frames turned around inside b: dropped and counted all the same.
        b.eth.set_mtu(9000);
        lock(&b.hairpin).extend([good[..8].to_vec(), bad_icrc, fragment]);
        let _ = drain(&b);
        assert_eq!(nonzero(&stats), [("PktsDropped", 4), ("EthRxErrors", 10), ("IcrcErrors", 2)]);
    }

    #[test]
    fn roce_from_an_impossible_source_is_dropped_and_counted() {
        let (a, b, stats, _hold) = two_ports(WireFaults::default(), WireFaults::default(), 1);
        let ip = |a, b, c, d| IpAddr::V4(Ipv4Addr::new(a, b, c, d));
        let bad: Vec<Vec<u8>> = vec![
            roce_frame(&a, &b, |r| r.src_mac = [0x01, 0x00, 0x5e, 0, 0, 1]), // group MAC
            roce_frame(&a, &b, |r| r.src_mac = b.mac()),                     // b's own MAC, from outside
            roce_frame(&a, &b, |r| r.src_ip = ip(224, 0, 0, 5)),
            roce_frame(&a, &b, |r| r.src_ip = ip(255, 255, 255, 255)),
            roce_frame(&a, &b, |r| r.src_ip = ip(0, 0, 0, 0)),
            roce_frame(&a, &b, |r| r.src_ip = ip(127, 0, 0, 1)),
            roce_frame(&a, &b, |r| r.src_ip = IpAddr::V4(b.address)), // b's own address, from outside
            roce_frame(&a, &b, |r| r.src_port = 0),
        ];
        bad.iter().for_each(|f| a.send_frame(f));
        a.flush();
        let (got, frames) = drain(&b);
        assert!(got.is_empty() && frames.is_empty(), "nothing reached the engine or the netdev");
        assert_eq!(nonzero(&stats), [("PktsDropped", 8), ("RoceBadSource", 8)]);
        // The good frame passes; so does b's own RoCE packet to itself, turned around
        // inside the port (its own MAC and address are then its source).
        a.send_frame(&roce_frame(&a, &b, |_| ()));
        a.flush();
        b.send(&Dest::of_ip(b.address), &packet(2));
        let mut from = Vec::new();
        let mut quiet = std::time::Instant::now();
        while quiet.elapsed() < Duration::from_secs(1) {
            let n = b.receive(&mut |rx| {
                if let Rx::Roce(src, p) = rx {
                    from.push((src, p.bth.psn));
                }
            });
            if n > 0 {
                quiet = std::time::Instant::now();
            }
        }
        from.sort();
        assert_eq!(from, [(a.address.into(), 1), (b.address.into(), 2)]);
    }

    #[test]
    fn roce_over_ipv6_reaches_an_ipv6_gid_of_the_port_and_is_counted() {
        let (a, b, stats, _hold) = two_ports(WireFaults::default(), WireFaults::default(), 1);
        let (a6, b6): (std::net::Ipv6Addr, std::net::Ipv6Addr) = ("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap());
        let to_b = Dest { ip: b6.into(), src: Some(a6.into()), mac: b.mac(), tclass: 0x20, ttl: 3 };
        a.send(&to_b, &packet(1));
        a.flush();
        let (got, frames) = drain(&b);
        assert!(got.is_empty() && frames.len() == 1, "no IPv6 GID yet: the netdev's");
        b.eth.gids.set(2, Some(b6.octets()));
        a.send(&to_b, &packet(2));
        a.send(&Dest { ip: b6.into(), src: None, ..to_b }, &packet(3)); // no IPv6 source: not sent
        a.send(&Dest { src: Some(a6.into()), ..Dest::of_ip(b.address) }, &packet(4)); // mixed families: not sent
        a.flush();
        let spoofed = roce_frame(&a, &b, |r| {
            r.src_ip = b6.into(); // b's own IPv6 address, from outside
            r.dst_ip = b6.into();
        });
        a.send_frame(&spoofed);
        a.flush();
        let mut from = Vec::new();
        let mut quiet = std::time::Instant::now();
        while quiet.elapsed() < Duration::from_secs(1) {
            let n = b.receive(&mut |rx| {
                if let Rx::Roce(src, p) = rx {
                    from.push((src, p.bth.psn, p.payload.clone()));
                }
            });
            if n > 0 {
                quiet = std::time::Instant::now();
            }
        }
        assert_eq!(from, [(IpAddr::V6(a6), 2, packet(2).payload)], "taken, from a's IPv6 GID");
        assert_eq!((count(&stats, Counter::PktsSent), count(&stats, Counter::PktsSentIpv6)), (2, 2), "the two IPv6 packets sent");
        assert_eq!((count(&stats, Counter::PktsDropped), count(&stats, Counter::RoceBadSource)), (1, 1), "the spoof dropped");
    }

    #[test]
    fn unknown_ethertypes_and_other_traffic_reach_the_netdev() {
        let (a, b, stats, _hold) = two_ports(WireFaults::default(), WireFaults::default(), 1);
        let raw = |ethertype: u16, tag: u8| [&b.mac()[..], &a.mac()[..], &ethertype.to_be_bytes(), &[tag; 46][..]].concat();
        // An unknown ethertype, an 802.3 length frame, a VLAN tag (not modelled): a NIC
        // hands them to its host, whose stack drops what it does not know.
        let mut sent = vec![raw(0x88b5, 1), raw(0x002e, 2), raw(0x8100, 3)];
        // A later IPv4 fragment of a RoCE packet (no UDP header in it), RoCE to another
        // address of b's MAC, a TCP segment.
        let mut later = roce_frame(&a, &b, |_| ());
        later[14 + 6..14 + 8].copy_from_slice(&0x0010u16.to_be_bytes());
        fix_ipv4_sum(&mut later);
        sent.push(later);
        sent.push(roce_frame(&a, &b, |r| r.dst_ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9))));
        let mut tcp = roce_frame(&a, &b, |_| ());
        tcp[14 + 9] = 6;
        fix_ipv4_sum(&mut tcp);
        sent.push(tcp);
        sent.iter().for_each(|f| a.send_frame(f));
        a.flush();
        let (got, frames) = drain(&b);
        assert!(got.is_empty());
        assert_eq!(frames, sent, "byte for byte, in order");
        assert_eq!(nonzero(&stats), [], "nothing dropped");
    }

    /// Two VTEPs on loopback addresses of this process's own (127.251.x.1 and .2, port
    /// 4789), each the other's only remote.
    fn vxlan_pair(vni: u32) -> ([std::net::SocketAddrV4; 2], FabricPort, FabricPort, Arc<Stats>) {
        let sub = (std::process::id() % 250) as u8;
        let at = |h: u8| std::net::SocketAddrV4::new(Ipv4Addr::new(127, 251, sub, h), super::super::vxlan::VXLAN_PORT);
        let (va, vb) = (at(1), at(2));
        let seg = |local, remote| SegmentAddr::Vxlan(super::super::vxlan::VxlanAddr { vni, local, remotes: vec![remote] });
        let (a, b, stats) = ports_on([seg(va, vb), seg(vb, va)], WireFaults::default(), WireFaults::default(), 1);
        ([va, vb], a, b, stats)
    }

    #[test]
    fn vxlan_ports_exchange_packets_and_frames_and_refuse_strangers_and_bad_headers() {
        use super::super::vxlan::header;
        let ([va, vb], a, b, stats) = vxlan_pair(4242);
        let sent: Vec<Packet> = (0..100).map(packet).collect();
        sent.iter().for_each(|p| a.send(&Dest::of_ip(b.address), p));
        let frame = |dst: Mac, tag: u8| [&dst[..], &a.mac()[..], &[0x08, 0x06], &[tag; 46][..]].concat();
        a.send_frame(&frame([0xff; 6], 1));
        a.flush();
        let (got, frames) = drain(&b);
        assert_eq!(got.len(), 100);
        assert!(got.iter().zip(&sent).all(|(g, s)| g.bth.psn == s.bth.psn && g.payload == s.payload), "every packet intact, in order");
        assert_eq!(frames, vec![frame([0xff; 6], 1)]);
        let counters = |p: &FabricPort| p.segment_counters().collect::<std::collections::HashMap<_, _>>();
        assert_eq!(counters(&a)["tx_datagrams"], 101);
        assert_eq!(counters(&a)["tx_flooded"], 101, "b's MAC not learned yet: every frame to every remote");
        assert_eq!(counters(&b)["learned"], 1, "a's MAC learned from its frames");
        // b answers a by unicast once it learned a's MAC.
        b.send_frame(&frame(a.mac(), 2));
        b.flush();
        assert_eq!(drain(&a).1, vec![frame(a.mac(), 2)]);
        assert_eq!(counters(&b)["tx_flooded"], 0);
        // A stranger (another address), a bad VNI and a bad flag from a's address: dropped,
        // counted, never learned.
        let errors = stats.get(Counter::EthRxErrors);
        let stranger = std::net::UdpSocket::bind(std::net::SocketAddrV4::new(Ipv4Addr::new(127, 251, va.ip().octets()[2], 3), 0)).unwrap();
        let claim = frame([0xff; 6], 3);
        let mut forged = claim.clone();
        forged[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0x66]);
        stranger.send_to(&[&header(4242)[..], &forged].concat(), vb).unwrap();
        let from_a = std::net::UdpSocket::bind(std::net::SocketAddrV4::new(*va.ip(), 0)).unwrap();
        from_a.send_to(&[&header(4243)[..], &forged].concat(), vb).unwrap();
        from_a.send_to(&[&[0x09, 0, 0, 0][..], &header(4242)[4..], &forged].concat(), vb).unwrap();
        let (got, frames) = drain(&b);
        assert!(got.is_empty() && frames.is_empty(), "nothing reached the netdev");
        assert_eq!(stats.get(Counter::EthRxErrors), errors + 3);
        assert_eq!((counters(&b)["rx_foreign"], counters(&b)["rx_bad_header"], counters(&b)["learned"]), (1, 2, 1));
        assert_eq!(b.segment.destination(&[2, 0, 0, 0, 0, 0x66]), segment::Dest::All, "the forged MAC was not learned");
    }

    #[test]
    fn faults_are_reproducible_and_bounded() {
        let cfg = WireFaults { drop: 0.1, duplicate: 0.05, reorder: 0.05, corrupt: 0.0, delay_us: 0 };
        let run = |seed| {
            let mut f = FaultState::new(cfg, seed);
            let mut out = Vec::new();
            (0..1000u32).for_each(|i| f.apply(i.to_le_bytes().to_vec(), &mut out));
            out
        };
        assert_eq!(run(7), run(7), "same seed, same faults");
        let out = run(7);
        assert!(out.len() > 850 && out.len() < 1000, "about 10% dropped, 5% duplicated: {}", out.len());
        let mut none = Vec::new();
        FaultState::new(WireFaults::default(), 1).apply(vec![1, 2, 3], &mut none);
        assert_eq!(none, vec![vec![1, 2, 3]]);
    }
}
