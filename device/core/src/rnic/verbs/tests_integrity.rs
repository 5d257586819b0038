//! RC integrity at the wire: what the responder does with requests that arrive again or
//! beyond its resources, and what the requester refuses from its peer (ACKs and NAKs
//! outside the window of what it sent, READ responses out of place). Packets are put on
//! the wire by hand, on a fabric pair of [`super::tests_roles`].

use super::tests::{sge, DST, RW, SRC, VA};
use super::tests_roles::{status, Pair, WireFaults, A, B, PSN_AB};
use crate::contract::abi::*;
use crate::contract::counters::Counter;
use crate::rnic::fabric::packet::Packet;

#[test]
fn a_resent_message_is_acknowledged_packet_by_packet_up_to_each_ones_psn() {
    // A four-packet WRITE goes through (one ACK, for the last packet, which asks); then
    // its packets arrive again (a requester resending after a lost ACK). Duplicates are not
    // executed again; each is acknowledged up to its own PSN, never beyond: the requester
    // has not resent the later packets yet (docs/fabric.md, "Soft-RoCE interop").
    let mut p = Pair::new(true, 7, WireFaults::default());
    let lk = p.req().reg_mr(1, 7, RW, SRC, 1 << 20);
    let rk = p.resp().reg_mr(2, 7, RW, DST, 1 << 20);
    let data = p.req().fill(SRC, 4096, 4);
    p.req().send(1, WQE_OP_RDMA_WRITE, 1, &[sge(SRC, 4096, lk)], VA + DST, rk);
    let requests = requests_of(&mut p);
    assert_eq!(requests.len(), 4, "1 KiB path MTU");
    assert_eq!(requests.iter().map(|r| r.bth.ack_req).collect::<Vec<_>>(), [false, false, false, true]);
    let psns: Vec<u32> = requests.iter().map(|r| r.bth.psn).collect();
    let ack = Some(crate::rnic::fabric::packet::syndrome::ACK);
    for (round, want) in [vec![None, None, None, Some(psns[3])], psns.iter().map(|p| Some(*p)).collect()].into_iter().enumerate() {
        let mut acks = Vec::new();
        for r in &requests {
            let sent = to_responder(&mut p, r);
            assert!(sent.len() <= 1 && sent.iter().all(|s| s.aeth.map(|a| a.syndrome) == ack), "round {round}: {sent:?}");
            acks.push(sent.first().map(|s| s.bth.psn));
        }
        assert_eq!(acks, want, "round {round}: the PSNs acknowledged");
        assert_eq!(p.resp().stats.get(Counter::DuplicateRequests), 4 * round as u64);
    }
    assert!(p.resp().read(DST, 4096) == data);
    assert_eq!(p.resp().stats.get(Counter::BytesWritten), 4096, "placed once");
}

#[test]
fn reads_beyond_the_responder_resources_are_refused_and_the_queue_stays_bounded() {
    use super::responder::MAX_READ_RESPONSES;
    use crate::rnic::fabric::packet::{op, syndrome};
    // A peer that ignores the responder resources it was told of: READ requests of 64
    // packets each, faster than the responses go out (the engine does not run in between).
    let mut p = Pair::new(true, 7, WireFaults::default());
    let rk = p.resp().reg_mr(2, 7, RW, DST, 4 << 20);
    let read = |k: u32| read_request(PSN_AB + 64 * k, VA + DST, rk, 64 << 10);
    let d = p.resp();
    for k in 0..=MAX_READ_RESPONSES as u32 {
        d.e.on_packet(&d.mem, A.into(), &read(k));
    }
    let sent = wire(&p);
    let naks: Vec<&Packet> = sent.iter().filter(|s| s.bth.opcode == op::ACK).collect();
    assert_eq!(naks.len(), 1, "one refusal: {:?}", naks);
    let nak = naks[0];
    assert_eq!((nak.bth.psn, nak.aeth.map(|a| a.syndrome)), (read(MAX_READ_RESPONSES as u32).bth.psn, Some(syndrome::NAK_INV_REQ)));
    // An invalid request: the responder goes to ERROR (IBA 9.9.3.1.2) and sends nothing
    // more, the READs it had accepted included.
    let d = p.resp();
    assert_eq!(d.e.qp(2).map(|q| q.state.to_abi()), Some(QPS_ERR));
    assert_eq!(d.events(), [(EQE_QP_REQ_ERR, 2, u32::from(QP_ERR_REMOTE_INVALID))]);
    while d.e.run(&d.mem, 64) {}
    assert!(sent.len() - 1 <= MAX_READ_RESPONSES * 64 && wire(&p).is_empty(), "bounded, then silent");
}

/// The packets on the pair's wire, taken off it.
fn wire(p: &Pair) -> Vec<Packet> {
    p.net.as_ref().unwrap().queue.lock().unwrap().drain(..).map(|(_, _, pkt)| pkt).collect()
}

/// The requester's packets of what QP 1 was just given (run, taken off the wire).
fn requests_of(p: &mut Pair) -> Vec<Packet> {
    let d = p.req();
    while d.e.run(&d.mem, 64) {}
    wire(p)
}

/// `pkt` to the responder's QP 2, as from its peer: what the responder sent in answer.
fn to_responder(p: &mut Pair, pkt: &Packet) -> Vec<Packet> {
    let d = p.resp();
    d.e.on_packet(&d.mem, A.into(), pkt);
    while d.e.run(&d.mem, 64) {}
    wire(p)
}

/// An RDMA READ request (AckReq) for the responder's QP 2.
fn read_request(psn: u32, va: u64, rkey: u32, len: u32) -> Packet {
    use crate::rnic::fabric::packet::{op, Bth, Reth};
    let bth = Bth { opcode: op::READ_REQUEST, pkey: 0xffff, dest_qp: 2, psn: psn & 0xff_ffff, ack_req: true, ..Default::default() };
    Packet { bth, reth: Some(Reth { va, rkey, len }), ..Default::default() }
}

/// An ACK or NAK to the requester's QP 1, as from its peer.
fn ack_to_requester(p: &mut Pair, psn: u32, syn: u8) {
    use crate::rnic::fabric::packet::{op, Aeth, Bth};
    let pkt = Packet {
        bth: Bth { opcode: op::ACK, pkey: 0xffff, dest_qp: 1, psn, ..Default::default() },
        aeth: Some(Aeth { syndrome: syn, msn: 1 }),
        ..Default::default()
    };
    let d = p.req();
    d.e.on_packet(&d.mem, B.into(), &pkt);
    while d.e.run(&d.mem, 64) {}
}

#[test]
fn acks_and_naks_outside_what_was_sent_are_dropped_and_counted() {
    use crate::rnic::fabric::packet::syndrome;
    // A WRITE whose packets never reached the responder: a forged ACK beyond them must not
    // complete it, nor a NAK for a PSN never sent fail it; the real ACK still does.
    let mut p = Pair::new(true, 7, WireFaults::default());
    let lk = p.req().reg_mr(1, 7, RW, SRC, 1 << 20);
    let rk = p.resp().reg_mr(2, 7, RW, DST, 1 << 20);
    let data = p.req().fill(SRC, 4096, 6);
    p.req().send(1, WQE_OP_RDMA_WRITE, 7, &[sge(SRC, 4096, lk)], VA + DST, rk);
    let requests = requests_of(&mut p);
    let last = requests[3].bth.psn;
    let dropped = p.req().stats.get(Counter::BadResponses);
    for (psn, syn) in [
        (last + 1, syndrome::ACK),
        (last + 5000, syndrome::ACK),
        (last + 1, syndrome::NAK_REM_ACCESS),
        (PSN_AB.wrapping_sub(2) & 0xff_ffff, syndrome::NAK_REM_OP),
    ] {
        ack_to_requester(&mut p, psn & 0xff_ffff, syn);
        assert!(p.req().poll(1).is_empty(), "ACK/NAK {syn:#x} for PSN {psn:#x} completed nothing");
    }
    assert_eq!(p.req().stats.get(Counter::BadResponses), dropped + 4, "each counted");
    // The responder gets the packets; its ACK completes the WRITE, once.
    let d = p.resp();
    for r in &requests {
        d.e.on_packet(&d.mem, A.into(), r);
    }
    let c = p.run_until(true, 1, 1);
    assert_eq!(c.iter().map(status).collect::<Vec<_>>(), [(7, WC_SUCCESS, 0)]);
    assert!(p.resp().read(DST, 4096) == data);
}

#[test]
fn a_read_response_out_of_place_fails_the_read_and_places_nothing_more() {
    use crate::rnic::fabric::packet::{op, Aeth, Bth};
    // A four-packet READ answered by a broken peer: a FIRST response short of the MTU, then
    // (another READ) a response that ends the message at its first packet.
    for (opcode, len) in [(op::READ_RESPONSE_FIRST, 512usize), (op::READ_RESPONSE_ONLY, 1024)] {
        let mut p = Pair::new(true, 7, WireFaults::default());
        let lk = p.req().reg_mr(1, 7, RW, SRC, 1 << 20);
        p.req().send(1, WQE_OP_RDMA_READ, 9, &[sge(SRC, 4096, lk)], VA + DST, 0x100);
        let req = requests_of(&mut p);
        assert_eq!(req.len(), 1, "one READ request");
        let aeth = (opcode == op::READ_RESPONSE_ONLY).then_some(Aeth { syndrome: 0, msn: 1 });
        let bth = Bth { opcode, pkey: 0xffff, dest_qp: 1, psn: req[0].bth.psn, ..Default::default() };
        let pkt = Packet { bth, aeth, payload: vec![0xee; len], ..Default::default() };
        let dropped = p.req().stats.get(Counter::BadResponses);
        let d = p.req();
        d.e.on_packet(&d.mem, B.into(), &pkt);
        while d.e.run(&d.mem, 64) {}
        let c = p.req().poll(1);
        assert_eq!(
            c.iter().map(|c| (c.wr_id, c.status, c.syndrome)).collect::<Vec<_>>(),
            [(9, WC_BAD_RESP_ERR, u32::from(QP_ERR_BAD_RESPONSE))],
            "opcode {opcode:#x}, {len} bytes"
        );
        assert_eq!(p.req().stats.get(Counter::BadResponses), dropped + 1);
        assert!(p.req().read(SRC, 4096).iter().all(|b| *b != 0xee), "nothing of it placed");
    }
}

#[test]
fn a_duplicate_read_is_answered_only_as_the_read_it_repeats() {
    use crate::rnic::fabric::packet::op;
    // One 4 KiB READ executed; then "duplicates" of it: from its third PSN for what is
    // left (answered: two responses from there), and three that ask for something else
    // (another address, a longer length, another rkey): dropped and counted.
    let mut p = Pair::new(true, 7, WireFaults::default());
    let rk = p.resp().reg_mr(2, 7, RW, DST, 1 << 20);
    let rk2 = p.resp().reg_mr(3, 7, RW, DST + (1 << 20), 1 << 20);
    let answer = |p: &mut Pair, pkt: Packet| to_responder(p, &pkt).iter().map(|s| (s.bth.opcode, s.bth.psn, s.payload.len())).collect::<Vec<_>>();
    let first = PSN_AB;
    assert_eq!(answer(&mut p, read_request(first, VA + DST, rk, 4096)).len(), 4, "the READ: four responses");
    let again = answer(&mut p, read_request(first + 2, VA + DST + 2048, rk, 2048));
    let (f, l) = ((first + 2) & 0xff_ffff, (first + 3) & 0xff_ffff);
    assert_eq!(again, [(op::READ_RESPONSE_FIRST, f, 1024), (op::READ_RESPONSE_LAST, l, 1024)], "resent from its third PSN");
    let dropped = p.resp().stats.get(Counter::PktsDropped);
    for (va, rkey, len) in [(VA + DST + 4096, rk, 2048), (VA + DST + 2048, rk, 1 << 19), (VA + DST + (1 << 20) + 2048, rk2, 2048)] {
        assert!(answer(&mut p, read_request(first + 2, va, rkey, len)).is_empty(), "{va:#x} {rkey:#x} {len}: not what was read");
    }
    assert_eq!(p.resp().stats.get(Counter::PktsDropped), dropped + 3);
    assert_eq!(p.resp().stats.get(Counter::DuplicateRequests), 4);
}

/// A WRITE packet for the responder's QP 2: `len` bytes of 0x5a, with a RETH when given; the
/// last packet of a message asks for an ACK.
fn write_packet(opcode: u8, psn: u32, pkey: u16, reth: Option<crate::rnic::fabric::packet::Reth>, len: usize) -> Packet {
    use crate::rnic::fabric::packet::{op, Bth};
    let ack_req = opcode != op::WRITE_FIRST && opcode != op::WRITE_MIDDLE;
    let bth = Bth { opcode, pkey, dest_qp: 2, psn: psn & 0xff_ffff, ack_req, ..Default::default() };
    Packet { bth, reth, payload: vec![0x5a; len], ..Default::default() }
}

/// The syndromes of the ACK/NAKs among `sent`, with their PSNs.
fn acks(sent: &[Packet]) -> Vec<(u32, u8)> {
    sent.iter().filter_map(|s| s.aeth.map(|a| (s.bth.psn, a.syndrome))).collect()
}

#[test]
fn a_write_shorter_than_its_reth_length_is_an_invalid_request() {
    use crate::rnic::fabric::packet::{op, syndrome, Reth};
    // A WRITE ONLY that announces 2 KiB and carries 1 KiB; and a FIRST + LAST that announce
    // 4 KiB and end after 2 KiB. Neither may be acknowledged as done: the requester would
    // complete a WRITE whose bytes were never placed.
    let mut p = Pair::new(true, 7, WireFaults::default());
    let rk = p.resp().reg_mr(2, 7, RW, DST, 1 << 20);
    let reth = |len| Some(Reth { va: VA + DST, rkey: rk, len });
    let sent = to_responder(&mut p, &write_packet(op::WRITE_ONLY, PSN_AB, 0xffff, reth(2048), 1024));
    assert_eq!(acks(&sent), [(PSN_AB, syndrome::NAK_INV_REQ)]);
    assert!(p.resp().read(DST, 1024).iter().all(|b| *b != 0x5a), "nothing placed");
    assert_eq!(p.resp().stats.get(Counter::BytesWritten), 0);

    let mut p = Pair::new(true, 7, WireFaults::default());
    let rk = p.resp().reg_mr(2, 7, RW, DST, 1 << 20);
    let reth = |len| Some(Reth { va: VA + DST, rkey: rk, len });
    assert!(acks(&to_responder(&mut p, &write_packet(op::WRITE_FIRST, PSN_AB, 0xffff, reth(4096), 1024))).is_empty());
    let sent = to_responder(&mut p, &write_packet(op::WRITE_LAST, PSN_AB + 1, 0xffff, None, 1024));
    assert_eq!(acks(&sent), [((PSN_AB + 1) & 0xff_ffff, syndrome::NAK_INV_REQ)], "the short LAST refused");
    assert_eq!(p.resp().stats.get(Counter::BytesWritten), 1024, "the LAST not placed");
}

#[test]
fn reads_and_writes_of_more_than_2_31_bytes_are_invalid_requests() {
    use crate::rnic::fabric::packet::{op, syndrome, Reth};
    // IBA's largest message is 2^31 bytes: one byte more is an invalid request (not a
    // remote access error, whatever the MR covers).
    // The responder goes to ERROR with an invalid-request event after each (IBA 9.9.3.1.2).
    let over = (1u32 << 31) + 1;
    for write in [false, true] {
        let mut p = Pair::new(true, 7, WireFaults::default());
        let rk = p.resp().reg_mr(2, 7, RW, DST, 1 << 20);
        let reth = Some(Reth { va: VA + DST, rkey: rk, len: over });
        let pkt = if write { write_packet(op::WRITE_FIRST, PSN_AB, 0xffff, reth, 1024) } else { read_request(PSN_AB, VA + DST, rk, over) };
        let sent = to_responder(&mut p, &pkt);
        assert_eq!(acks(&sent), [(PSN_AB, syndrome::NAK_INV_REQ)], "write {write}");
        assert_eq!(p.resp().e.qp(2).map(|q| (q.state.to_abi(), q.err_reason)), Some((QPS_ERR, QP_ERR_REMOTE_INVALID)));
        assert_eq!(p.resp().events(), [(EQE_QP_REQ_ERR, 2, u32::from(QP_ERR_REMOTE_INVALID))]);
    }
}

#[test]
fn packets_outside_the_default_partition_are_dropped_and_counted() {
    use crate::rnic::fabric::packet::{op, Reth};
    // P_Key 0x8001 is another partition: dropped without an answer. 0x7fff is a limited
    // member of the default one, which a full member (the QP, 0xffff) talks to.
    let mut p = Pair::new(true, 7, WireFaults::default());
    let rk = p.resp().reg_mr(2, 7, RW, DST, 1 << 20);
    let reth = Some(Reth { va: VA + DST, rkey: rk, len: 1024 });
    let sent = to_responder(&mut p, &write_packet(op::WRITE_ONLY, PSN_AB, 0x8001, reth, 1024));
    assert!(sent.is_empty(), "no answer: {sent:?}");
    assert_eq!((p.resp().stats.get(Counter::PkeyViolations), p.resp().stats.get(Counter::PktsDropped)), (1, 1));
    assert!(p.resp().read(DST, 1024).iter().all(|b| *b != 0x5a), "nothing placed");
    let sent = to_responder(&mut p, &write_packet(op::WRITE_ONLY, PSN_AB, 0x7fff, reth, 1024));
    assert_eq!(acks(&sent).len(), 1, "accepted and acknowledged");
    assert!(p.resp().read(DST, 1024).iter().all(|b| *b == 0x5a));
}
