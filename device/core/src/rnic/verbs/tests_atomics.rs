//! Atomics (contract minor 12, docs/verbs.md §4): compare-and-swap and fetch-and-add on
//! both transports, what each side checks (alignment, access on MR and QP, the 8-byte
//! local buffer), a duplicate answered from the responder's history and never executed
//! again, and the READ/atomic limits of `rd_atomic`.

use super::tests::{sge, Dev, DST, RW, SRC, VA};
use super::tests_roles::{Pair, WireFaults, A, PSN_AB};
use crate::contract::abi::*;
use crate::contract::counters::Counter;
use crate::rnic::fabric::packet::{op, syndrome, AtomicEth, Bth, Packet};
use vm_memory::ByteValued;

const RWA: u8 = RW | ACCESS_REMOTE_ATOMIC;

/// An atomic WQE on `qpn`: operands, then its one SGE.
fn post_atomic(d: &mut Dev, opcode: u8, wr_id: u64, remote: u64, rkey: u32, ops: AtomicOps, local: Sge) {
    let hdr = WqeHeader { opcode, flags: WQE_FLAG_SIGNALED, num_sge: 1, wr_id, remote_addr: remote, rkey, ..Default::default() };
    let mut rest = ops.as_slice().to_vec();
    rest.extend_from_slice(local.as_slice());
    d.post(1, true, hdr, &[], &rest);
}

/// A pair (loopback or fabric) whose responder QP and MR allow atomics (`mr_access` for
/// the MR); the target holds `initial`. Returns the pair, the local MR's key and the rkey.
fn atomic_pair(fabric: bool, qp_access: u8, mr_access: u8, initial: u64) -> (Pair, u32, u32) {
    let mut p = Pair::new(fabric, 7, WireFaults::default());
    assert_eq!(p.resp().modify(2, |c| c.access = qp_access), CMD_OK);
    let lk = p.req().reg_mr(1, 7, RW, SRC, 64);
    let rk = p.resp().reg_mr(2, 7, mr_access, DST, 64);
    p.resp().put(DST, &initial);
    p.req().put(SRC, &0xeeee_eeee_eeee_eeeeu64);
    (p, lk, rk)
}

fn u64_at(d: &Dev, bus: u64) -> u64 {
    u64::from_le_bytes(d.read(bus, 8).try_into().unwrap())
}

#[test]
fn compare_and_swap_and_fetch_and_add_return_the_original_on_both_transports() {
    for fabric in [false, true] {
        let (mut p, lk, rk) = atomic_pair(fabric, RWA, RWA, 5);
        let ops = |swap_add, compare| AtomicOps { swap_add, compare };
        post_atomic(p.req(), WQE_OP_ATOMIC_CMP_SWP, 1, VA + DST, rk, ops(9, 4), sge(SRC, 8, lk));
        let c = p.run_until(true, 1, 1);
        assert_eq!((c[0].status, c[0].opcode, c[0].byte_len), (WC_SUCCESS, CQE_OP_ATOMIC_CMP_SWP, 8), "fabric {fabric}");
        assert_eq!((u64_at(p.req(), SRC), u64_at(p.resp(), DST)), (5, 5), "no match: unchanged, the original returned");
        post_atomic(p.req(), WQE_OP_ATOMIC_CMP_SWP, 2, VA + DST, rk, ops(9, 5), sge(SRC, 8, lk));
        assert_eq!(p.run_until(true, 1, 1)[0].status, WC_SUCCESS);
        assert_eq!((u64_at(p.req(), SRC), u64_at(p.resp(), DST)), (5, 9), "a match swaps");
        post_atomic(p.req(), WQE_OP_ATOMIC_FETCH_ADD, 3, VA + DST, rk, ops(u64::MAX, 0), sge(SRC, 8, lk));
        let c = p.run_until(true, 1, 1);
        assert_eq!((c[0].status, c[0].opcode), (WC_SUCCESS, CQE_OP_ATOMIC_FETCH_ADD));
        assert_eq!((u64_at(p.req(), SRC), u64_at(p.resp(), DST)), (9, 8), "adds, wrapping");
        assert_eq!(p.resp().stats.get(Counter::Atomics), 3);
    }
}

#[test]
fn misaligned_unpermitted_and_short_atomics_fail_as_the_rules_say() {
    let ops = AtomicOps { swap_add: 1, compare: 0 };
    for fabric in [false, true] {
        // Not 8-byte aligned: an invalid request; the responder goes to ERROR with its event.
        let (mut p, lk, rk) = atomic_pair(fabric, RWA, RWA, 0);
        post_atomic(p.req(), WQE_OP_ATOMIC_FETCH_ADD, 1, VA + DST + 4, rk, ops, sge(SRC, 8, lk));
        assert_eq!(p.run_until(true, 1, 1)[0].status, WC_REM_INV_REQ_ERR, "fabric {fabric}");
        assert_eq!(p.resp().events(), [(EQE_QP_REQ_ERR, 2, u32::from(QP_ERR_REMOTE_INVALID))]);
        assert_eq!(u64_at(p.resp(), DST), 0);
        // An MR, then a QP, without REMOTE_ATOMIC: remote access errors.
        for (qp_access, mr_access) in [(RWA, RW), (RW, RWA)] {
            let (mut p, lk, rk) = atomic_pair(fabric, qp_access, mr_access, 0);
            post_atomic(p.req(), WQE_OP_ATOMIC_FETCH_ADD, 1, VA + DST, rk, ops, sge(SRC, 8, lk));
            assert_eq!(p.run_until(true, 1, 1)[0].status, WC_REM_ACCESS_ERR, "fabric {fabric}, QP {qp_access:#x} MR {mr_access:#x}");
            assert_eq!(p.resp().events(), [(EQE_QP_ACCESS_ERR, 2, u32::from(QP_ERR_REMOTE_ACCESS))]);
            assert_eq!(u64_at(p.resp(), DST), 0, "nothing changed");
        }
        // A local buffer of 4 bytes: a local length error, nothing sent.
        let (mut p, lk, rk) = atomic_pair(fabric, RWA, RWA, 0);
        post_atomic(p.req(), WQE_OP_ATOMIC_FETCH_ADD, 1, VA + DST, rk, ops, sge(SRC, 4, lk));
        let c = p.run_until(true, 1, 1);
        assert_eq!((c[0].status, c[0].syndrome), (WC_LOC_LEN_ERR, u32::from(QP_ERR_LENGTH)));
        assert_eq!(p.resp().stats.get(Counter::Atomics), 0);
    }
}

#[test]
fn a_duplicate_atomic_is_answered_again_and_not_executed_twice() {
    let (mut p, _, rk) = atomic_pair(true, RWA, RWA, 100);
    let a = AtomicEth { va: VA + DST, rkey: rk, swap_add: 5, compare: 0 };
    let pkt = |psn| Packet {
        bth: Bth { opcode: op::FETCH_ADD, pkey: 0xffff, dest_qp: 2, psn, ack_req: true, ..Default::default() },
        atomic: Some(a),
        ..Default::default()
    };
    for _ in 0..2 {
        let d = p.resp();
        d.e.on_packet(&d.mem, A.into(), &pkt(PSN_AB)); // the second: its ACK was "lost"
    }
    let sent = wire(&p);
    let acks: Vec<(u8, u32, Option<u64>)> = sent.iter().map(|s| (s.bth.opcode, s.bth.psn, s.atomic_ack)).collect();
    assert_eq!(acks, [(op::ATOMIC_ACK, PSN_AB, Some(100)), (op::ATOMIC_ACK, PSN_AB, Some(100))], "answered twice with the original");
    assert!(sent.iter().all(|s| s.aeth.map(|a| a.syndrome) == Some(syndrome::ACK)));
    let d = p.resp();
    assert_eq!(u64_at(d, DST), 105, "added once");
    assert_eq!((d.stats.get(Counter::Atomics), d.stats.get(Counter::AtomicsReplayed)), (1, 1));
    // A "duplicate" that asks for something else is dropped, not executed.
    let other = Packet { atomic: Some(AtomicEth { swap_add: 7, ..a }), ..pkt(PSN_AB) };
    d.e.on_packet(&d.mem, A.into(), &other);
    assert!(wire(&p).is_empty(), "no answer");
    assert_eq!(u64_at(p.resp(), DST), 105);
}

/// The packets on the pair's wire, taken off it.
fn wire(p: &Pair) -> Vec<Packet> {
    p.net.as_ref().unwrap().queue.lock().unwrap().drain(..).map(|(_, _, pkt)| pkt).collect()
}

#[test]
fn rd_atomic_bounds_reads_and_atomics_on_each_side() {
    let ops = AtomicOps { swap_add: 1, compare: 0 };
    // Requester, max_rd_atomic 1 (low nibble): one READ or atomic in flight; the second
    // goes out when the first has its response. The device's 16 (0): both at once.
    for (rd_atomic, at_once) in [(0x01, 1), (0x00, 2)] {
        let mut p = Pair::with_rd_atomic(rd_atomic);
        assert_eq!(p.resp().modify(2, |c| c.access = RWA), CMD_OK);
        let lk = p.req().reg_mr(1, 7, RW, SRC, 64);
        let rk = p.resp().reg_mr(2, 7, RWA, DST, 64);
        post_atomic(p.req(), WQE_OP_ATOMIC_FETCH_ADD, 1, VA + DST, rk, ops, sge(SRC, 8, lk));
        post_atomic(p.req(), WQE_OP_ATOMIC_FETCH_ADD, 2, VA + DST, rk, ops, sge(SRC + 8, 8, lk));
        let d = p.req();
        while d.e.run(&d.mem, 64) {}
        assert_eq!(wire(&p).len(), at_once, "rd_atomic {rd_atomic:#x}");
    }
    let mut p = Pair::with_rd_atomic(0x11);
    assert_eq!(p.resp().modify(2, |c| c.access = RWA), CMD_OK);
    let lk = p.req().reg_mr(1, 7, RW, SRC, 64);
    let rk = p.resp().reg_mr(2, 7, RWA, DST, 64);
    post_atomic(p.req(), WQE_OP_ATOMIC_FETCH_ADD, 1, VA + DST, rk, ops, sge(SRC, 8, lk));
    post_atomic(p.req(), WQE_OP_ATOMIC_FETCH_ADD, 2, VA + DST, rk, ops, sge(SRC + 8, 8, lk));
    assert_eq!(p.run_until(true, 1, 2).iter().map(|c| c.status).collect::<Vec<_>>(), [WC_SUCCESS; 2], "one after the other");
    assert_eq!((u64_at(p.resp(), DST), u64_at(p.req(), SRC + 8)), (2, 1), "the second saw the first's result");
    // Responder, max_dest_rd_atomic 2 (high nibble): a third READ outstanding is refused.
    let mut p = Pair::with_rd_atomic(0x20);
    let rk = p.resp().reg_mr(2, 7, RW, DST, 1 << 20);
    let read = |k: u32| {
        let bth = Bth { opcode: op::READ_REQUEST, pkey: 0xffff, dest_qp: 2, psn: (PSN_AB + 64 * k) & 0xff_ffff, ack_req: true, ..Default::default() };
        Packet { bth, reth: Some(crate::rnic::fabric::packet::Reth { va: VA + DST, rkey: rk, len: 64 << 10 }), ..Default::default() }
    };
    let d = p.resp();
    for k in 0..3 {
        d.e.on_packet(&d.mem, A.into(), &read(k));
    }
    let naks: Vec<u32> = wire(&p).iter().filter(|s| s.aeth.is_some_and(|a| a.syndrome == syndrome::NAK_INV_REQ)).map(|s| s.bth.psn).collect();
    assert_eq!(naks, [read(2).bth.psn], "the third READ refused");
}
