//! UD QPs (contract minor 16) on one engine and between two engines whose packets travel
//! as real RoCEv2 frames (encoded, classified and decoded as the fabric port does): a
//! SEND lands after the GRH area of the frame it came in, with the source QP; the Q_Key
//! rules; a RECV too small or missing drops the message and keeps the RECV; what a UD
//! send queue refuses (other opcodes, more than the MTU, a vector with no route); and
//! packets of the other services are dropped both ways.

use super::tests::{sge, Dev, GID_TABLE, RW};
use crate::contract::abi::*;
use crate::contract::counters::Counter;
use crate::rnic::eth::EthShared;
use crate::rnic::fabric::frame::{classify, decode_roce, encode_roce, mac_of_ipv4, Kind, RoceAddr};
use crate::rnic::fabric::packet::Packet;
use crate::rnic::verbs::transport::{Dest, Wire};
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use vm_memory::ByteValued;

const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const A6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
const B6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);
const QKEY: u32 = 0x1111_1111;
const SRC: u64 = super::tests::DATA;
const DST: u64 = super::tests::DATA + (4 << 20);

/// Frames between the engines, as the fabric port builds them.
#[derive(Default)]
struct Frames(Mutex<VecDeque<Vec<u8>>>);

struct Port {
    addr: Ipv4Addr,
    net: Arc<Frames>,
}

impl Wire for Port {
    fn address(&self) -> Ipv4Addr {
        self.addr
    }

    fn send(&self, dst: &Dest, pkt: &Packet) {
        let src_ip = dst.src.unwrap_or(IpAddr::V4(self.addr));
        let a = RoceAddr { dst_mac: dst.mac, src_mac: mac_of_ipv4(self.addr), src_ip, dst_ip: dst.ip, src_port: 49152, tclass: dst.tclass, ttl: dst.ttl };
        let mut f = Vec::new();
        encode_roce(&a, pkt, &mut f);
        self.net.0.lock().unwrap().push_back(f);
    }
}

/// Node `i` (A, B): a port with its IPv4 GID at entry 0 and IPv6 GID at entry 1, CQs 1
/// and 2, on `net` if given.
fn node(i: usize, net: Option<&Arc<Frames>>) -> Dev {
    let mut d = Dev::new();
    let port = Arc::new(EthShared::default());
    d.e.port = Some(port);
    if let Some(n) = net {
        d.e.set_wire(Arc::new(Port { addr: [A, B][i], net: n.clone() }));
    }
    let gids = [[A, B][i].to_ipv6_mapped().octets(), [A6, B6][i].octets()];
    for (k, g) in gids.iter().enumerate() {
        d.put(GID_TABLE + 32 * k as u64, &crate::rnic::gid::entry(Some(*g)));
        assert_eq!(d.cmd(CMD_SET_GID, k as u32), CMD_OK);
    }
    d.create_cq(1, 7);
    d.create_cq(2, 7);
    d
}

/// UD QP `qpn` with Q_Key `qkey`, in RTS, completing on CQ `cqn`.
fn ud_qp(d: &mut Dev, qpn: u32, cqn: u32, qkey: u32) {
    let ctx = |c: &mut QpCtx| {
        c.send_cqn = cqn;
        c.recv_cqn = cqn;
        c.dest_ip = qkey;
    };
    assert_eq!(d.create_qp_with(qpn, 7, 0, 0, 0, QP_TYPE_UD, ctx), CMD_OK);
    assert_eq!(d.modify(qpn, |c| c.state = QPS_RTR), CMD_OK);
    assert_eq!(d.modify(qpn, |c| c.state = QPS_RTS), CMD_OK);
}

/// The address vector of `dst`: an IPv4-mapped GID for an IPv4 address, sgid entry 0
/// (IPv4) or 1 (IPv6), and `mac`.
fn av(dst: IpAddr, mac: u64) -> UdAv {
    let (gid, sgid) = match dst {
        IpAddr::V4(ip) => (ip.to_ipv6_mapped().octets(), 0),
        IpAddr::V6(ip) => (ip.octets(), 1),
    };
    UdAv {
        dest_gid_lo: u64::from_le_bytes(gid[..8].try_into().unwrap()),
        dest_gid_hi: u64::from_le_bytes(gid[8..].try_into().unwrap()),
        dest_mac: mac,
        traffic_class: 0x20,
        hop_limit: 9,
        sgid_index: sgid,
        ..Default::default()
    }
}

/// Posts a UD SEND (op) to QP `dqpn` with Q_Key `qkey` through vector `v`.
#[allow(clippy::too_many_arguments)]
fn post_ud(d: &mut Dev, qpn: u32, op: u8, wr_id: u64, v: &UdAv, dqpn: u32, qkey: u32, sges: &[Sge]) {
    let hdr = WqeHeader {
        opcode: op,
        flags: WQE_FLAG_SIGNALED,
        num_sge: sges.len() as u8,
        wr_id,
        remote_addr: u64::from(dqpn),
        rkey: qkey,
        imm_data: 0xabcd_0123,
        ..Default::default()
    };
    let qp = d.e.qp(qpn).unwrap().clone();
    let pi = d.sq_pi[qpn as usize];
    let addr = qp.sq.addr + crate::ring::slot_offset(pi, qp.sq.log_size, qp.sq.log_stride);
    let mut buf = vec![0u8; 128];
    buf[..32].copy_from_slice(hdr.as_slice());
    buf[32..64].copy_from_slice(v.as_slice());
    for (i, s) in sges.iter().enumerate() {
        buf[64 + i * 16..80 + i * 16].copy_from_slice(s.as_slice());
    }
    d.ram.write(addr, &buf).unwrap();
    d.sq_pi[qpn as usize] = pi.wrapping_add(1);
    d.e.sq_doorbell(qpn, pi.wrapping_add(1));
}

/// Runs both engines and carries the frames (each to the node its destination names)
/// until nothing moves.
fn pump(devs: &mut [Dev], net: &Frames) {
    for _ in 0..64 {
        let mut moved = false;
        for d in devs.iter_mut() {
            while d.e.run(&d.mem, 64) {
                moved = true;
            }
        }
        let frames: Vec<Vec<u8>> = net.0.lock().unwrap().drain(..).collect();
        for f in frames {
            moved = true;
            let c = classify(&f).unwrap();
            let Kind::Roce { addr, l3, payload } = c.kind else { panic!("not RoCE") };
            let mut p = Packet::default();
            decode_roce(&f, l3, &payload, &mut p).unwrap();
            let to = usize::from(addr.dst_ip == IpAddr::V4(B) || addr.dst_ip == IpAddr::V6(B6));
            let d = &mut devs[to];
            d.e.on_packet(&d.mem, addr.src_ip, &p);
        }
        if !moved {
            return;
        }
    }
}

fn ipv4_checksum_ok(h: &[u8]) -> bool {
    let mut sum: u32 = h.chunks_exact(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

#[test]
fn a_ud_send_lands_after_its_grh_with_its_source_qp_on_both_transports() {
    for fabric in [false, true] {
        let net = Arc::new(Frames::default());
        let mut devs = vec![node(0, fabric.then_some(&net)), node(1, fabric.then_some(&net))];
        let (s, r) = if fabric { (0, 1) } else { (0, 0) };
        ud_qp(&mut devs[s], 3, 1, 0x7777);
        ud_qp(&mut devs[r], 5, 2, QKEY);
        let lk = devs[s].reg_mr(1, 7, RW, SRC, 1 << 16);
        let rk = devs[r].reg_mr(2, 7, RW, DST, 1 << 16);
        let out = devs[s].fill(SRC, 1000, 3);
        devs[r].recv(5, 50, &[sge(DST, 40, rk), sge(DST + 4096, 2000, rk)]);
        devs[r].recv(5, 51, &[sge(DST + 8192, 2048, rk)]);
        let dst4 = if fabric { B } else { A };
        let dst = IpAddr::V4(dst4);
        post_ud(&mut devs[s], 3, WQE_OP_SEND, 1, &av(dst, 0), 5, QKEY, &[sge(SRC, 1000, lk)]);
        post_ud(&mut devs[s], 3, WQE_OP_SEND_IMM, 2, &av(dst, 0), 5, QKEY, &[sge(SRC, 7, lk)]);
        pump(&mut devs, &net);
        let sent: Vec<(u64, u8, u32)> = devs[s].poll(1).iter().map(|c| (c.wr_id, c.status, c.byte_len)).collect();
        assert_eq!(sent, [(1, WC_SUCCESS, 1000), (2, WC_SUCCESS, 7)], "fabric {fabric}");
        let got = devs[r].poll(2);
        let recv: Vec<(u64, u8, u32, u32, u8)> = got.iter().map(|c| (c.wr_id, c.status, c.byte_len, c.src_qp, c.flags)).collect();
        let flags = CQE_FLAG_GRH;
        assert_eq!(recv, [(50, WC_SUCCESS, 1040, 3, flags), (51, WC_SUCCESS, 47, 3, flags | CQE_FLAG_IMM)], "fabric {fabric}");
        assert_eq!(got[1].imm_data, 0xabcd_0123);
        assert_eq!(devs[r].read(DST + 4096, 1000), out, "fabric {fabric}: the payload after the GRH area");
        assert_eq!(devs[r].read(DST + 8192 + 40, 7), out[..7]);
        // The GRH area: 20 bytes of 0 and the IPv4 header of the packet (A or B to itself).
        let grh = devs[r].read(DST, 40);
        assert_eq!(grh[..20], [0; 20]);
        let ip = &grh[20..];
        assert_eq!((ip[0], ip[1], ip[8], ip[9]), (0x45, 0x20, 9, 17), "version, TOS, TTL, UDP from the vector");
        assert_eq!((&ip[12..16], &ip[16..20]), (&A.octets()[..], &dst4.octets()[..]));
        assert!(ipv4_checksum_ok(ip), "a header ibv_create_ah_from_wc accepts");
        // 20 + UDP 8 + BTH 12 + DETH 8 + 1000 bytes + ICRC 4.
        assert_eq!(u16::from_be_bytes([ip[2], ip[3]]), 20 + 8 + 12 + 8 + 1000 + 4);
        let (tx, rx) = (devs[s].stats.clone(), devs[r].stats.clone());
        assert_eq!((tx.get(Counter::UdSent), rx.get(Counter::UdReceived), rx.get(Counter::UdDropped)), (2, 2, 0));
        assert_eq!(rx.get(Counter::AcksSent) + rx.get(Counter::NaksSent), 0, "UD acknowledges nothing");
    }
}

#[test]
fn over_ipv6_the_grh_is_the_ipv6_header() {
    let net = Arc::new(Frames::default());
    let mut devs = vec![node(0, Some(&net)), node(1, Some(&net))];
    ud_qp(&mut devs[0], 3, 1, QKEY);
    ud_qp(&mut devs[1], 5, 2, QKEY);
    let lk = devs[0].reg_mr(1, 7, RW, SRC, 1 << 16);
    let rk = devs[1].reg_mr(2, 7, RW, DST, 1 << 16);
    devs[0].fill(SRC, 64, 1);
    devs[1].recv(5, 9, &[sge(DST, 4096, rk)]);
    post_ud(&mut devs[0], 3, WQE_OP_SEND, 1, &av(IpAddr::V6(B6), 0x02_0b_0b_0b_0b_02), 5, QKEY, &[sge(SRC, 64, lk)]);
    pump(&mut devs, &net);
    let c = devs[1].poll(2);
    assert_eq!(c.iter().map(|c| (c.status, c.byte_len, c.flags)).collect::<Vec<_>>(), [(WC_SUCCESS, 104, CQE_FLAG_GRH | CQE_FLAG_IPV6)]);
    let grh = devs[1].read(DST, 40);
    assert_eq!((grh[0] >> 4, grh[6], grh[7]), (6, 17, 9));
    assert_eq!((&grh[8..24], &grh[24..40]), (&A6.octets()[..], &B6.octets()[..]));
    assert_eq!(devs[1].stats.get(Counter::PktsReceivedIpv6), 1);
    // An IPv6 destination off the port needs its MAC.
    post_ud(&mut devs[0], 3, WQE_OP_SEND, 2, &av(IpAddr::V6(B6), 0), 5, QKEY, &[sge(SRC, 64, lk)]);
    pump(&mut devs, &net);
    assert_eq!(devs[0].poll(1).iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(), [(1, WC_SUCCESS), (2, WC_LOC_QP_OP_ERR)]);
}

#[test]
fn the_q_key_must_match_and_bit_31_sends_the_qps_own() {
    let mut d = node(0, None);
    ud_qp(&mut d, 3, 1, QKEY);
    ud_qp(&mut d, 5, 2, QKEY);
    let lk = d.reg_mr(1, 7, RW, SRC, 1 << 16);
    let rk = d.reg_mr(2, 7, RW, DST, 1 << 16);
    d.fill(SRC, 100, 1);
    d.recv(5, 50, &[sge(DST, 4096, rk)]);
    let to = av(IpAddr::V4(A), 0);
    post_ud(&mut d, 3, WQE_OP_SEND, 1, &to, 5, QKEY ^ 1, &[sge(SRC, 100, lk)]);
    d.run();
    assert!(d.poll(2).is_empty(), "another Q_Key: dropped");
    assert_eq!((d.stats.get(Counter::QkeyViolations), d.poll(1).len()), (1, 1), "the sender still completes");
    post_ud(&mut d, 3, WQE_OP_SEND, 2, &to, 5, 0x8000_0000, &[sge(SRC, 100, lk)]);
    d.run();
    assert_eq!(d.poll(2).iter().map(|c| (c.wr_id, c.status, c.byte_len)).collect::<Vec<_>>(), [(50, WC_SUCCESS, 140)], "bit 31: the QP's own Q_Key");
    // INIT -> INIT and RTS -> RTS take a new Q_Key.
    assert_eq!(d.modify(5, |c| c.dest_ip = 0x42), CMD_OK);
    assert_eq!(d.e.qp(5).unwrap().qkey, 0x42);
}

#[test]
fn no_recv_or_a_recv_too_small_drops_the_message_and_keeps_the_recv() {
    let mut d = node(0, None);
    ud_qp(&mut d, 3, 1, QKEY);
    ud_qp(&mut d, 5, 2, QKEY);
    let lk = d.reg_mr(1, 7, RW, SRC, 1 << 16);
    let rk = d.reg_mr(2, 7, RW, DST, 1 << 16);
    let out = d.fill(SRC, 600, 4);
    let to = av(IpAddr::V4(A), 0);
    post_ud(&mut d, 3, WQE_OP_SEND, 1, &to, 5, QKEY, &[sge(SRC, 600, lk)]);
    d.run();
    assert_eq!(d.stats.get(Counter::UdDropped), 1, "no RECV");
    d.recv(5, 60, &[sge(DST, 639, rk)]); // one byte short of GRH + payload
    post_ud(&mut d, 3, WQE_OP_SEND, 2, &to, 5, QKEY, &[sge(SRC, 600, lk)]);
    d.run();
    assert!(d.poll(2).is_empty());
    assert_eq!(d.stats.get(Counter::UdDropped), 2, "too small");
    post_ud(&mut d, 3, WQE_OP_SEND, 3, &to, 5, QKEY, &[sge(SRC, 599, lk)]);
    d.run();
    assert_eq!(d.poll(2).iter().map(|c| (c.wr_id, c.status, c.byte_len)).collect::<Vec<_>>(), [(60, WC_SUCCESS, 639)], "the RECV stayed for the next");
    assert_eq!(d.read(DST + 40, 599), out[..599]);
    assert_eq!(d.e.qp(5).unwrap().state, super::qp::QpState::Rts, "no error of the QP's");
    assert!(d.events().is_empty());
}

#[test]
fn a_ud_send_queue_refuses_other_opcodes_long_messages_and_vectors_without_a_route() {
    let cases: [(u8, u32, UdAv, u8); 5] = [
        (WQE_OP_RDMA_WRITE, 8, av(IpAddr::V4(A), 0), WC_LOC_QP_OP_ERR),
        (WQE_OP_SEND, 1025, av(IpAddr::V4(A), 0), WC_LOC_LEN_ERR), // the port's 1500-byte MTU: 1024
        (WQE_OP_SEND, 8, UdAv { sgid_index: 7, ..av(IpAddr::V4(B), 0) }, WC_LOC_QP_OP_ERR),
        (WQE_OP_SEND, 8, av(IpAddr::V4(Ipv4Addr::new(224, 0, 0, 1)), 0), WC_LOC_QP_OP_ERR),
        (WQE_OP_SEND, 8, UdAv { flags: 1, ..av(IpAddr::V4(A), 0) }, WC_LOC_QP_OP_ERR),
    ];
    for (op, len, v, status) in cases {
        let net = Arc::new(Frames::default());
        let mut d = node(0, Some(&net));
        ud_qp(&mut d, 3, 1, QKEY);
        let lk = d.reg_mr(1, 7, RW, SRC, 1 << 16);
        post_ud(&mut d, 3, op, 1, &v, 5, QKEY, &[sge(SRC, len, lk)]);
        post_ud(&mut d, 3, WQE_OP_SEND, 2, &av(IpAddr::V4(A), 0), 5, QKEY, &[sge(SRC, 8, lk)]);
        d.run();
        let c: Vec<(u64, u8)> = d.poll(1).iter().map(|c| (c.wr_id, c.status)).collect();
        assert_eq!(c, [(1, status), (2, WC_WR_FLUSH_ERR)], "{op} {len} {v:?}");
        assert!(net.0.lock().unwrap().is_empty(), "nothing on the wire");
    }
}

#[test]
fn packets_of_the_other_services_are_dropped_both_ways() {
    let mut d = node(0, None);
    ud_qp(&mut d, 3, 1, QKEY);
    ud_qp(&mut d, 5, 2, QKEY);
    // RC QP 4, connected to itself: its SEND to QP 4 is RC; UD QP 3 sends to it.
    d.create_cq(4, 6);
    d.create_qp(4, 7, RW, 0);
    d.connect(4, 4);
    let lk = d.reg_mr(1, 7, RW, SRC, 1 << 16);
    let rk = d.reg_mr(2, 7, RW, DST, 1 << 16);
    d.recv(4, 40, &[sge(DST, 4096, rk)]);
    post_ud(&mut d, 3, WQE_OP_SEND, 1, &av(IpAddr::V4(A), 0), 4, QKEY, &[sge(SRC, 64, lk)]);
    d.run();
    assert!(d.poll(4).is_empty(), "an RC QP takes no UD SEND");
    assert_eq!(d.poll(1).len(), 1);
    // The same engine's RC packet to a UD QP: QP 4's path is loopback to itself, so hand a
    // fabric RC packet to UD QP 5 instead.
    let mut p = Packet::default();
    p.bth.opcode = crate::rnic::fabric::packet::op::SEND_ONLY;
    p.bth.pkey = 0xffff;
    p.bth.dest_qp = 5;
    p.payload = vec![0; 8];
    d.recv(5, 41, &[sge(DST + 8192, 4096, rk)]);
    d.e.on_packet(&d.mem, IpAddr::V4(B), &p);
    assert!(d.poll(2).is_empty(), "a UD QP takes no RC SEND");
    assert_eq!((d.stats.get(Counter::UdDropped), d.stats.get(Counter::PktsDropped)), (0, 2), "dropped as not its service, both ways");
}
