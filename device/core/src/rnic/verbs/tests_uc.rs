//! UC QPs (contract minor 13) on a loopback pair and a fabric pair: SENDs and WRITEs land
//! with nothing acknowledged and complete as they leave; a message with a missing packet,
//! no RECV or a remote access error is dropped and the QP goes on; READs and atomics are
//! not UC operations; a packet of the other service is dropped; the service is taken at
//! RESET -> INIT and only the two defined values are.

use super::tests::{sge, Dev, DST, RW, SRC, VA};
use super::tests_roles::{Pair, WireFaults};
use crate::contract::abi::*;
use crate::contract::counters::Counter;
use std::time::Duration;

#[test]
fn uc_sends_and_writes_land_unacknowledged_on_both_transports() {
    for fabric in [false, true] {
        let mut p = Pair::uc(fabric, WireFaults::default());
        let lk = p.req().reg_mr(1, 7, RW, SRC, 1 << 20);
        let rk = p.resp().reg_mr(2, 7, RW, DST, 1 << 20);
        let out = p.req().fill(SRC, 1 << 16, 5);
        for i in 0..4u64 {
            p.resp().recv(2, 100 + i, &[sge(DST + (1 << 16) + i * 4096, 4096, rk)]);
        }
        // 3000 bytes: three packets at the pair's 1024-byte MTU.
        p.req().send(1, WQE_OP_SEND, 1, &[sge(SRC, 3000, lk)], 0, 0);
        p.req().send(1, WQE_OP_RDMA_WRITE, 2, &[sge(SRC + 4096, 3000, lk)], VA + DST, rk);
        p.req().send(1, WQE_OP_RDMA_WRITE_IMM, 3, &[sge(SRC + 8192, 100, lk)], VA + DST + 8192, rk);
        p.req().send(1, WQE_OP_SEND_IMM, 4, &[sge(SRC + 12288, 0, lk)], 0, 0);
        let sent = p.run_until(true, 1, 4);
        let ids: Vec<(u64, u8)> = sent.iter().map(|c| (c.wr_id, c.status)).collect();
        assert_eq!(ids, [(1, WC_SUCCESS), (2, WC_SUCCESS), (3, WC_SUCCESS), (4, WC_SUCCESS)], "fabric {fabric}");
        let got = p.run_until(false, 2, 3);
        let recv: Vec<(u64, u8, u32, u8)> = got.iter().map(|c| (c.wr_id, c.status, c.byte_len, c.opcode)).collect();
        assert_eq!(recv, [(100, WC_SUCCESS, 3000, CQE_OP_RECV), (101, WC_SUCCESS, 100, CQE_OP_RECV_RDMA_IMM), (102, WC_SUCCESS, 0, CQE_OP_RECV)]);
        assert!(got[1].flags & CQE_FLAG_IMM != 0 && got[1].imm_data == 0x1234_5678);
        assert_eq!(p.resp().read(DST + (1 << 16), 3000), out[..3000], "fabric {fabric}: SEND");
        assert_eq!(p.resp().read(DST, 3000), out[4096..7096], "fabric {fabric}: WRITE");
        assert_eq!(p.resp().read(DST + 8192, 100), out[8192..8292], "fabric {fabric}: WRITE with immediate");
        let (req, resp) = (p.devs[0].stats.clone(), p.devs[p.devs.len() - 1].stats.clone());
        assert_eq!(resp.get(Counter::AcksSent) + resp.get(Counter::NaksSent), 0, "UC acknowledges nothing");
        assert_eq!((req.get(Counter::Timeouts), req.get(Counter::Retransmits)), (0, 0));
        if fabric {
            // SEND 3 + WRITE 3 + WRITE_IMM 1 + SEND_IMM 1 packets, each once; none back.
            assert_eq!(resp.get(Counter::PktsReceived), 8);
            assert_eq!(req.get(Counter::PktsReceived), 0);
        }
        assert_eq!(resp.get(Counter::UcDropped), 0);
    }
}

#[test]
fn uc_has_no_reads_or_atomics() {
    for op in [WQE_OP_RDMA_READ, WQE_OP_ATOMIC_FETCH_ADD] {
        let mut p = Pair::uc(true, WireFaults::default());
        let lk = p.req().reg_mr(1, 7, RW | ACCESS_REMOTE_ATOMIC, SRC, 1 << 16);
        let rk = p.resp().reg_mr(2, 7, RW | ACCESS_REMOTE_ATOMIC, DST, 1 << 16);
        p.req().send(1, op, 9, &[sge(SRC, 8, lk)], VA + DST, rk);
        let c = p.run_until(true, 1, 1);
        assert_eq!(c.iter().map(|c| (c.wr_id, c.status, c.syndrome)).collect::<Vec<_>>(), [(9, WC_LOC_QP_OP_ERR, u32::from(QP_ERR_BAD_WQE))], "{op}");
        p.settle(Duration::from_millis(2));
        assert_eq!(p.devs[1].stats.get(Counter::PktsReceived), 0, "{op}: nothing went on the wire");
    }
}

/// The RECVs complete in order, each with exactly one message whole; every message that
/// completes is one that was sent, and later messages land after lost ones.
#[test]
fn a_message_with_a_lost_packet_is_dropped_and_the_next_one_lands() {
    let mut p = Pair::uc(true, WireFaults { drop: 6, ..Default::default() });
    let lk = p.req().reg_mr(1, 7, RW, SRC, 1 << 20);
    let rk = p.resp().reg_mr(2, 7, RW, DST, 1 << 20);
    const N: u64 = 40;
    let msgs: Vec<Vec<u8>> = (0..N).map(|i| p.req().fill(SRC + i * 4096, 3000, i as u8)).collect();
    for i in 0..N {
        p.resp().recv(2, 500 + i, &[sge(DST + i * 4096, 4096, rk)]);
    }
    for i in 0..N {
        p.req().send(1, WQE_OP_SEND, i, &[sge(SRC + i * 4096, 3000, lk)], 0, 0);
    }
    let sent = p.run_until(true, 1, N as usize);
    assert!(sent.len() == N as usize && sent.iter().all(|c| c.status == WC_SUCCESS), "every UC WQE completes as sent");
    p.settle(Duration::from_millis(20));
    let got = p.resp().poll(2);
    assert!(!got.is_empty() && got.len() < N as usize, "some messages lost a packet: {} of {N} landed", got.len());
    let mut from = 0;
    for (k, c) in got.iter().enumerate() {
        assert_eq!((c.wr_id, c.status, c.byte_len), (500 + k as u64, WC_SUCCESS, 3000), "RECV {k}: the next one, one whole message");
        let data = p.resp().read(DST + k as u64 * 4096, 3000);
        let j = (from..N as usize).find(|&j| msgs[j] == data).expect("RECV {k} holds a message that was sent, whole");
        from = j + 1;
    }
    let resp = &p.devs[1].stats;
    assert!(resp.get(Counter::UcDropped) + resp.get(Counter::OutOfSequence) > 0);
    assert_eq!(resp.get(Counter::NaksSent) + resp.get(Counter::AcksSent), 0);
    assert_eq!(p.devs[0].stats.get(Counter::Retransmits), 0, "UC never sends again");
}

#[test]
fn no_recv_and_a_bad_rkey_drop_the_message_and_the_qp_goes_on() {
    let mut p = Pair::uc(true, WireFaults::default());
    let lk = p.req().reg_mr(1, 7, RW, SRC, 1 << 20);
    let rk = p.resp().reg_mr(2, 7, RW, DST, 1 << 20);
    let out = p.req().fill(SRC, 8192, 7);
    // No RECV posted: the SEND is dropped, the requester's WQE succeeds all the same.
    p.req().send(1, WQE_OP_SEND, 1, &[sge(SRC, 2000, lk)], 0, 0);
    // An rkey the responder never registered, and a SEND longer than its RECV.
    p.req().send(1, WQE_OP_RDMA_WRITE, 2, &[sge(SRC, 2000, lk)], VA + DST, rk ^ 0x100);
    let c = p.run_until(true, 1, 2);
    assert!(c.len() == 2 && c.iter().all(|c| c.status == WC_SUCCESS));
    assert_eq!(p.resp().stats.get(Counter::UcDropped), 2);
    p.resp().recv(2, 50, &[sge(DST + 4096, 1000, rk)]);
    p.req().send(1, WQE_OP_SEND, 3, &[sge(SRC, 2000, lk)], 0, 0);
    p.run_until(true, 1, 1);
    p.settle(Duration::from_millis(5));
    assert!(p.resp().poll(2).is_empty(), "a SEND longer than the RECV is dropped, the RECV kept");
    assert_eq!(p.resp().stats.get(Counter::UcDropped), 3);
    // The QP took none of it as an error: the kept RECV takes the next message.
    p.req().send(1, WQE_OP_SEND, 4, &[sge(SRC + 4096, 1000, lk)], 0, 0);
    let r = p.run_until(false, 2, 1);
    assert_eq!(r.iter().map(|c| (c.wr_id, c.status, c.byte_len)).collect::<Vec<_>>(), [(50, WC_SUCCESS, 1000)]);
    assert_eq!(p.resp().read(DST + 4096, 1000), out[4096..5096]);
    assert!(p.resp().events().is_empty(), "no QP error event");
}

#[test]
fn a_packet_of_the_other_service_is_dropped() {
    // One engine: UC QP 1 to RC QP 2 (loopback), which must take none of it.
    let mut d = Dev::new();
    d.create_cq(1, 7);
    d.create_cq(2, 7);
    assert_eq!(d.create_qp_typed(1, 7, RW, 7, 0, QP_TYPE_UC), CMD_OK);
    d.create_qp(2, 7, RW, 7);
    d.connect(1, 2);
    let lk = d.reg_mr(1, 7, RW, SRC, 1 << 16);
    let rk = d.reg_mr(2, 7, RW, DST, 1 << 16);
    d.fill(SRC, 100, 1);
    d.recv(2, 7, &[sge(DST, 4096, rk)]);
    d.send(1, WQE_OP_SEND, 1, &[sge(SRC, 100, lk)], 0, 0);
    for _ in 0..16 {
        d.e.run(&d.mem, 64);
    }
    assert_eq!(d.poll(1).iter().map(|c| c.status).collect::<Vec<_>>(), [WC_SUCCESS]);
    assert!(d.poll(2).is_empty(), "the RC QP took nothing");
    assert_eq!(d.stats.get(Counter::PktsDropped), 1);
}

#[test]
fn the_service_is_taken_at_reset_to_init() {
    let mut d = Dev::new();
    d.create_cq(1, 7);
    assert_eq!(d.create_qp_typed(1, 7, RW, 7, 0, 4), CMD_ERR_INVALID, "no such service");
    assert_eq!(d.create_qp_typed(1, 7, RW, 7, 0, 0xff), CMD_ERR_INVALID);
    assert_eq!(d.create_qp_typed(1, 7, RW, 7, 0, QP_TYPE_UC), CMD_OK);
    assert_eq!(d.e.qps[1].service, super::qp::Service::Uc);
}
