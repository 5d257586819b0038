//! RDMA FLUSH and ATOMIC WRITE (IBTA 1.5, contract minor 14, docs/verbs.md §4.3) on both
//! transports: what each completes with, what the responder checks (FETH, placement-type
//! access on MR and QP, range, alignment and size), a duplicate answered again and never
//! executed twice, UC refusing both, and both counted against max_rd_atomic.

use super::tests::{sge, Dev, DST, RW, SRC, VA};
use super::tests_roles::{Pair, WireFaults, A, PSN_AB};
use crate::contract::abi::*;
use crate::contract::counters::Counter;
use crate::rnic::fabric::packet::{op, Bth, Packet, Reth};
use vm_memory::ByteValued;

const RWF: u8 = RW | ACCESS_FLUSH_GLOBAL;

fn post_atomic_write(d: &mut Dev, wr_id: u64, remote: u64, rkey: u32, value: u64) {
    let hdr = WqeHeader { opcode: WQE_OP_ATOMIC_WRITE, flags: WQE_FLAG_SIGNALED, wr_id, remote_addr: remote, rkey, ..Default::default() };
    let ops = AtomicOps { swap_add: value, compare: 0 };
    d.post(1, true, hdr, &[], ops.as_slice());
}

fn post_flush(d: &mut Dev, wr_id: u64, remote: u64, rkey: u32, len: u32, ptype: u8, level: u8) {
    let hdr = WqeHeader {
        opcode: WQE_OP_FLUSH,
        flags: WQE_FLAG_SIGNALED,
        rsvd0: level << 4 | ptype,
        imm_data: len,
        wr_id,
        remote_addr: remote,
        rkey,
        ..Default::default()
    };
    d.post(1, true, hdr, &[], &[]);
}

/// A pair whose responder QP has `qp_access` and whose target MR (64 bytes at DST) has
/// `mr_access`; returns it with the local MR's key and the rkey.
fn pair(fabric: bool, qp_access: u8, mr_access: u8) -> (Pair, u32, u32) {
    let mut p = Pair::new(fabric, 7, WireFaults::default());
    assert_eq!(p.resp().modify(2, |c| c.access = qp_access), CMD_OK);
    let lk = p.req().reg_mr(1, 7, RW, SRC, 64);
    let rk = p.resp().reg_mr(2, 7, mr_access, DST, 64);
    (p, lk, rk)
}

fn u64_at(d: &Dev, bus: u64) -> u64 {
    u64::from_le_bytes(d.read(bus, 8).try_into().unwrap())
}

fn wire(p: &Pair) -> Vec<Packet> {
    p.net.as_ref().unwrap().queue.lock().unwrap().drain(..).map(|(_, _, pkt)| pkt).collect()
}

#[test]
fn atomic_write_places_its_8_bytes_and_completes_on_both_transports() {
    for fabric in [false, true] {
        let (mut p, _, rk) = pair(fabric, RW, RW);
        post_atomic_write(p.req(), 1, VA + DST + 8, rk, 0x0102_0304_0506_0708);
        let c = p.run_until(true, 1, 1);
        assert_eq!((c[0].status, c[0].opcode, c[0].byte_len, c[0].wr_id), (WC_SUCCESS, CQE_OP_ATOMIC_WRITE, 0, 1), "fabric {fabric}");
        assert_eq!(p.resp().read(DST + 8, 8), 0x0102_0304_0506_0708u64.to_le_bytes(), "memory order kept");
        assert_eq!((u64_at(p.resp(), DST), u64_at(p.resp(), DST + 16)), (0, 0), "nothing beside it");
        assert_eq!(p.resp().stats.get(Counter::AtomicWrites), 1);
    }
}

#[test]
fn atomic_write_refuses_misaligned_targets_and_missing_write_access() {
    for fabric in [false, true] {
        let (mut p, _, rk) = pair(fabric, RW, RW);
        post_atomic_write(p.req(), 1, VA + DST + 4, rk, 7);
        assert_eq!(p.run_until(true, 1, 1)[0].status, WC_REM_INV_REQ_ERR, "fabric {fabric}: not 8-byte aligned");
        assert_eq!(p.resp().events(), [(EQE_QP_REQ_ERR, 2, u32::from(QP_ERR_REMOTE_INVALID))]);
        let read_only = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ;
        for (qp_access, mr_access) in [(read_only, RW), (RW, read_only)] {
            let (mut p, _, rk) = pair(fabric, qp_access, mr_access);
            post_atomic_write(p.req(), 1, VA + DST, rk, 7);
            assert_eq!(p.run_until(true, 1, 1)[0].status, WC_REM_ACCESS_ERR, "fabric {fabric}: QP {qp_access:#x} MR {mr_access:#x}");
            assert_eq!(u64_at(p.resp(), DST), 0, "nothing written");
            assert_eq!(p.resp().stats.get(Counter::AtomicWrites), 0);
        }
    }
}

#[test]
fn flush_after_a_write_completes_for_a_range_and_for_the_whole_mr() {
    for fabric in [false, true] {
        let (mut p, lk, rk) = pair(fabric, RWF, RWF);
        p.req().put(SRC, &0x5a5a_5a5a_5a5a_5a5au64);
        let hdr = WqeHeader { opcode: WQE_OP_RDMA_WRITE, num_sge: 1, wr_id: 1, remote_addr: VA + DST, rkey: rk, ..Default::default() };
        p.req().post(1, true, hdr, &[sge(SRC, 8, lk)], &[]);
        post_flush(p.req(), 2, VA + DST, rk, 8, FLUSH_TYPE_GLOBAL, FLUSH_LEVEL_RANGE);
        let c = p.run_until(true, 1, 1);
        assert_eq!((c[0].status, c[0].opcode, c[0].wr_id, c[0].byte_len), (WC_SUCCESS, CQE_OP_FLUSH, 2, 0), "fabric {fabric}");
        assert_eq!(u64_at(p.resp(), DST), 0x5a5a_5a5a_5a5a_5a5a, "the WRITE before it is placed");
        // The whole MR: the address and length are not looked at.
        post_flush(p.req(), 3, 0xdead_0000, rk, 12_345_678, FLUSH_TYPE_GLOBAL, FLUSH_LEVEL_MR);
        assert_eq!(p.run_until(true, 1, 1)[0].status, WC_SUCCESS, "fabric {fabric}: MR level");
        // A zero-length range inside the MR is a valid no-op.
        post_flush(p.req(), 4, VA + DST, rk, 0, FLUSH_TYPE_GLOBAL, FLUSH_LEVEL_RANGE);
        assert_eq!(p.run_until(true, 1, 1)[0].status, WC_SUCCESS, "fabric {fabric}: empty range");
        assert_eq!(p.resp().stats.get(Counter::Flushes), 3);
    }
}

#[test]
fn flush_needs_the_placement_types_access_on_mr_and_qp_and_a_range_inside_the_mr() {
    let cases: [(u8, u8, u8, u64, u32, &str); 4] = [
        (RWF, RWF, FLUSH_TYPE_PERSISTENT, VA + DST, 8, "persistence the MR does not grant"),
        (RW, RWF, FLUSH_TYPE_GLOBAL, VA + DST, 8, "a QP without FLUSH_GLOBAL"),
        (RWF, RW, FLUSH_TYPE_GLOBAL, VA + DST, 8, "an MR without FLUSH_GLOBAL"),
        (RWF, RWF, FLUSH_TYPE_GLOBAL, VA + DST + 60, 8, "a range past the MR's end"),
    ];
    for fabric in [false, true] {
        for (qp_access, mr_access, ptype, va, len, what) in cases {
            let (mut p, _, rk) = pair(fabric, qp_access, mr_access);
            post_flush(p.req(), 1, va, rk, len, ptype, FLUSH_LEVEL_RANGE);
            assert_eq!(p.run_until(true, 1, 1)[0].status, WC_REM_ACCESS_ERR, "fabric {fabric}: {what}");
            assert_eq!(p.resp().events(), [(EQE_QP_ACCESS_ERR, 2, u32::from(QP_ERR_REMOTE_ACCESS))], "{what}");
            assert_eq!(p.resp().stats.get(Counter::Flushes), 0);
        }
    }
}

#[test]
fn a_duplicate_atomic_write_or_flush_is_answered_again_and_not_executed_twice() {
    let (mut p, _, rk) = pair(true, RWF, RWF);
    let aw = Packet {
        bth: Bth { opcode: op::ATOMIC_WRITE, pkey: 0xffff, dest_qp: 2, psn: PSN_AB, ack_req: true, ..Default::default() },
        reth: Some(Reth { va: VA + DST, rkey: rk, len: 8 }),
        payload: 11u64.to_le_bytes().to_vec(),
        ..Default::default()
    };
    let d = p.resp();
    d.e.on_packet(&d.mem, A.into(), &aw);
    while d.e.run(&d.mem, 64) {}
    d.put(DST, &99u64); // changed after the first execution: a re-execution would undo it
    d.e.on_packet(&d.mem, A.into(), &aw); // its response was "lost"
    while d.e.run(&d.mem, 64) {}
    let sent = wire(&p);
    let answers: Vec<(u8, u32, usize)> = sent.iter().map(|s| (s.bth.opcode, s.bth.psn, s.payload.len())).collect();
    assert_eq!(answers, [(op::READ_RESPONSE_ONLY, PSN_AB, 0); 2], "answered twice, zero-length READ responses");
    let d = p.resp();
    assert_eq!(u64_at(d, DST), 99, "not written again");
    assert_eq!((d.stats.get(Counter::AtomicWrites), d.stats.get(Counter::AtomicsReplayed)), (1, 1));
    // A FLUSH next, then its duplicate; a "duplicate" naming another rkey is dropped.
    let next = (PSN_AB + 1) & 0xff_ffff;
    let flush = Packet {
        bth: Bth { opcode: op::FLUSH, pkey: 0xffff, dest_qp: 2, psn: next, ack_req: true, ..Default::default() },
        feth: Some(u32::from(FLUSH_TYPE_GLOBAL)),
        reth: Some(Reth { va: VA + DST, rkey: rk, len: 8 }),
        ..Default::default()
    };
    for pkt in [flush.clone(), flush.clone(), Packet { reth: Some(Reth { va: VA + DST, rkey: rk ^ 1, len: 8 }), ..flush }] {
        d.e.on_packet(&d.mem, A.into(), &pkt);
        while d.e.run(&d.mem, 64) {}
    }
    let answers: Vec<u32> = wire(&p).iter().map(|s| s.bth.psn).collect();
    assert_eq!(answers, [next, next], "the odd duplicate gets no answer");
    let d = p.resp();
    assert_eq!((d.stats.get(Counter::Flushes), d.stats.get(Counter::AtomicsReplayed)), (1, 2));
}

#[test]
fn a_malformed_feth_on_the_wire_is_an_invalid_request() {
    let (mut p, _, rk) = pair(true, RWF, RWF);
    let d = p.resp();
    let pkt = Packet {
        bth: Bth { opcode: op::FLUSH, pkey: 0xffff, dest_qp: 2, psn: PSN_AB, ack_req: true, ..Default::default() },
        feth: Some(0x0100_0001), // a bit beyond the level and type fields
        reth: Some(Reth { va: VA + DST, rkey: rk, len: 8 }),
        ..Default::default()
    };
    d.e.on_packet(&d.mem, A.into(), &pkt);
    let sent = wire(&p);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].aeth.map(|a| a.syndrome), Some(crate::rnic::fabric::packet::syndrome::NAK_INV_REQ));
    assert_eq!(p.resp().events(), [(EQE_QP_REQ_ERR, 2, u32::from(QP_ERR_REMOTE_INVALID))]);
}

#[test]
fn uc_refuses_both_and_rd_atomic_counts_them() {
    for wqe in [WQE_OP_FLUSH, WQE_OP_ATOMIC_WRITE] {
        let mut p = Pair::uc(true, WireFaults::default());
        let rk = p.resp().reg_mr(2, 7, RWF, DST, 64);
        let hdr = WqeHeader {
            opcode: wqe,
            flags: WQE_FLAG_SIGNALED,
            rsvd0: if wqe == WQE_OP_FLUSH { FLUSH_TYPE_GLOBAL } else { 0 },
            remote_addr: VA + DST,
            rkey: rk,
            ..Default::default()
        };
        p.req().post(1, true, hdr, &[], &[0; 16]);
        assert_eq!(p.run_until(true, 1, 1)[0].status, WC_LOC_QP_OP_ERR, "opcode {wqe} on UC");
        assert!(wire(&p).is_empty(), "nothing sent");
    }
    // max_rd_atomic 1: the second of two FLUSHes waits for the first's response.
    let mut p = Pair::with_rd_atomic(0x01);
    assert_eq!(p.resp().modify(2, |c| c.access = RWF), CMD_OK);
    let rk = p.resp().reg_mr(2, 7, RWF, DST, 64);
    post_flush(p.req(), 1, VA + DST, rk, 8, FLUSH_TYPE_GLOBAL, FLUSH_LEVEL_RANGE);
    post_flush(p.req(), 2, VA + DST, rk, 8, FLUSH_TYPE_GLOBAL, FLUSH_LEVEL_RANGE);
    let d = p.req();
    while d.e.run(&d.mem, 64) {}
    assert_eq!(wire(&p).len(), 1, "one FLUSH outstanding");
}
