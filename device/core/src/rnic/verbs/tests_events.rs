//! The event queue (contract minor 11, docs/verbs.md §9): each event the engine queues,
//! once, in order, with the QP error it goes with; none where a completion already tells.

use super::tests::{sge, Dev, DST, RW, SRC, VA};
use crate::contract::abi::*;
use crate::contract::counters::Counter;

#[test]
fn a_cq_overflow_is_a_cq_error_then_a_fatal_error_of_the_qp_that_lost_its_completion() {
    // CQ 1 has two entries; the third WRITE of QP 1 overflows it.
    let mut d = Dev::new();
    d.create_cq(1, 1);
    d.create_cq(2, 6);
    d.create_qp(1, 7, RW, 0);
    d.create_qp(2, 7, RW, 0);
    d.connect(1, 2);
    let lk = d.reg_mr(1, 7, RW, SRC, 64);
    let rk = d.reg_mr(2, 7, RW, DST, 64);
    for i in 0..3 {
        d.send(1, WQE_OP_RDMA_WRITE, i, &[sge(SRC, 8, lk)], VA + DST, rk);
    }
    d.run();
    assert_eq!(d.events(), [(EQE_CQ_ERR, 1, 0), (EQE_QP_FATAL, 1, u32::from(QP_ERR_CQ))]);
    d.run();
    assert!(d.events().is_empty(), "each event once");
}

#[test]
fn the_first_request_in_rtr_is_communication_established_once() {
    let mut d = Dev::new();
    d.create_cq(1, 6);
    d.create_cq(2, 6);
    d.create_qp(1, 7, RW, 0);
    d.create_qp(2, 7, RW, 0);
    // QP 2 stays in RTR (a passive side whose RTU has not come yet): it receives.
    for (qpn, dest, rts) in [(1, 2, true), (2, 1, false)] {
        assert_eq!(d.modify(qpn, |c| (c.state, c.dest_qpn) = (QPS_RTR, dest)), CMD_OK);
        if rts {
            assert_eq!(d.modify(qpn, |c| c.state = QPS_RTS), CMD_OK);
        }
    }
    let lk = d.reg_mr(1, 7, RW, SRC, 64);
    for i in 0..2 {
        let rk = d.reg_mr(2 + i as u32, 7, RW, DST, 64);
        d.recv(2, 10 + i, &[sge(DST, 64, rk)]);
        d.send(1, WQE_OP_SEND, i, &[sge(SRC, 8, lk)], 0, 0);
    }
    assert_eq!(d.run_until(2, 2).len(), 2, "both SENDs received in RTR");
    assert_eq!(d.events(), [(EQE_COMM_EST, 2, 0)], "once, for the QP in RTR only");
}

#[test]
fn an_overrunning_doorbell_is_a_fatal_qp_error_and_a_failed_wqe_is_no_event() {
    let mut d = Dev::pair(RW);
    d.e.sq_doorbell(1, 65); // a 64-entry ring
    d.run();
    assert_eq!(d.events(), [(EQE_QP_FATAL, 1, u32::from(QP_ERR_BAD_WQE))]);
    // A bad lkey completes in error: the completion tells, the event queue stays quiet.
    let mut d = Dev::pair(RW);
    d.send(1, WQE_OP_RDMA_WRITE, 1, &[sge(SRC, 8, 0x4242)], VA + DST, 0);
    d.run();
    assert_eq!(d.poll(1).first().map(|c| c.status), Some(WC_LOC_PROT_ERR));
    assert!(d.events().is_empty());
}

#[test]
fn a_full_queue_holds_events_until_the_driver_consumes_and_no_queue_holds_none() {
    // 70 QPs fail with nobody reading: the 64 entries fill, 6 events wait for EQ_CI.
    let mut d = Dev::new();
    for n in 1..=70 {
        d.create_cq(n, 0);
        d.create_qp(n, 7, RW, 0);
        d.e.sq_doorbell(n, 65);
    }
    d.run();
    let first = d.events();
    assert_eq!(first.len(), 64);
    d.run();
    let rest = d.events();
    let qpns: Vec<u32> = first.iter().chain(&rest).map(|e| e.1).collect();
    assert_eq!(qpns, (1..=70).collect::<Vec<_>>(), "every event once, in order, across the wrap");
    assert_eq!((d.stats.get(Counter::EqEvents), d.stats.get(Counter::EqOverflows)), (70, 0));
    // EQ_LOG 0: no queue; the RNIC_REG_LAST_ERROR latch alone reports.
    let mut tables = super::tests::tables();
    tables.eq_log = 0;
    assert_eq!(d.e.command(&d.mem, CMD_SET_EQ, 0, tables), CMD_OK);
    d.create_cq(71, 0);
    d.create_qp(71, 7, RW, 0);
    d.e.sq_doorbell(71, 65);
    d.run();
    assert_eq!(d.stats.get(Counter::EqEvents), 70, "nothing written");
    assert_ne!(d.last_error.load(std::sync::atomic::Ordering::SeqCst), 0, "the latch still reports");
    assert_eq!(d.e.command(&d.mem, CMD_SET_EQ, 1, super::tests::tables()), CMD_ERR_BAD_INDEX);
}

#[test]
fn a_qp_connected_to_itself_completes_a_refused_write_with_the_refusal() {
    // The responder's move to ERROR waits until its NAK has been handled: the QP's own
    // requester completes the WRITE with the remote access error, not with a flush.
    let mut d = Dev::new();
    d.create_cq(1, 6);
    d.create_qp(1, 7, RW, 0);
    d.connect(1, 1);
    let lk = d.reg_mr(1, 7, RW, SRC, 64);
    let rk = d.reg_mr(2, 7, RW, DST, 64);
    d.send(1, WQE_OP_RDMA_WRITE, 1, &[sge(SRC, 8, lk)], VA + DST, rk ^ 1);
    let c = d.run_until(1, 1);
    assert_eq!((c[0].wr_id, c[0].status, c[0].syndrome), (1, WC_REM_ACCESS_ERR, u32::from(QP_ERR_REMOTE_ACCESS)));
    assert!(d.events().is_empty(), "its completion told: no event");
}
