//! A node's attachment to the fabric: a UDP socket on `address:4791`, fault injection per
//! direction (seeded, so failures reproduce), optional capture, and a receive thread that
//! decodes and checks every datagram before the engine sees it.

use super::packet::{Endpoints, Packet, ROCE_UDP_PORT};
use super::pcap::PcapWriter;
use crate::topology::{Faults, NodeFaults};
use crate::verbs::stats::{Counter, Stats};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A small deterministic generator (xorshift64*): fault decisions need no crate and must
/// reproduce from the seed alone.
struct Rng(u64);

impl Rng {
    fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let v = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        ((v >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    fn below(&mut self, n: usize) -> usize {
        self.chance(0.0);
        (self.0 % n.max(1) as u64) as usize
    }
}

/// Applies one direction's faults to a datagram: what to deliver, in order.
struct FaultState {
    cfg: Faults,
    rng: Rng,
    held: Option<Vec<u8>>,
}

impl FaultState {
    fn new(cfg: Faults, seed: u64) -> Self {
        FaultState { cfg, rng: Rng(seed | 1), held: None }
    }

    fn apply(&mut self, mut data: Vec<u8>) -> Vec<Vec<u8>> {
        if self.rng.chance(self.cfg.drop) {
            return self.held.take().into_iter().collect();
        }
        if self.rng.chance(self.cfg.corrupt) && !data.is_empty() {
            let i = self.rng.below(data.len());
            data[i] ^= 0x40;
        }
        let mut out = Vec::new();
        if self.rng.chance(self.cfg.duplicate) {
            out.push(data.clone());
        }
        if self.held.is_none() && self.rng.chance(self.cfg.reorder) {
            self.held = Some(data);
            return out;
        }
        out.push(data);
        out.extend(self.held.take());
        out
    }
}

/// Asks for 32 MiB socket buffers (beyond rmem_max/wmem_max when allowed: root), so that a
/// burst of read responses is not lost on loopback; falls back to what the kernel grants.
fn enlarge_buffers(socket: &UdpSocket) {
    use std::os::fd::AsRawFd;
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

pub struct FabricPort {
    pub address: Ipv4Addr,
    socket: UdpSocket,
    tx: Mutex<FaultState>,
    rx: Mutex<FaultState>,
    pcap: Option<Mutex<PcapWriter>>,
    stats: Arc<Stats>,
}

impl FabricPort {
    pub fn bind(address: Ipv4Addr, faults: &NodeFaults, pcap: Option<&Path>, stats: Arc<Stats>) -> std::io::Result<FabricPort> {
        let socket = UdpSocket::bind(SocketAddrV4::new(address, ROCE_UDP_PORT))?;
        enlarge_buffers(&socket);
        let pcap = pcap.map(PcapWriter::create).transpose()?.map(Mutex::new);
        Ok(FabricPort {
            address,
            socket,
            tx: Mutex::new(FaultState::new(faults.tx, faults.seed)),
            rx: Mutex::new(FaultState::new(faults.rx, faults.seed ^ 0x5eed)),
            pcap,
            stats,
        })
    }

    /// Changes the faults at run time (control socket).
    pub fn set_faults(&self, tx: Option<Faults>, rx: Option<Faults>) {
        if let Some(f) = tx {
            self.tx.lock().unwrap_or_else(|p| p.into_inner()).cfg = f;
        }
        if let Some(f) = rx {
            self.rx.lock().unwrap_or_else(|p| p.into_inner()).cfg = f;
        }
    }

    fn capture(&self, ep: &Endpoints, data: &[u8]) {
        if let Some(p) = &self.pcap {
            if let Err(e) = p.lock().unwrap_or_else(|p| p.into_inner()).packet(ep, data) {
                log::warn!("pcap: {e}");
            }
        }
    }

    /// Sends a packet to the RNIC at `dst` (through the transmit faults).
    pub fn send(&self, dst: Ipv4Addr, pkt: &Packet) {
        let ep = Endpoints { src: self.address, dst, src_port: ROCE_UDP_PORT };
        let data = pkt.encode(&ep);
        let delay = self.tx.lock().map(|f| f.cfg.delay_us).unwrap_or(0);
        if delay > 0 {
            std::thread::sleep(Duration::from_micros(delay));
        }
        let out = self.tx.lock().unwrap_or_else(|p| p.into_inner()).apply(data);
        for d in out {
            self.capture(&ep, &d);
            self.stats.inc(Counter::PktsSent);
            if let Err(e) = self.socket.send_to(&d, SocketAddrV4::new(dst, ROCE_UDP_PORT)) {
                log::debug!("fabric send to {dst}: {e}");
            }
        }
    }

    /// Receives forever, handing every accepted packet to `deliver`.
    pub fn receive_loop(&self, deliver: &dyn Fn(Ipv4Addr, Packet)) {
        let mut buf = vec![0u8; 65536];
        loop {
            let (n, from) = match self.socket.recv_from(&mut buf) {
                Ok(v) => v,
                Err(e) => {
                    log::warn!("fabric receive: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            let std::net::SocketAddr::V4(from) = from else { continue };
            let datagrams = self.rx.lock().unwrap_or_else(|p| p.into_inner()).apply(buf[..n].to_vec());
            for d in datagrams {
                let ep = Endpoints { src: *from.ip(), dst: self.address, src_port: from.port() };
                self.capture(&ep, &d);
                match Packet::decode(&d, &ep) {
                    Ok(pkt) => deliver(*from.ip(), pkt),
                    Err(e) => {
                        self.stats.inc(Counter::PktsDropped);
                        log::debug!("fabric: dropped a packet from {from}: {e}");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_are_reproducible_and_bounded() {
        let cfg = Faults { drop: 0.1, duplicate: 0.05, reorder: 0.05, corrupt: 0.0, delay_us: 0 };
        let run = |seed| {
            let mut f = FaultState::new(cfg, seed);
            (0..1000u32).flat_map(|i| f.apply(i.to_le_bytes().to_vec())).collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7), "same seed, same faults");
        let out = run(7);
        assert!(out.len() > 850 && out.len() < 1000, "about 10% dropped, 5% duplicated: {}", out.len());
        let none = FaultState::new(Faults::default(), 1).apply(vec![1, 2, 3]);
        assert_eq!(none, vec![vec![1, 2, 3]]);
    }
}
