//! A node's attachment to the fabric: a UDP socket on `address:4791`, fault injection per
//! direction (seeded, so failures reproduce) and optional capture. Sending queues encoded
//! datagrams in pooled buffers until the node's event loop flushes them (`sendmmsg`);
//! receiving takes a batch (`recvmmsg`) when the loop sees the socket readable, and
//! decodes and checks every datagram into one reused packet before the engine sees it.
//! The port owns no thread.

use super::batch::{send_batch, Pool, RecvBatch, BATCH, RX_BUF};
use super::pcap::PcapWriter;
use rnic_emu_core::contract::counters::{Counter, Stats};
use rnic_emu_core::platform::topology::{NodeFaults, WireFaults};
use rnic_emu_core::prng::Rng;
use rnic_emu_core::rnic::fabric::packet::{Endpoints, Packet, ROCE_UDP_PORT};
use rnic_emu_core::rnic::verbs::transport::Wire;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// Asks for 32 MiB socket buffers (beyond rmem_max/wmem_max when allowed: root), so that a
/// burst of read responses is not lost on loopback; falls back to what the kernel grants.
fn enlarge_buffers(socket: &UdpSocket) {
    let size: libc::c_int = 32 << 20;
    for (force, plain) in [(libc::SO_RCVBUFFORCE, libc::SO_RCVBUF), (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)] {
        for opt in [force, plain] {
            // SAFETY: setsockopt on our own socket with a pointer to a live c_int and its size.
            let rc = unsafe {
                libc::setsockopt(
                    socket.as_raw_fd(),
                    libc::SOL_SOCKET,
                    opt,
                    (&size as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if rc == 0 {
                break;
            }
        }
    }
}

/// Transmit side: faults, the datagrams queued since the last flush, free buffers.
struct TxState {
    faults: FaultState,
    queue: Vec<(SocketAddrV4, Vec<u8>)>,
    pool: Pool,
    /// Scratch for the fault decisions of one datagram.
    out: Vec<Vec<u8>>,
}

/// Receive side: faults, the batch buffers and the packet every datagram decodes into.
struct RxState {
    faults: FaultState,
    batch: RecvBatch,
    pool: Pool,
    out: Vec<Vec<u8>>,
    pkt: Packet,
}

/// Datagrams queued before `send` flushes by itself (the event loop flushes after every
/// engine pass; this bounds what one long pass holds back).
const MAX_QUEUED: usize = 4 * BATCH;

pub struct FabricPort {
    pub address: Ipv4Addr,
    socket: UdpSocket,
    tx: Mutex<TxState>,
    rx: Mutex<RxState>,
    pcap: Option<Mutex<PcapWriter>>,
    stats: Arc<Stats>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl FabricPort {
    pub fn bind(address: Ipv4Addr, faults: &NodeFaults, pcap: Option<&Path>, stats: Arc<Stats>) -> std::io::Result<FabricPort> {
        let socket = UdpSocket::bind(SocketAddrV4::new(address, ROCE_UDP_PORT))?;
        enlarge_buffers(&socket);
        let pcap = pcap.map(PcapWriter::create).transpose()?.map(Mutex::new);
        let tx = TxState { faults: FaultState::new(faults.tx, faults.seed), queue: Vec::new(), pool: Pool::default(), out: Vec::new() };
        let rx = RxState {
            faults: FaultState::new(faults.rx, faults.seed ^ 0x5eed),
            batch: RecvBatch::default(),
            pool: Pool::default(),
            out: Vec::new(),
            pkt: Packet::default(),
        };
        Ok(FabricPort { address, socket, tx: Mutex::new(tx), rx: Mutex::new(rx), pcap, stats })
    }

    /// The socket, for the event loop to wait on (readable: datagrams to receive).
    pub fn raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
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

    fn capture(&self, ep: &Endpoints, data: &[u8]) {
        if let Some(p) = &self.pcap {
            if let Err(e) = lock(p).packet(ep, data) {
                log::warn!("pcap: {e}");
            }
        }
    }

    /// Queues a packet for the RNIC at `dst` (through the transmit faults); it leaves with
    /// the next [`FabricPort::flush`]. A configured delay is waited here, as a slow link.
    pub fn send(&self, dst: Ipv4Addr, pkt: &Packet) {
        let ep = Endpoints { src: self.address, dst, src_port: ROCE_UDP_PORT };
        let to = SocketAddrV4::new(dst, ROCE_UDP_PORT);
        let delay = lock(&self.tx).faults.cfg.delay_us;
        if delay > 0 {
            std::thread::sleep(Duration::from_micros(delay));
        }
        let mut tx = lock(&self.tx);
        let TxState { faults, queue, pool, out } = &mut *tx;
        let mut data = pool.take();
        pkt.encode_into(&ep, &mut data);
        if faults.passes_all() {
            out.push(data);
        } else {
            faults.apply(data, out);
        }
        for d in out.drain(..) {
            self.capture(&ep, &d);
            self.stats.inc(Counter::PktsSent);
            queue.push((to, d));
        }
        if queue.len() >= MAX_QUEUED {
            self.flush_locked(&mut tx);
        }
    }

    /// Sends everything queued (`sendmmsg`, up to [`BATCH`] datagrams a call).
    pub fn flush(&self) {
        let mut tx = lock(&self.tx);
        if !tx.queue.is_empty() {
            self.flush_locked(&mut tx);
        }
    }

    fn flush_locked(&self, tx: &mut TxState) {
        let (sent, err) = send_batch(self.socket.as_raw_fd(), &tx.queue);
        if let Some(e) = err {
            // As a lossy link: the transport retransmits what did not leave.
            let (dst, _) = tx.queue[sent];
            log::debug!("fabric send to {}: {e}; {} datagrams dropped", dst.ip(), tx.queue.len() - sent);
        }
        let TxState { queue, pool, .. } = tx;
        for (_, d) in queue.drain(..) {
            pool.put(d);
        }
    }

    /// Receives what the socket holds now, without waiting (one batch of at most
    /// [`BATCH`] datagrams), handing every accepted packet to `deliver`. Returns how many
    /// datagrams it took from the socket.
    pub fn receive(&self, deliver: &mut dyn FnMut(Ipv4Addr, &Packet)) -> usize {
        let mut rx = lock(&self.rx);
        let RxState { faults, batch, pool, out, pkt } = &mut *rx;
        let n = match batch.recv(self.socket.as_raw_fd()) {
            Ok(n) => n,
            Err(e) => {
                log::warn!("fabric receive: {e}");
                return 0;
            }
        };
        for i in 0..n {
            let Some((Some(from), data, truncated)) = batch.get(i) else { continue };
            let ep = Endpoints { src: *from.ip(), dst: self.address, src_port: from.port() };
            if truncated {
                self.stats.inc(Counter::PktsDropped);
                rnic_emu_core::guest_warn!("fabric: dropped a datagram from {from} longer than {RX_BUF} bytes");
                continue;
            }
            if faults.passes_all() {
                self.capture(&ep, data);
                self.accept(&ep, data, pkt, deliver);
                continue;
            }
            let mut copy = pool.take();
            copy.extend_from_slice(data);
            faults.apply(copy, out);
            for d in out.drain(..) {
                self.capture(&ep, &d);
                self.accept(&ep, &d, pkt, deliver);
                pool.put(d);
            }
        }
        n
    }

    /// Decodes and delivers one datagram. What the engine queued in answer (an ACK, a
    /// READ response) leaves right away: the peer's window must not wait for the rest of
    /// the batch.
    fn accept(&self, ep: &Endpoints, data: &[u8], pkt: &mut Packet, deliver: &mut dyn FnMut(Ipv4Addr, &Packet)) {
        match pkt.decode_into(data, ep) {
            Ok(()) => {
                deliver(ep.src, pkt);
                self.flush();
            }
            Err(e) => {
                self.stats.inc(Counter::PktsDropped);
                log::debug!("fabric: dropped a packet from {}:{}: {e}", ep.src, ep.src_port);
            }
        }
    }
}

impl Wire for FabricPort {
    fn address(&self) -> Ipv4Addr {
        self.address
    }

    fn send(&self, dst: Ipv4Addr, pkt: &Packet) {
        FabricPort::send(self, dst, pkt)
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
    use rnic_emu_core::rnic::fabric::packet::{op, Bth};

    /// Two ports on loopback addresses of this test process and test (`test`: a number
    /// per test; port 4791 is fixed).
    fn two_ports(test: u8, tx: WireFaults, rx: WireFaults, seed: u64) -> (FabricPort, FabricPort, Arc<Stats>) {
        let pid = std::process::id();
        let ip = |host| Ipv4Addr::new(127, 200 + (pid % 50) as u8, ((pid / 50) % 250) as u8, host);
        let stats = Arc::new(Stats::default());
        let a = FabricPort::bind(ip(2 * test + 1), &NodeFaults { tx, rx: WireFaults::default(), seed, pcie: Vec::new() }, None, stats.clone()).unwrap();
        let b = FabricPort::bind(ip(2 * test + 2), &NodeFaults { tx: WireFaults::default(), rx, seed, pcie: Vec::new() }, None, stats.clone()).unwrap();
        (a, b, stats)
    }

    fn packet(psn: u32) -> Packet {
        Packet { bth: Bth { opcode: op::SEND_ONLY, dest_qp: 3, psn, ..Default::default() }, payload: vec![psn as u8; 1000], ..Default::default() }
    }

    /// Everything `b` receives within a second of the last datagram.
    fn drain(b: &FabricPort) -> Vec<Packet> {
        let mut got = Vec::new();
        let mut quiet = std::time::Instant::now();
        while quiet.elapsed() < Duration::from_secs(1) {
            if b.receive(&mut |_, p| got.push(p.clone())) > 0 {
                quiet = std::time::Instant::now();
            }
        }
        got
    }

    #[test]
    fn batched_round_trip_keeps_order_and_the_seeded_faults() {
        let tx = WireFaults { drop: 0.1, duplicate: 0.05, reorder: 0.05, corrupt: 0.0, delay_us: 0 };
        let rx = WireFaults { drop: 0.05, corrupt: 0.05, ..WireFaults::default() };
        let (a, b, stats) = two_ports(0, tx, rx, 9);
        for psn in 0..300 {
            a.send(b.address, &packet(psn));
        }
        a.flush();
        let got: Vec<u32> = drain(&b).iter().map(|p| p.bth.psn).collect();
        // The same decisions, taken on the datagrams one by one without the port.
        let ep = Endpoints { src: a.address, dst: b.address, src_port: ROCE_UDP_PORT };
        let (mut ftx, mut frx) = (FaultState::new(tx, 9), FaultState::new(rx, 9 ^ 0x5eed));
        let (mut sent, mut delivered) = (Vec::new(), Vec::new());
        (0..300).for_each(|psn| ftx.apply(packet(psn).encode(&ep), &mut sent));
        sent.into_iter().for_each(|d| frx.apply(d, &mut delivered));
        let expect: Vec<u32> = delivered.iter().filter_map(|d| Packet::decode(d, &ep).ok()).map(|p| p.bth.psn).collect();
        assert_eq!(got, expect, "batching changes neither order nor any fault decision");
        assert!(expect.len() > 200 && expect.len() < 300, "faults happened: {}", expect.len());
        assert!(stats.snapshot().iter().any(|(n, v)| n.eq_ignore_ascii_case("PktsDropped") && *v > 0), "corrupted datagrams counted");
    }

    #[test]
    fn packets_without_faults_arrive_intact_in_batches() {
        let (a, b, _) = two_ports(1, WireFaults::default(), WireFaults::default(), 1);
        let sent: Vec<Packet> = (0..200).map(packet).collect();
        sent.iter().for_each(|p| a.send(b.address, p));
        a.flush();
        let got = drain(&b);
        assert_eq!(got.len(), 200);
        assert!(got.iter().zip(&sent).all(|(g, s)| g.bth.psn == s.bth.psn && g.payload == s.payload));
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
