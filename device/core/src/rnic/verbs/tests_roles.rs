//! The requester, responder and completer driven through both transports with one set of
//! rules: the same scenarios run on a loopback pair (two QPs of one engine) and on a
//! fabric pair (two engines joined by an in-memory wire that loses, duplicates,
//! reorders and delays packets by a fixed schedule), and must end the same way. The fabric
//! pair talks over IPv4 or, through IPv6 GIDs and paths with PATH_FLAG_IPV6, over IPv6.

use super::tests::{sge, Dev, DST, PATH_TABLE, RW, SRC, VA};
use super::transport::{Dest, Wire};
use crate::contract::abi::*;
use crate::contract::counters::Counter;
use crate::prng::Rng;
use crate::rnic::fabric::packet::Packet;
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub(super) const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub(super) const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// The IPv6 GIDs of the two nodes (entry [`GID6`] of each GID table).
const A6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
const B6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);
const GID6: u32 = 1;
/// PSNs that wrap the 24-bit space within the first messages.
pub(super) const PSN_AB: u32 = 0xff_fff0;
const PSN_BA: u32 = 0x100;

#[derive(Default)]
pub(super) struct Net {
    pub(super) queue: Mutex<VecDeque<(IpAddr, IpAddr, Packet)>>,
    /// Every destination a packet was sent to, as the engine gave it.
    dests: Mutex<Vec<Dest>>,
}

struct Port {
    addr: Ipv4Addr,
    net: Arc<Net>,
}

impl Wire for Port {
    fn address(&self) -> Ipv4Addr {
        self.addr
    }

    /// From the path's source as the fabric port sends it (the port's address by default).
    fn send(&self, dst: &Dest, pkt: &Packet) {
        let from = dst.src.unwrap_or(IpAddr::V4(self.addr));
        self.net.queue.lock().unwrap().push_back((from, dst.ip, pkt.clone()));
        self.net.dests.lock().unwrap().push(*dst);
    }
}

/// One packet in n on the wire is dropped / delayed / duplicated / swapped with the one
/// before it (0: never), drawn from a seeded generator (a periodic schedule can lock step
/// with go-back-N and drop the same retransmission every time).
#[derive(Clone, Copy, Default)]
pub(super) struct WireFaults {
    pub(super) drop: u64,
    pub(super) delay: u64,
    pub(super) dup: u64,
    pub(super) reorder: u64,
}

/// How the two QPs of a [`Pair`] reach each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Link {
    /// Two QPs of one engine.
    Loopback,
    /// Two engines, RoCEv2 over IPv4 (dest_ip).
    V4,
    /// Two engines, RoCEv2 over IPv6: each port has its IPv6 GID at entry [`GID6`], each
    /// QP's path names the peer's with PATH_FLAG_IPV6, dest_ip 0.
    V6,
}

/// The path entry of a QP of node `i` (0: A, 1: B) to the other node over IPv6.
fn v6_path(i: usize) -> QpPath {
    let (dst, mac) = if i == 0 { (B6, 0x02_0b_0b_0b_0b_02u64) } else { (A6, 0x02_0a_0a_0a_0a_02) };
    let octets = dst.octets();
    let (lo, hi) = octets.split_at(8);
    QpPath {
        dest_mac: mac,
        traffic_class: 8,
        hop_limit: 5,
        sgid_index: GID6 as u8,
        flags: (PATH_FLAG_SGID | PATH_FLAG_IPV6) as u8,
        dest_gid_lo: u64::from_le_bytes(lo.try_into().unwrap()),
        dest_gid_hi: u64::from_le_bytes(hi.try_into().unwrap()),
        ..Default::default()
    }
}

/// Node `i`'s Ethernet port with its IPv6 GID [`GID6`] set through CMD_SET_GID.
fn add_v6_gid(i: usize, d: &mut Dev) -> Arc<crate::rnic::eth::EthShared> {
    let port = Arc::new(crate::rnic::eth::EthShared::default());
    d.e.port = Some(port.clone());
    d.put(super::tests::GID_TABLE + u64::from(GID6) * 32, &crate::rnic::gid::entry(Some([A6, B6][i].octets())));
    assert_eq!(d.cmd(CMD_SET_GID, GID6), CMD_OK);
    port
}

/// QP 1 (requester side, `devs[0]`) connected to QP 2 (responder side, the last dev).
pub(super) struct Pair {
    pub(super) devs: Vec<Dev>,
    pub(super) net: Option<Arc<Net>>,
    faults: WireFaults,
    rng: Rng,
    held: Vec<(u32, IpAddr, IpAddr, Packet)>,
}

impl Pair {
    pub(super) fn new(fabric: bool, rnr_retry: u8, faults: WireFaults) -> Pair {
        Pair::new_with(fabric, rnr_retry, faults, |_, _| {})
    }

    /// As [`Pair::new`], with `setup` run on each device (by index) before its QP connects.
    fn new_with(fabric: bool, rnr_retry: u8, faults: WireFaults, setup: impl Fn(usize, &mut Dev)) -> Pair {
        Pair::new_on(if fabric { Link::V4 } else { Link::Loopback }, rnr_retry, faults, setup)
    }

    /// As [`Pair::new_with`], over `link`.
    fn new_on(link: Link, rnr_retry: u8, faults: WireFaults, setup: impl Fn(usize, &mut Dev)) -> Pair {
        Pair::new_timeout(link, rnr_retry, faults, 1, 0, setup)
    }

    /// A fabric pair whose QPs have the IBA `timeout` given (0: no retransmission timer).
    pub(super) fn with_timeout(faults: WireFaults, timeout: u8) -> Pair {
        Pair::new_timeout(Link::V4, 7, faults, timeout, 0, |_, _| {})
    }

    /// A fabric pair whose QPs' contexts carry `rd_atomic` (READs and atomics
    /// outstanding, contract minor 12) at RTR and RTS.
    pub(super) fn with_rd_atomic(rd_atomic: u8) -> Pair {
        Pair::new_timeout(Link::V4, 7, WireFaults::default(), 1, rd_atomic, |_, _| {})
    }

    /// A pair of UC QPs (contract minor 13), on the fabric or looped back.
    pub(super) fn uc(fabric: bool, faults: WireFaults) -> Pair {
        Pair::new_typed(if fabric { Link::V4 } else { Link::Loopback }, 7, faults, 1, 0, QP_TYPE_UC, |_, _| {})
    }

    fn new_timeout(link: Link, rnr_retry: u8, faults: WireFaults, timeout: u8, rd_atomic: u8, setup: impl Fn(usize, &mut Dev)) -> Pair {
        Pair::new_typed(link, rnr_retry, faults, timeout, rd_atomic, QP_TYPE_RC, setup)
    }

    #[allow(clippy::too_many_arguments)]
    fn new_typed(link: Link, rnr_retry: u8, faults: WireFaults, timeout: u8, rd_atomic: u8, qp_type: u8, setup: impl Fn(usize, &mut Dev)) -> Pair {
        let fabric = link != Link::Loopback;
        let net = fabric.then(|| Arc::new(Net::default()));
        let mut devs: Vec<Dev> = (0..if fabric { 2 } else { 1 }).map(|_| Dev::new()).collect();
        for (i, d) in devs.iter_mut().enumerate() {
            if let Some(n) = &net {
                d.e.set_wire(Arc::new(Port { addr: [A, B][i], net: n.clone() }));
            }
            if link == Link::V6 {
                add_v6_gid(i, d);
                d.put(PATH_TABLE + 32 * (i as u64 + 1), &v6_path(i));
            }
            setup(i, d);
            d.create_cq(1, 7);
            d.create_cq(2, 7);
        }
        let last = devs.len() - 1;
        for (d, qpn) in [(0, 1), (last, 2)] {
            assert_eq!(devs[d].create_qp_typed(qpn, 7, RW, rnr_retry, 0, qp_type), CMD_OK);
        }
        let ends = [(0, 1u32, 2u32, B, PSN_BA, PSN_AB), (last, 2, 1, A, PSN_AB, PSN_BA)];
        for (i, qpn, dest, ip, rq_psn, sq_psn) in ends {
            let d = &mut devs[i];
            let rtr = d.modify(qpn, |c| {
                c.state = QPS_RTR;
                c.dest_qpn = dest;
                c.dest_ip = if link == Link::V4 { u32::from(ip) } else { 0 };
                c.path_mtu = 10;
                c.rq_psn = rq_psn;
                c.rd_atomic = rd_atomic;
            });
            assert_eq!(rtr, CMD_OK);
            let rts = d.modify(qpn, |c| {
                c.state = QPS_RTS;
                c.sq_psn = sq_psn;
                c.timeout = timeout;
                c.retry_cnt = 7;
                c.rnr_retry = rnr_retry;
                c.rnr_timer_us = 20;
                c.rd_atomic = rd_atomic;
            });
            assert_eq!(rts, CMD_OK);
        }
        Pair { devs, net, faults, rng: Rng::new(0x9e37_79b9_7f4a_7c15), held: Vec::new() }
    }

    pub(super) fn req(&mut self) -> &mut Dev {
        &mut self.devs[0]
    }

    pub(super) fn resp(&mut self) -> &mut Dev {
        self.devs.last_mut().unwrap()
    }

    /// Runs the engines and carries the packets in flight (through the faults).
    fn pump(&mut self) -> bool {
        let mut progress = false;
        // Bounded: with a short RNR timer and rnr_retry 7 (forever) a slow machine can make
        // every pass due for another retry, and only the callers' clocks end the scenario.
        for d in &mut self.devs {
            for _ in 0..1024 {
                if !d.e.run(&d.mem, 64) {
                    break;
                }
                progress = true;
            }
        }
        let Some(net) = &self.net else { return progress };
        let sent: Vec<_> = net.queue.lock().unwrap().drain(..).collect();
        let mut out: Vec<(IpAddr, IpAddr, Packet)> = Vec::new();
        for h in &mut self.held {
            h.0 -= 1;
        }
        while let Some(i) = self.held.iter().position(|h| h.0 == 0) {
            let (_, from, to, p) = self.held.remove(i);
            out.push((from, to, p));
        }
        let f = self.faults;
        for (from, to, p) in sent {
            let mut one_in = |k: u64| k != 0 && self.rng.below(k) == 0;
            let (drop, delay, dup, reorder) = (one_in(f.drop), one_in(f.delay), one_in(f.dup), one_in(f.reorder));
            if drop {
                continue;
            }
            if delay {
                self.held.push((3, from, to, p));
                continue;
            }
            if dup {
                out.push((from, to, p.clone()));
            }
            match out.pop() {
                Some(prev) if reorder => {
                    out.push((from, to, p));
                    out.push(prev);
                }
                prev => {
                    out.extend(prev);
                    out.push((from, to, p));
                }
            }
        }
        for (from, to, p) in out {
            progress = true;
            let d = &mut self.devs[usize::from(to == IpAddr::V4(B) || to == IpAddr::V6(B6))];
            d.e.on_packet(&d.mem, from, &p);
        }
        progress
    }

    /// Pumps until CQ `cqn` of the requester (or responder) side holds `n` CQEs.
    pub(super) fn run_until(&mut self, requester: bool, cqn: u32, n: usize) -> Vec<Cqe> {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut got = Vec::new();
        while got.len() < n && Instant::now() < deadline {
            let progress = self.pump();
            let d = if requester { self.req() } else { self.resp() };
            got.extend(d.poll(cqn));
            if !progress {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        got
    }

    /// Pumps for a while (RNR waits, timers): first until nothing moves (at most 64
    /// pumps, whatever the clock says, so a slow machine cannot skip the work already
    /// handed over), then for `d` more.
    pub(super) fn settle(&mut self, d: Duration) {
        for _ in 0..64 {
            if !self.pump() {
                break;
            }
        }
        let until = Instant::now() + d;
        while Instant::now() < until {
            if !self.pump() {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }
}

pub(super) fn status(c: &Cqe) -> (u64, u8, u32) {
    (c.wr_id, c.status, c.syndrome)
}

#[test]
fn every_verb_completes_in_order_through_loss_duplication_reordering_and_delay() {
    let lossy = WireFaults { drop: 8, delay: 16, dup: 16, reorder: 8 };
    let none = WireFaults::default();
    for (link, faults) in [(Link::Loopback, none), (Link::V4, none), (Link::V4, lossy), (Link::V6, none), (Link::V6, lossy)] {
        let fabric = link != Link::Loopback;
        let mut p = Pair::new_on(link, 7, faults, |_, _| {});
        let lk = p.req().reg_mr(1, 7, RW, SRC, 4 << 20);
        let rk = p.resp().reg_mr(2, 7, RW, DST, 4 << 20);
        let out = p.req().fill(SRC, 1 << 20, 3);
        let there = p.resp().fill(DST + (2 << 20), 1 << 20, 9);
        const N: u64 = 20;
        for i in 0..N {
            p.resp().recv(2, 500 + i, &[sge(DST + (1 << 20) + i * 4096, 4096, rk)]);
        }
        for i in 0..N {
            let o = i * 4096;
            p.req().send(1, WQE_OP_RDMA_WRITE, 3 * i, &[sge(SRC + o, 3000, lk)], VA + DST + o, rk);
            p.req().send(1, WQE_OP_RDMA_READ, 3 * i + 1, &[sge(SRC + (2 << 20) + o, 2500, lk)], VA + DST + (2 << 20) + o, rk);
            p.req().send(1, WQE_OP_SEND_IMM, 3 * i + 2, &[sge(SRC + (1 << 19) + o, 1500, lk)], 0, 0);
        }
        let c = p.run_until(true, 1, 3 * N as usize);
        let got: Vec<(u64, u8)> = c.iter().map(|c| (c.wr_id, c.status)).collect();
        let want: Vec<(u64, u8)> = (0..3 * N).map(|i| (i, WC_SUCCESS)).collect();
        let last = p.devs.len() - 1;
        let state = format!("{:?} {:?} RESP {:?} held {}", p.devs[0].e.roles[1].req, p.devs[0].e.roles[1].comp, p.devs[last].e.roles[2].resp, p.held.len());
        assert_eq!(got, want, "{link:?} drop {}: every WR once, in order; {state}", faults.drop);
        let r = p.run_until(false, 2, N as usize);
        let ids: Vec<u64> = r.iter().map(|c| c.wr_id).collect();
        assert_eq!(ids, (500..500 + N).collect::<Vec<_>>());
        assert!(r.iter().all(|c| c.status == WC_SUCCESS && c.byte_len == 1500 && c.imm_data == 0x1234_5678));
        for i in 0..N as usize {
            let o = i * 4096;
            let rd = p.resp().read(DST + o as u64, 3000);
            assert!(rd == out[o..o + 3000], "fabric {fabric}: WRITE {i}");
            let rd = p.req().read(SRC + (2 << 20) + o as u64, 2500);
            assert!(rd == there[o..o + 2500], "fabric {fabric}: READ {i}");
            let rd = p.resp().read(DST + (1 << 20) + o as u64, 1500);
            assert!(rd == out[(1 << 19) + o..(1 << 19) + o + 1500], "fabric {fabric}: SEND {i}");
        }
        let (req, resp) = (&p.devs[0].stats, &p.devs[p.devs.len() - 1].stats);
        let placed = (resp.get(Counter::BytesWritten), resp.get(Counter::BytesSent), req.get(Counter::BytesRead));
        assert_eq!(placed, (3000 * N, 1500 * N, 2500 * N), "fabric {fabric}: each byte counted once, retransmissions not");
        if faults.drop != 0 {
            assert!(p.req().stats.get(Counter::Retransmits) > 0, "losses were repaired by retransmission");
            assert!(p.resp().stats.get(Counter::NaksSent) > 0, "gaps drew sequence NAKs");
        }
        if link == Link::V6 {
            let dests = p.net.as_ref().unwrap().dests.lock().unwrap().clone();
            let v6 = |d: &Dest, ip: Ipv6Addr, src: Ipv6Addr| (d.ip, d.src, d.tclass, d.ttl) == (ip.into(), Some(src.into()), 8, 5);
            assert!(dests.iter().all(|d| v6(d, B6, A6) || v6(d, A6, B6)), "every packet over IPv6, on its path: {:?}", dests.first());
            let got = (p.req().stats.get(Counter::PktsReceivedIpv6), p.req().stats.get(Counter::PktsReceived));
            assert!(got.0 > 0 && got.0 == got.1, "IPv6 packets counted as such: {got:?}");
        }
    }
}

#[test]
fn a_packet_from_another_ipv6_source_than_the_peers_is_dropped_and_counted() {
    let mut p = Pair::new_on(Link::V6, 0, WireFaults::default(), |_, _| {});
    let lk = p.req().reg_mr(1, 7, RW, SRC, 4096);
    let rk = p.resp().reg_mr(2, 7, RW, DST, 4096);
    p.req().fill(SRC, 4096, 3);
    p.req().send(1, WQE_OP_RDMA_WRITE, 1, &[sge(SRC, 100, lk)], VA + DST, rk);
    let req = p.req();
    while req.e.run(&req.mem, 64) {}
    let sent: Vec<_> = p.net.as_ref().unwrap().queue.lock().unwrap().drain(..).collect();
    let (from, _, pkt) = sent.first().cloned().expect("the WRITE went out");
    assert_eq!(from, IpAddr::V6(A6));
    let resp = p.resp();
    for stranger in [IpAddr::V6("fd00::9".parse().unwrap()), IpAddr::V4(A), IpAddr::V6(A.to_ipv6_mapped())] {
        let before = resp.stats.get(Counter::PktsDropped);
        resp.e.on_packet(&resp.mem, stranger, &pkt);
        assert_eq!(resp.stats.get(Counter::PktsDropped), before + 1, "from {stranger}: dropped and counted");
    }
    assert_eq!((resp.stats.get(Counter::PktsReceived), resp.stats.get(Counter::PktsReceivedIpv6)), (0, 0));
    assert_eq!(resp.read(DST, 100), vec![0; 100], "nothing placed");
    resp.e.on_packet(&resp.mem, from, &pkt);
    assert_eq!((resp.stats.get(Counter::PktsReceived), resp.stats.get(Counter::PktsReceivedIpv6)), (1, 1), "from the peer: taken");
}

#[test]
fn an_rtr_over_ipv6_with_a_bad_path_is_refused() {
    let mut d = Dev::new();
    d.e.set_wire(Arc::new(Port { addr: A, net: Arc::new(Net::default()) }));
    add_v6_gid(0, &mut d);
    // Entry 3: an IPv4 GID; entry 4: empty.
    d.put(super::tests::GID_TABLE + 3 * 32, &crate::rnic::gid::entry(Some(A.to_ipv6_mapped().octets())));
    assert_eq!(d.cmd(CMD_SET_GID, 3), CMD_OK);
    d.create_cq(1, 7);
    d.create_qp(1, 7, RW, 0);
    let rtr = |d: &mut Dev, dest_ip: u32, path: QpPath| {
        d.put(PATH_TABLE + 32, &path);
        d.modify(1, |c| {
            c.state = QPS_RTR;
            c.dest_qpn = 2;
            c.dest_ip = dest_ip;
            c.path_mtu = 10;
        })
    };
    let gid = |s: &str| {
        let o = s.parse::<Ipv6Addr>().unwrap().octets();
        (u64::from_le_bytes(o[..8].try_into().unwrap()), u64::from_le_bytes(o[8..].try_into().unwrap()))
    };
    let good = v6_path(0);
    let to = |s: &str| {
        let (lo, hi) = gid(s);
        QpPath { dest_gid_lo: lo, dest_gid_hi: hi, ..good }
    };
    let cases = [
        (0, to("ff02::1"), "a multicast destination"),
        (0, to("::"), "the unspecified destination"),
        (0, to("::1"), "the loopback destination"),
        (0, to("::ffff:10.0.0.2"), "an IPv4-mapped destination"),
        (0, QpPath { sgid_index: 16, ..good }, "a source index beyond the table"),
        (0, QpPath { sgid_index: 255, ..good }, "a source index far beyond the table"),
        (0, QpPath { sgid_index: 4, ..good }, "an empty source entry"),
        (0, QpPath { sgid_index: 3, ..good }, "an IPv4 source entry"),
        (0, QpPath { flags: PATH_FLAG_IPV6 as u8, ..good }, "no PATH_FLAG_SGID"),
        (0, QpPath { dest_mac: 0, ..good }, "no next-hop MAC"),
        (0, QpPath { flags: 4 | good.flags, ..good }, "an unknown flag"),
        (u32::from(B), good, "a dest_ip beside the IPv6 destination"),
    ];
    for (dest_ip, path, what) in cases {
        assert_eq!(rtr(&mut d, dest_ip, path), CMD_ERR_INVALID, "{what}");
        assert_eq!(d.qp_ctx(1).state, QPS_INIT, "{what}: still INIT");
    }
    assert_eq!(rtr(&mut d, 0, good), CMD_OK, "the good path");
    let crate::rnic::verbs::engine::Path::Fabric { peer, .. } = d.e.roles[1].path else { panic!("not a fabric path") };
    assert_eq!((peer.ip, peer.src), (IpAddr::V6(B6), Some(IpAddr::V6(A6))));
}

/// The outcome of one error scenario: requester CQEs, responder CQEs, both QPs' states
/// and reasons, RNR retries counted.
type Outcome = (Vec<(u64, u8, u32)>, Vec<(u64, u8, u32)>, (u8, u8), (u8, u8), u64);

fn outcome(p: &mut Pair, req_cqes: usize, resp_cqes: usize) -> Outcome {
    let a = p.run_until(true, 1, req_cqes).iter().map(status).collect();
    let b = p.run_until(false, 2, resp_cqes).iter().map(status).collect();
    let qa = p.req().e.qp(1).map(|q| (q.state.to_abi(), q.err_reason)).unwrap();
    let qb = p.resp().e.qp(2).map(|q| (q.state.to_abi(), q.err_reason)).unwrap();
    let rnr = p.req().stats.get(Counter::RnrRetries);
    (a, b, qa, qb, rnr)
}

fn both(scenario: impl Fn(&mut Pair) -> Outcome, rnr_retry: u8) -> Outcome {
    let loopback = scenario(&mut Pair::new(false, rnr_retry, WireFaults::default()));
    let fabric = scenario(&mut Pair::new(true, rnr_retry, WireFaults::default()));
    assert_eq!(loopback, fabric, "loopback and fabric obey the same rules");
    loopback
}

#[test]
fn rnr_retries_are_counted_the_same_and_exhaust_the_same() {
    let o = both(
        |p| {
            let lk = p.req().reg_mr(1, 7, RW, SRC, 64);
            p.req().send(1, WQE_OP_SEND, 1, &[sge(SRC, 8, lk)], 0, 0);
            p.req().send(1, WQE_OP_SEND, 2, &[sge(SRC, 8, lk)], 0, 0);
            outcome(p, 2, 0)
        },
        2,
    );
    let want = vec![(1, WC_RNR_RETRY_EXC_ERR, u32::from(QP_ERR_RNR)), (2, WC_WR_FLUSH_ERR, 0)];
    assert_eq!(o.0, want);
    assert_eq!((o.2, o.3, o.4), ((QPS_ERR, QP_ERR_RNR), (QPS_RTS, 0), 2), "two retries after the first try");
}

#[test]
fn a_recv_posted_during_the_rnr_wait_lets_the_send_land() {
    let o = both(
        |p| {
            let lk = p.req().reg_mr(1, 7, RW, SRC, 64);
            let rk = p.resp().reg_mr(2, 7, RW, DST, 64);
            p.req().send(1, WQE_OP_SEND, 1, &[sge(SRC, 8, lk)], 0, 0);
            p.settle(Duration::from_millis(20));
            assert!(p.req().poll(1).is_empty(), "no RECV yet: the SEND waits");
            assert!(p.req().stats.get(Counter::RnrRetries) > 0);
            p.resp().recv(2, 5, &[sge(DST, 64, rk)]);
            let mut o = outcome(p, 1, 1);
            o.4 = 0; // how many retries depends on timing
            o
        },
        7,
    );
    assert_eq!((o.0, o.1), (vec![(1, WC_SUCCESS, 0)], vec![(5, WC_SUCCESS, 0)]));
}

#[test]
fn an_oversized_send_fails_both_sides_the_same() {
    let o = both(
        |p| {
            let lk = p.req().reg_mr(1, 7, RW, SRC, 4096);
            let rk = p.resp().reg_mr(2, 7, RW, DST, 4096);
            p.resp().recv(2, 77, &[sge(DST, 100, rk)]);
            p.resp().recv(2, 78, &[sge(DST, 100, rk)]);
            p.req().send(1, WQE_OP_SEND, 1, &[sge(SRC, 101, lk)], 0, 0);
            let o = outcome(p, 1, 2);
            assert_eq!(p.resp().read(DST, 100), vec![0; 100], "nothing placed");
            o
        },
        0,
    );
    assert_eq!(o.0, vec![(1, WC_REM_INV_REQ_ERR, u32::from(QP_ERR_REMOTE_INVALID))]);
    assert_eq!(o.1, vec![(77, WC_LOC_LEN_ERR, u32::from(QP_ERR_LENGTH)), (78, WC_WR_FLUSH_ERR, 0)]);
    assert_eq!((o.2, o.3), ((QPS_ERR, QP_ERR_REMOTE_INVALID), (QPS_ERR, QP_ERR_LENGTH)));
}

#[test]
fn a_bad_rkey_is_a_remote_access_error_on_both_transports() {
    for case in 0..3 {
        let o = both(
            |p| {
                let lk = p.req().reg_mr(1, 7, RW, SRC, 4096);
                let rk = p.resp().reg_mr(2, 7, RW, DST, 4096);
                let (op, rkey, off) = match case {
                    0 => (WQE_OP_RDMA_WRITE, rk ^ 1, 0),
                    1 => (WQE_OP_RDMA_READ, rk ^ 1, 0),
                    _ => (WQE_OP_RDMA_WRITE, rk, 4000),
                };
                p.req().send(1, op, 1, &[sge(SRC, 200, lk)], VA + DST + off, rkey);
                let o = outcome(p, 1, 0);
                assert_eq!(p.resp().read(DST, 4096), vec![0; 4096], "nothing written");
                // The responder refused it and went to ERROR too, with the affiliated event
                // (IBA 9.9.3.1.3, 11.6.3.1): no completion tells its consumer.
                assert_eq!(p.resp().events(), [(EQE_QP_ACCESS_ERR, 2, u32::from(QP_ERR_REMOTE_ACCESS))], "case {case}");
                o
            },
            0,
        );
        assert_eq!(o.0, vec![(1, WC_REM_ACCESS_ERR, u32::from(QP_ERR_REMOTE_ACCESS))], "case {case}");
        assert_eq!((o.2, o.3), ((QPS_ERR, QP_ERR_REMOTE_ACCESS), (QPS_ERR, QP_ERR_REMOTE_ACCESS)));
    }
}

#[test]
fn a_malformed_recv_is_a_remote_operational_error_on_both_transports() {
    let o = both(
        |p| {
            let lk = p.req().reg_mr(1, 7, RW, SRC, 4096);
            let bad = WqeHeader { opcode: WQE_OP_SEND, wr_id: 21, ..Default::default() };
            p.resp().post(2, false, bad, &[], &[]);
            p.req().send(1, WQE_OP_SEND, 22, &[sge(SRC, 100, lk)], 0, 0);
            outcome(p, 1, 1)
        },
        0,
    );
    assert_eq!(o.0, vec![(22, WC_REM_OP_ERR, u32::from(QP_ERR_REMOTE_INVALID))]);
    assert_eq!(o.1, vec![(21, WC_LOC_QP_OP_ERR, u32::from(QP_ERR_BAD_WQE))]);
}

/// Guest memory that counts what goes through it.
struct Counting<'a> {
    mem: &'a crate::platform::mem::dma::DmaMaps,
    read: std::cell::Cell<u64>,
    written: std::cell::Cell<u64>,
    copied: std::cell::Cell<u64>,
}

impl crate::platform::mem::access::GuestMem for Counting<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<crate::platform::mem::access::PciePath, crate::platform::mem::dma::DmaError> {
        self.read.set(self.read.get() + buf.len() as u64);
        crate::platform::mem::access::GuestMem::read(self.mem, addr, buf)
    }

    fn write(&self, addr: u64, buf: &[u8]) -> Result<crate::platform::mem::access::PciePath, crate::platform::mem::dma::DmaError> {
        self.written.set(self.written.get() + buf.len() as u64);
        crate::platform::mem::access::GuestMem::write(self.mem, addr, buf)
    }

    fn copy(
        &self,
        src: u64,
        dst: u64,
        len: usize,
    ) -> Result<(crate::platform::mem::access::PciePath, crate::platform::mem::access::PciePath), crate::platform::mem::dma::DmaError> {
        self.copied.set(self.copied.get() + len as u64);
        crate::platform::mem::access::GuestMem::copy(self.mem, src, dst, len)
    }
}

#[test]
fn a_loopback_write_read_and_send_are_one_memory_to_memory_copy_each() {
    let mut p = Pair::new(false, 0, WireFaults::default());
    let lk = p.req().reg_mr(1, 7, RW, SRC, 4 << 20);
    let rk = p.resp().reg_mr(2, 7, RW, DST, 4 << 20);
    let data = p.req().fill(SRC, 1 << 20, 5);
    p.resp().recv(2, 9, &[sge(DST + (2 << 20), 1 << 20, rk)]);
    p.req().send(1, WQE_OP_RDMA_WRITE, 1, &[sge(SRC, 1 << 20, lk)], VA + DST, rk);
    p.req().send(1, WQE_OP_RDMA_READ, 2, &[sge(SRC + (1 << 20), 1 << 20, lk)], VA + DST, rk);
    p.req().send(1, WQE_OP_SEND, 3, &[sge(SRC, 1 << 20, lk)], 0, 0);
    let d = p.req();
    let mem = Counting { mem: &d.mem, read: 0.into(), written: 0.into(), copied: 0.into() };
    while d.e.run(&mem, 64) {}
    assert_eq!(mem.copied.get(), 3 << 20, "each payload moved once, memory to memory");
    assert!(mem.read.get() <= 4 * 128 && mem.written.get() <= 4 * 32, "no bounce: only WQEs read and CQEs written");
    let c = d.poll(1);
    assert_eq!(c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(), [(1, WC_SUCCESS), (2, WC_SUCCESS), (3, WC_SUCCESS)]);
    assert!(d.read(DST, 1 << 20) == data && d.read(SRC + (1 << 20), 1 << 20) == data && d.read(DST + (2 << 20), 1 << 20) == data);
}

#[test]
fn a_fabric_qp_sends_on_the_path_its_table_entry_names() {
    // QP 1 of node A: a resolved next hop, DSCP 46 with ECT(0), TTL 9. QP 2 of node B: no
    // entry (zeros), the rnic-emu convention.
    let mac = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
    let mut raw = [0u8; 8];
    raw[..6].copy_from_slice(&mac);
    let path = QpPath { dest_mac: u64::from_le_bytes(raw), traffic_class: 46 << 2 | 2, hop_limit: 9, ..Default::default() };
    let mut p = Pair::new_with(true, 0, WireFaults::default(), |i, d| {
        if i == 0 {
            d.put(PATH_TABLE + 32, &path);
        }
    });
    let lk = p.req().reg_mr(1, 7, RW, SRC, 1 << 20);
    let rk = p.resp().reg_mr(2, 7, RW, DST, 1 << 20);
    let out = p.req().fill(SRC, 8192, 5);
    p.req().send(1, WQE_OP_RDMA_WRITE, 1, &[sge(SRC, 8192, lk)], VA + DST, rk);
    let c = p.run_until(true, 1, 1);
    assert_eq!(status(&c[0]), (1, WC_SUCCESS, 0));
    assert!(p.resp().read(DST, 8192) == out, "the WRITE landed");
    let dests = p.net.as_ref().unwrap().dests.lock().unwrap().clone();
    let from_a = dests.iter().filter(|d| d.ip == B).collect::<Vec<_>>();
    let from_b = dests.iter().filter(|d| d.ip == A).collect::<Vec<_>>();
    assert!(!from_a.is_empty() && !from_b.is_empty(), "both directions carried packets");
    assert!(from_a.iter().all(|d| (d.mac, d.tclass, d.ttl) == (mac, 46 << 2 | 2, 9)), "{from_a:?}");
    assert!(from_b.iter().all(|d| **d == Dest::of_ip(A)), "{from_b:?}");
    // A group MAC is no next hop: the RTR is refused, the QP stays in INIT.
    let mut d = Dev::new();
    d.e.set_wire(Arc::new(Port { addr: A, net: Arc::new(Net::default()) }));
    d.create_cq(1, 7);
    d.create_qp(1, 7, RW, 0);
    d.put(PATH_TABLE + 32, &QpPath { dest_mac: 0x01, ..Default::default() });
    let rtr = d.modify(1, |c| {
        c.state = QPS_RTR;
        c.dest_qpn = 2;
        c.dest_ip = u32::from(B);
        c.path_mtu = 10;
    });
    assert_eq!(rtr, CMD_ERR_INVALID);
    assert_eq!(d.qp_ctx(1).state, QPS_INIT);
}

#[test]
fn a_path_sends_from_the_gid_it_names_and_only_from_one_the_port_has() {
    let port = Arc::new(crate::rnic::eth::EthShared::default());
    let mut d = Dev::new();
    d.e.set_wire(Arc::new(Port { addr: A, net: Arc::new(Net::default()) }));
    d.e.port = Some(port.clone());
    d.create_cq(1, 7);
    d.create_qp(1, 7, RW, 0);
    let rtr = |d: &mut Dev| {
        d.modify(1, |c| {
            c.state = QPS_RTR;
            c.dest_qpn = 2;
            c.dest_ip = u32::from(B);
            c.path_mtu = 10;
        })
    };
    // Entry 3: ::ffff:10.0.0.21, through CMD_SET_GID.
    let gid = Ipv4Addr::new(10, 0, 0, 21).to_ipv6_mapped().octets();
    d.put(super::tests::GID_TABLE + 3 * 32, &crate::rnic::gid::entry(Some(gid)));
    d.put(PATH_TABLE + 32, &QpPath { sgid_index: 4, flags: PATH_FLAG_SGID as u8, ..Default::default() });
    assert_eq!(rtr(&mut d), CMD_ERR_INVALID, "entry 4 holds no address");
    assert_eq!(d.cmd(CMD_SET_GID, 3), CMD_OK);
    assert_eq!(d.cmd(CMD_SET_GID, GID_TABLE_LEN), CMD_ERR_BAD_INDEX);
    assert!(port.gids.has_ipv4(Ipv4Addr::new(10, 0, 0, 21)), "the port takes packets to it");
    d.put(PATH_TABLE + 32, &QpPath { sgid_index: 3, flags: PATH_FLAG_SGID as u8, ..Default::default() });
    assert_eq!(rtr(&mut d), CMD_OK);
    let crate::rnic::verbs::engine::Path::Fabric { peer, .. } = d.e.roles[1].path else { panic!("not a fabric path") };
    assert_eq!(peer.src, Some(Ipv4Addr::new(10, 0, 0, 21).into()));
}
