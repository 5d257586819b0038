//! Shared receive queues (contract minor 15, docs/verbs.md): QPs that receive from one SRQ
//! take its WQEs in ring order and complete them on their own CQs, in any order; the
//! limit event fires once when fewer WQEs than the armed limit remain; an SRQ a QP uses is
//! not reset; a QP on an SRQ has no RQ doorbell; a failing QP raises EQE_QP_LAST_WQE and
//! leaves the SRQ's WQEs to the others; an SRQ holds no CQ.

use super::qp::{QpState, Service};
use super::tests::{sge, Dev, DST, RW, SRC};
use crate::contract::abi::*;
use crate::contract::counters::Counter;

const SRQ: u32 = 5;

/// SRQ 5 (ring of 64 WQEs, PD 7, limit `limit`), receivers 2 and 4 on it, senders 1 -> 2
/// and 3 -> 4 (loopback), CQ n for QP n; an MR over SRC and DST; returns its key.
fn shared(limit: u32) -> (Dev, u32) {
    let mut d = Dev::new();
    for cqn in 1..=4 {
        d.create_cq(cqn, 6);
    }
    assert_eq!(d.create_qp_typed(SRQ, 7, 0, 0, limit, QP_TYPE_SRQ), CMD_OK);
    assert_eq!(d.e.qps[SRQ as usize].service, Service::Srq);
    // Senders that wait for a RECV forever (RNR retry 7).
    for qpn in [1, 3] {
        d.create_qp(qpn, 7, RW, 7);
    }
    for qpn in [2, 4] {
        assert_eq!(attach(&mut d, qpn, SRQ, QP_TYPE_RC), CMD_OK, "QP {qpn} on the SRQ");
    }
    d.connect(1, 2);
    d.connect(3, 4);
    let key = d.reg_mr(1, 7, RW, SRC, 16 << 20);
    (d, key)
}

/// QP `qpn` (service `qp_type`) created to receive from QP number `srq`.
fn attach(d: &mut Dev, qpn: u32, srq: u32, qp_type: u8) -> u32 {
    d.create_qp_with(qpn, 7, RW, 0, 0, qp_type, |c| (c.rq_log_stride, c.rq_addr, c.rq_log_size) = (0, u64::from(srq), 0))
}

/// `n` RECVs of 4 KiB on the SRQ, wr_id 100.., buffer i at DST + i * 4 KiB.
fn post_recvs(d: &mut Dev, key: u32, first: u64, n: u64) {
    for i in first..first + n {
        d.recv(SRQ, 100 + i, &[sge(DST + i * 4096, 4096, key)]);
    }
}

fn send(d: &mut Dev, qpn: u32, wr_id: u64, key: u32, seed: u8) -> Vec<u8> {
    let src = SRC + u64::from(seed) * 4096;
    let data = d.fill(src, 1000, seed);
    d.send(qpn, WQE_OP_SEND, wr_id, &[sge(src, 1000, key)], 0, 0);
    data
}

#[test]
fn two_qps_take_the_srqs_wqes_in_ring_order_and_complete_on_their_own_cqs() {
    let (mut d, key) = shared(0);
    post_recvs(&mut d, key, 0, 3);
    let a = send(&mut d, 1, 1, key, 1);
    d.run();
    let b = send(&mut d, 3, 2, key, 2);
    d.run();
    let c = send(&mut d, 1, 3, key, 3);
    d.run();
    let on2: Vec<(u64, u32, u8)> = d.poll(2).iter().map(|c| (c.wr_id, c.qpn, c.status)).collect();
    let on4: Vec<(u64, u32, u8)> = d.poll(4).iter().map(|c| (c.wr_id, c.qpn, c.status)).collect();
    assert_eq!(on2, [(100, 2, WC_SUCCESS), (102, 2, WC_SUCCESS)], "QP 2 took the first and the third");
    assert_eq!(on4, [(101, 4, WC_SUCCESS)], "QP 4 the second, on its own CQ");
    assert_eq!((d.read(DST, 1000), d.read(DST + 4096, 1000), d.read(DST + 8192, 1000)), (a, b, c), "each SEND in its WQE's buffer");
    let srq = &d.e.qps[SRQ as usize];
    assert_eq!((srq.rq.pi, srq.rq.ci), (3, 3), "three WQEs left the SRQ's ring");
    assert_eq!(d.e.qps[2].rq.ci, 0, "the receivers' own (absent) RQs untouched");
    // With the SRQ empty a SEND waits for a RECV (RNR), then lands when one is posted.
    let e = send(&mut d, 3, 4, key, 4);
    d.run();
    assert!(d.poll(4).is_empty(), "nothing to receive into");
    post_recvs(&mut d, key, 3, 1);
    let got = d.run_until(4, 1);
    assert_eq!(got.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(), [(103, WC_SUCCESS)]);
    assert_eq!(d.read(DST + 3 * 4096, 1000), e);
}

#[test]
fn the_limit_event_fires_once_below_the_armed_limit_and_can_be_armed_again() {
    let (mut d, key) = shared(2);
    post_recvs(&mut d, key, 0, 4);
    for (n, want) in [(1, vec![]), (2, vec![]), (3, vec![(EQE_SRQ_LIMIT, SRQ, 0)]), (4, vec![])] {
        send(&mut d, 1, n, key, n as u8);
        d.run();
        assert_eq!(d.events(), want, "after SEND {n} ({} WQEs left)", 4 - n);
    }
    assert_eq!(d.e.qps[SRQ as usize].srq_limit, 0, "disarmed by the event");
    // INIT -> INIT arms it again.
    assert_eq!(d.modify(SRQ, |c| c.rnr_timer_us = 1), CMD_OK);
    post_recvs(&mut d, key, 4, 1);
    send(&mut d, 3, 5, key, 5);
    d.run();
    assert_eq!(d.events(), [(EQE_SRQ_LIMIT, SRQ, 0)]);
}

#[test]
fn an_srq_in_use_stays_and_takes_no_qp_verbs() {
    let (mut d, key) = shared(0);
    assert_eq!(d.cmd(CMD_DESTROY_QP, SRQ), CMD_ERR_BUSY, "QPs 2 and 4 receive from it");
    assert_eq!(d.modify(SRQ, |c| c.state = QPS_RESET), CMD_ERR_BUSY);
    assert_eq!(d.modify(SRQ, |c| c.state = QPS_RTR), CMD_ERR_STATE, "an SRQ never leaves INIT");
    // A QP on an SRQ has no receive doorbell of its own; an SRQ no send doorbell.
    let before = d.stats.get(Counter::GuestErrors);
    d.e.rq_doorbell(2, 1);
    d.e.sq_doorbell(SRQ, 1);
    assert_eq!(d.stats.get(Counter::GuestErrors), before + 2);
    assert_eq!(d.e.qps[2].state, super::qp::QpState::Rts, "ignored, not fatal");
    // Only RC QPs attach, and only to an SRQ.
    assert_eq!(attach(&mut d, 6, SRQ, QP_TYPE_UC), CMD_ERR_INVALID, "UC on an SRQ");
    assert_eq!(attach(&mut d, 6, 1, QP_TYPE_RC), CMD_ERR_INVALID, "QP 1 is no SRQ");
    assert_eq!(attach(&mut d, 6, 9, QP_TYPE_RC), CMD_ERR_INVALID, "QPN 9 is nothing");
    // Once its QPs are gone it can be destroyed.
    for qpn in [2, 4] {
        assert_eq!(d.cmd(CMD_DESTROY_QP, qpn), CMD_OK);
    }
    assert_eq!(d.cmd(CMD_DESTROY_QP, SRQ), CMD_OK);
    let _ = key;
}

#[test]
fn a_failing_qp_raises_last_wqe_reached_and_the_others_go_on() {
    let (mut d, key) = shared(0);
    post_recvs(&mut d, key, 0, 2);
    // A SEND longer than its WQE's buffer: QP 2's RECV completes LOC_LEN_ERR, QP 2 fails.
    let src = SRC + 0x10_0000;
    d.send(1, WQE_OP_SEND, 1, &[sge(src, 8192, key)], 0, 0);
    d.run();
    let c = d.poll(2);
    assert_eq!(c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(), [(100, WC_LOC_LEN_ERR)]);
    let ev = d.events();
    assert!(ev.contains(&(EQE_QP_LAST_WQE, 2, 0)), "QP 2 left the SRQ: {ev:?}");
    assert_eq!(ev.iter().filter(|e| e.0 == EQE_QP_LAST_WQE).count(), 1, "once");
    // The SRQ's next WQE is QP 4's.
    let b = send(&mut d, 3, 2, key, 2);
    d.run();
    assert_eq!(d.poll(4).iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(), [(101, WC_SUCCESS)]);
    assert_eq!(d.read(DST + 4096, 1000), b);
}

/// An SRQ completes on no CQ: it does not hold CQ 0 (its context's CQ fields are not
/// read), so a driver may destroy its QPs' CQs before the SRQ, as rdma-core's
/// `ibv_srq_pingpong` does, and CQ 0 overflowing leaves the SRQ in INIT.
#[test]
fn an_srq_holds_no_cq() {
    let mut d = Dev::new();
    d.create_cq(0, 1);
    d.create_cq(2, 6);
    assert_eq!(d.create_qp_typed(SRQ, 7, 0, 0, 0, QP_TYPE_SRQ), CMD_OK);
    // QP 1 completes on CQ 0 (2 entries): three signaled WRITEs overflow it.
    let on_cq0 = |c: &mut QpCtx| (c.send_cqn, c.recv_cqn) = (0, 0);
    assert_eq!(d.create_qp_with(1, 7, RW, 7, 0, QP_TYPE_RC, on_cq0), CMD_OK);
    d.create_qp(2, 7, RW, 7);
    d.connect(1, 2);
    let key = d.reg_mr(1, 7, RW, SRC, 1 << 20);
    for i in 0..3 {
        d.send(1, WQE_OP_RDMA_WRITE, i, &[sge(SRC, 64, key)], DST, key);
    }
    d.run();
    assert_eq!(d.e.qps[1].state, QpState::Err, "QP 1 lost a completion");
    assert_eq!(d.e.qps[SRQ as usize].state, QpState::Init, "the SRQ is no user of CQ 0");
    assert_eq!(d.cmd(CMD_DESTROY_QP, 1), CMD_OK);
    assert_eq!(d.cmd(CMD_DESTROY_CQ, 0), CMD_OK, "CQ 0 goes while the SRQ lives");
}
