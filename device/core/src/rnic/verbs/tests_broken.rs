//! The contract's broken states (docs/programming.md): what the device does when the
//! driver has lost a completion (CQ overflow) or its doorbell writes arrive out of order.

use super::qp::QpState;
use super::tests::{sge, Dev, DST, RINGS, RW, SRC, VA};
use crate::contract::abi::*;
use crate::contract::counters::Counter;
use std::sync::atomic::Ordering;

#[test]
fn a_cq_that_overflowed_is_in_error_and_takes_every_qp_that_uses_it_to_error() {
    // CQ 1 (two entries) serves QPs 1 and 3. Three WRITEs on QP 1 overflow it: the third
    // completion is lost. From then on CQ 1 takes no CQE, even with room, and QP 3, which
    // did nothing, is in ERROR too: its work could no longer be reported.
    let mut d = Dev::new();
    d.create_cq(1, 1);
    for cqn in [2, 4] {
        d.create_cq(cqn, 6);
    }
    for qpn in [1, 2, 4] {
        d.create_qp(qpn, 7, RW, 0);
    }
    // QP 3 as create_qp makes it, with its completions on CQ 1.
    let st = d.modify(3, |c| {
        let base = RINGS + 3 * 0x4000;
        *c = QpCtx {
            state: QPS_INIT,
            sq_log_size: 6,
            rq_log_size: 6,
            sq_log_stride: 7,
            rq_log_stride: 7,
            access: RW,
            pd: 7,
            send_cqn: 1,
            recv_cqn: 1,
            sq_addr: base,
            rq_addr: base + 0x2000,
            ..Default::default()
        };
    });
    assert_eq!(st, CMD_OK);
    d.connect(1, 2);
    d.connect(3, 4);
    let lk = d.reg_mr(1, 7, RW, SRC, 64);
    let rk = d.reg_mr(2, 7, RW, DST, 64);
    for i in 0..3 {
        d.send(1, WQE_OP_RDMA_WRITE, i, &[sge(SRC, 8, lk)], VA + DST, rk);
    }
    d.run();
    assert_eq!(d.last_error.load(Ordering::SeqCst), u64::from(ASYNC_ERR_CQ_OVERFLOW) << 24 | 1);
    for qpn in [1, 3] {
        let qp = d.e.qp(qpn).unwrap();
        assert_eq!((qp.state, qp.err_reason), (QpState::Err, QP_ERR_CQ), "QP {qpn}");
    }
    assert_eq!(d.e.qp(4).unwrap().state, QpState::Rts, "QP 4 uses CQ 4 only");
    assert_eq!(d.poll(1).iter().map(|c| c.wr_id).collect::<Vec<_>>(), [0, 1], "the ring's two entries");
    // Room again, and a WQE on QP 3 to flush: nothing is written into the CQ in error.
    d.send(3, WQE_OP_RDMA_WRITE, 9, &[sge(SRC, 8, lk)], VA + DST, rk);
    d.run();
    assert!(d.poll(1).is_empty(), "no CQE after the overflow");
    // Recovery: destroy the QPs and the CQ, create them again.
    for qpn in 1..=3 {
        assert_eq!(d.cmd(CMD_DESTROY_QP, qpn), CMD_OK);
    }
    assert_eq!(d.cmd(CMD_DESTROY_CQ, 1), CMD_OK);
    d.create_cq(1, 1);
    d.create_qp(1, 7, RW, 0);
    d.create_qp(2, 7, RW, 0);
    (d.cq_ci[1], d.sq_pi[1], d.rq_pi[1], d.sq_pi[2], d.rq_pi[2]) = (0, 0, 0, 0, 0);
    d.connect(1, 2);
    d.send(1, WQE_OP_RDMA_WRITE, 5, &[sge(SRC, 8, lk)], VA + DST, rk);
    assert_eq!(d.run_until(1, 1).iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(), [(5, WC_SUCCESS)]);
}

#[test]
fn a_doorbell_behind_the_producer_index_is_ignored_not_a_step_back() {
    // Two CPUs ring the same SQ: the write of index 3 lands before the write of index 2.
    // The late 2 is stale: ignored and counted; all three WQEs run, the QP stays up.
    let mut d = Dev::pair(RW);
    let lk = d.reg_mr(1, 7, RW, SRC, 64);
    let rk = d.reg_mr(2, 7, RW, DST, 64);
    for i in 0..3 {
        d.send(1, WQE_OP_RDMA_WRITE, i, &[sge(SRC, 8, lk)], VA + DST, rk);
    }
    d.e.sq_doorbell(1, 2);
    assert_eq!(d.stats.get(Counter::StaleDoorbells), 1);
    assert_eq!(d.e.qp(1).unwrap().sq.pi, 3, "the producer index did not move back");
    let c = d.run_until(1, 3);
    assert_eq!(c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(), [(0, WC_SUCCESS), (1, WC_SUCCESS), (2, WC_SUCCESS)]);
    assert_eq!(d.e.qp(1).unwrap().state, QpState::Rts);
    // Behind the consumer index too (a doorbell of 1 after all three ran): still ignored.
    d.e.sq_doorbell(1, 1);
    assert_eq!(d.stats.get(Counter::StaleDoorbells), 2);
    assert_eq!(d.e.qp(1).unwrap().state, QpState::Rts);
}

#[test]
fn with_timeout_0_an_unanswered_wqe_waits_until_the_driver_moves_the_qp_to_error() {
    use super::tests_roles::{Pair, WireFaults};
    use std::time::Duration;
    // IBA timeout 0 is "wait forever": a WRITE to a peer that never answers (every packet
    // lost) is neither retransmitted nor completed, however long it waits; moving the QP to
    // ERROR completes it once (flushed). R-FAB-1's "exactly once" holds with that step.
    let mut p = Pair::with_timeout(WireFaults { drop: 1, ..Default::default() }, 0);
    let lk = p.req().reg_mr(1, 7, RW, SRC, 4096);
    p.req().send(1, WQE_OP_RDMA_WRITE, 3, &[sge(SRC, 64, lk)], VA + DST, 0x100);
    // 100 ms: 50 retransmission periods of the shortest timer (2 ms).
    p.settle(Duration::from_millis(100));
    assert!(p.req().poll(1).is_empty(), "no completion");
    assert_eq!((p.req().stats.get(Counter::Timeouts), p.req().stats.get(Counter::Retransmits)), (0, 0));
    assert_eq!(p.req().modify(1, |c| c.state = QPS_ERR), CMD_OK);
    p.settle(Duration::from_millis(10));
    let c = p.req().poll(1);
    assert_eq!(c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(), [(3, WC_WR_FLUSH_ERR)], "flushed, once");
}
