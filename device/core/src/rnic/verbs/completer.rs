//! The completer (as rxe's `rxe_comp.c`): per-QP retry budgets and the handling of what
//! comes back from the responder. ACKs complete in-flight WQEs in order; READ responses
//! carry data into the local buffers and acknowledge what precedes them; a sequence NAK
//! or the retransmission timer resends from the first unacknowledged PSN (against
//! `retry_cnt`); an RNR NAK waits [`rnr_delay`] and resends (against `rnr_retry`, 7:
//! forever); access, invalid-request and operational NAKs fail the WQE and the QP. A
//! acknowledgement restores the transport budget; one that advances the oldest
//! unacknowledged PSN restores the RNR budget too (IBA 9.7.5.1.4, 9.7.5.2.8). An ACK or
//! NAK outside the window of what was sent, and a READ response whose opcode or length
//! is not the one of its position, are refused (dropped and counted; the bad response
//! fails the READ with WC_BAD_RESP_ERR). An ATOMIC ACKNOWLEDGE completes the atomic at
//! its PSN with the original value it carries (contract minor 12). A FLUSH or ATOMIC
//! WRITE (minor 14) completes with a READ response of zero bytes, refused as any other
//! READ response out of place. A UC QP (minor 13) takes no response at all
//! (BAD_RESPONSES).

use super::ctx::{dma_fault, fail, Ctx};
use super::opcode::{info, Kind};
use super::qp::{Qp, Service};
use super::requester::{complete_front, fail_front, InFlight, Requester};
use super::transport::{psn_add, psn_diff, Msg};
use crate::contract::abi::*;
use crate::contract::counters::Counter;
use crate::platform::mem::access::{DmaKind, DmaTag};
use crate::rnic::fabric::packet::{op, syndrome, PSN_MASK};
use std::time::Duration;

/// Shortest wait after an RNR NAK, whatever the QP's `rnr_timer_us` says.
pub const MIN_RNR_DELAY: Duration = Duration::from_micros(10);

/// The wait after an RNR NAK (the one rule for both transports).
pub fn rnr_delay(qp: &Qp) -> Duration {
    Duration::from_micros(u64::from(qp.rnr_timer_us)).max(MIN_RNR_DELAY)
}

/// Retry budgets of one QP.
#[derive(Clone, Debug, Default)]
pub struct Completer {
    pub retry_cnt: u8,
    pub retries_left: u8,
    pub rnr_retry: u8,
    pub rnr_left: u8,
}

impl Completer {
    /// Takes the RTS attributes.
    pub fn ready_to_send(&mut self, retry_cnt: u8, rnr_retry: u8) {
        self.retry_cnt = retry_cnt.min(7);
        self.retries_left = self.retry_cnt;
        self.rnr_retry = rnr_retry;
        self.rnr_left = rnr_retry;
    }

    /// Progress was acknowledged: the RNR budget is whole again.
    fn progress(&mut self) {
        self.rnr_left = self.rnr_retry;
    }
}

/// The retransmission timer fired.
pub fn on_timeout(ctx: &mut Ctx, qpn: u32, qp: &mut Qp, rq: &mut Requester, cs: &mut Completer) {
    rq.timer = None;
    if rq.inflight.is_empty() {
        return;
    }
    ctx.stats().inc(Counter::Timeouts);
    if cs.retries_left == 0 {
        crate::guest_info!("{}: QP {qpn}: retries exhausted", ctx.name);
        fail_front(ctx, qpn, qp, rq, fail(WC_RETRY_EXC_ERR, QP_ERR_RETRY));
        return;
    }
    cs.retries_left -= 1;
    let una = rq.una;
    rq.rewind(una);
}

/// Completes in-flight WQEs fully acknowledged through `psn` (READs need their data).
fn acked_through(ctx: &mut Ctx, qpn: u32, qp: &mut Qp, rq: &mut Requester, cs: &mut Completer, psn: u32) {
    while let Some(front) = rq.inflight.front() {
        if front.needs_response() || psn_diff(psn, front.last_psn()) < 0 {
            break;
        }
        complete_front(ctx, qpn, qp, rq);
    }
    let mut next = psn_add(psn, 1);
    // An ACK beyond a READ whose responses have not all arrived: they were lost (the
    // responder executes in order). Acknowledge up to the missing response only and
    // resend from there (as rxe's completer retries on such an ACK).
    let missing = rq.inflight.front().filter(|w| w.needs_response()).map(|w| psn_add(w.first_psn, w.received));
    let implied_nak = missing.filter(|&m| psn_diff(next, m) > 0);
    if let Some(m) = implied_nak {
        next = m;
    }
    if psn_diff(next, rq.una) > 0 && psn_diff(rq.next_psn, next) >= 0 {
        rq.una = next;
        if psn_diff(rq.send_psn, rq.una) < 0 {
            rq.send_psn = rq.una;
        }
        cs.progress();
    }
    if let Some(m) = implied_nak {
        rq.rewind(m);
    }
    // Any acknowledgement shows the path works: the transport budget is whole again.
    cs.retries_left = cs.retry_cnt;
    rq.restart_timer(ctx.now());
}

/// An ACK, NAK or READ response for requester QP `qp`.
pub fn on_response(ctx: &mut Ctx, qpn: u32, qp: &mut Qp, rq: &mut Requester, cs: &mut Completer, m: &Msg) {
    let psn = m.bth.psn;
    // UC expects nothing back: whatever comes is forged or misdirected.
    if qp.service == Service::Uc {
        ctx.stats().inc(Counter::BadResponses);
        return;
    }
    let Some(op) = info(m.bth.opcode) else { return };
    if op.kind == Kind::Ack {
        let Some(aeth) = m.aeth else { return };
        let before = psn_add(psn, PSN_MASK);
        // An ACK names a PSN sent (or repeats the last one acknowledged); a NAK names a
        // request sent and not yet acknowledged. Anything else is forged or stale: it
        // would complete WQEs whose data never arrived, or fail them.
        let last_sent = psn_add(rq.sent_high, PSN_MASK);
        let lowest = if aeth.syndrome & syndrome::KIND_MASK == 0 { psn_add(rq.una, PSN_MASK) } else { rq.una };
        if psn_diff(psn, lowest) < 0 || psn_diff(psn, last_sent) > 0 {
            ctx.stats().inc(Counter::BadResponses);
            crate::guest_warn!("{}: QP {qpn}: dropped an ACK/NAK (syndrome {:#04x}) for PSN {psn}, outside {lowest}..={last_sent}", ctx.name, aeth.syndrome);
            return;
        }
        match aeth.syndrome & syndrome::KIND_MASK {
            0x00 => acked_through(ctx, qpn, qp, rq, cs, psn),
            syndrome::RNR_NAK => {
                acked_through(ctx, qpn, qp, rq, cs, before);
                let infinite = cs.rnr_retry == 7;
                if !infinite && cs.rnr_left == 0 {
                    fail_front(ctx, qpn, qp, rq, fail(WC_RNR_RETRY_EXC_ERR, QP_ERR_RNR));
                    return;
                }
                if !infinite {
                    cs.rnr_left -= 1;
                }
                rq.hold_until = Some(ctx.now() + rnr_delay(qp));
                rq.resend_from = Some(psn);
                ctx.stats().inc(Counter::RnrRetries);
            }
            _ if aeth.syndrome == syndrome::NAK_SEQ_ERR => {
                acked_through(ctx, qpn, qp, rq, cs, before);
                if cs.retries_left == 0 {
                    fail_front(ctx, qpn, qp, rq, fail(WC_RETRY_EXC_ERR, QP_ERR_RETRY));
                    return;
                }
                cs.retries_left -= 1;
                rq.resend_from = Some(psn);
            }
            _ => {
                acked_through(ctx, qpn, qp, rq, cs, before);
                let (status, reason) = m.detail.unwrap_or(match aeth.syndrome {
                    syndrome::NAK_REM_ACCESS => (WC_REM_ACCESS_ERR, QP_ERR_REMOTE_ACCESS),
                    syndrome::NAK_INV_REQ => (WC_REM_INV_REQ_ERR, QP_ERR_REMOTE_INVALID),
                    _ => (WC_REM_OP_ERR, QP_ERR_REMOTE_INVALID),
                });
                fail_front(ctx, qpn, qp, rq, fail(status, reason));
            }
        }
        return;
    }
    if op.kind == Kind::AtomicAck {
        on_atomic_ack(ctx, qpn, qp, rq, cs, m);
        return;
    }
    if op.kind != Kind::ReadResponse {
        return;
    }
    // READ response: must be the next packet the oldest READ expects.
    let Some(pos) = rq.inflight.iter().position(InFlight::answered_by_read_response) else { return };
    let w = &rq.inflight[pos];
    if psn != psn_add(w.first_psn, w.received) {
        return; // out of order or duplicate: the timer recovers
    }
    if pos > 0 {
        // A READ response acknowledges everything before the READ.
        let before = psn_add(w.first_psn, PSN_MASK);
        acked_through(ctx, qpn, qp, rq, cs, before);
    }
    let mtu = rq.mtu;
    let Some(w) = rq.inflight.front_mut().filter(|w| w.answered_by_read_response() && psn == psn_add(w.first_psn, w.received)) else { return };
    let off = u64::from(w.received) * u64::from(mtu);
    let n = m.payload.len();
    // Each response carries exactly its share (a full MTU, the rest in the last), in an
    // opcode of its position: FIRST or MIDDLE before the last packet (FIRST where a resent
    // request restarted the stream), LAST or ONLY for it.
    let last = w.received + 1 == w.npkts;
    let want = if last { w.len.saturating_sub(off) } else { u64::from(mtu) };
    let placed =
        matches!((last, m.bth.opcode), (false, op::READ_RESPONSE_FIRST | op::READ_RESPONSE_MIDDLE) | (true, op::READ_RESPONSE_LAST | op::READ_RESPONSE_ONLY));
    if n != want || !placed {
        ctx.stats().inc(Counter::BadResponses);
        crate::guest_warn!("{}: QP {qpn}: READ response {psn} (opcode {:#04x}, {n} bytes) out of place: {want} bytes expected", ctx.name, m.bth.opcode);
        fail_front(ctx, qpn, qp, rq, fail(WC_BAD_RESP_ERR, QP_ERR_BAD_RESPONSE));
        return;
    }
    ctx.mem.tag(DmaTag { mr: w.local.first_mr(), ..DmaTag::qp(DmaKind::Payload, qpn) });
    let placed = ctx.local_part(&w.local, off, n).and_then(|segs| {
        m.payload.place(ctx.mem, &segs, 0).map_err(|e| {
            crate::guest_warn!("{}: QP {qpn}: {e}", ctx.name);
            dma_fault(ctx.stats(), &e)
        })
    });
    if let Err(f) = placed {
        fail_front(ctx, qpn, qp, rq, f);
        return;
    }
    ctx.stats().add(Counter::BytesRead, n);
    w.received += 1;
    let done = w.received == w.npkts;
    let got = psn_add(w.first_psn, w.received);
    if psn_diff(got, rq.una) > 0 {
        rq.una = got;
    }
    cs.progress();
    cs.retries_left = cs.retry_cnt;
    if done {
        if let Some(mut w) = rq.inflight.pop_front() {
            if let Some(t) = w.stamps.as_mut() {
                t.stamp(crate::observe::timing::wqe_log::Stage::Placed);
            }
            rq.log_done(ctx.wqe_log, qpn, qp.dest_qpn, &mut w, WC_SUCCESS);
            ctx.finish_send(qpn, qp, &w.hdr, Ok(w.len));
        }
    }
    rq.restart_timer(ctx.now());
}

/// An ATOMIC ACKNOWLEDGE: the response the oldest READ or atomic waits for must be this
/// atomic's (a READ expected instead is a bad response). Its original value goes into the
/// atomic's 8-byte buffer, then it completes; everything before it is acknowledged.
fn on_atomic_ack(ctx: &mut Ctx, qpn: u32, qp: &mut Qp, rq: &mut Requester, cs: &mut Completer, m: &Msg) {
    let psn = m.bth.psn;
    let Some(pos) = rq.inflight.iter().position(InFlight::needs_response) else { return };
    let w = &rq.inflight[pos];
    if psn != w.first_psn {
        return; // out of order or duplicate: the timer recovers
    }
    let Some(value) = m.atomic_ack.filter(|_| w.atomic.is_some()) else {
        ctx.stats().inc(Counter::BadResponses);
        crate::guest_warn!("{}: QP {qpn}: an atomic acknowledge for PSN {psn}, where a READ response was expected", ctx.name);
        fail_front(ctx, qpn, qp, rq, fail(WC_BAD_RESP_ERR, QP_ERR_BAD_RESPONSE));
        return;
    };
    if pos > 0 {
        acked_through(ctx, qpn, qp, rq, cs, psn_add(psn, PSN_MASK));
    }
    let Some(w) = rq.inflight.front().filter(|w| w.atomic.is_some() && w.first_psn == psn) else { return };
    ctx.mem.tag(DmaTag { mr: w.local.first_mr(), ..DmaTag::qp(DmaKind::Payload, qpn) });
    let bytes = value.to_le_bytes();
    let placed = ctx.local_part(&w.local, 0, 8).and_then(|segs| {
        super::transport::Payload::Bytes(&bytes).place(ctx.mem, &segs, 0).map_err(|e| {
            crate::guest_warn!("{}: QP {qpn}: {e}", ctx.name);
            dma_fault(ctx.stats(), &e)
        })
    });
    if let Err(f) = placed {
        fail_front(ctx, qpn, qp, rq, f);
        return;
    }
    let got = psn_add(psn, 1);
    if psn_diff(got, rq.una) > 0 {
        rq.una = got;
        if psn_diff(rq.send_psn, rq.una) < 0 {
            rq.send_psn = rq.una;
        }
    }
    cs.progress();
    cs.retries_left = cs.retry_cnt;
    if let Some(mut w) = rq.inflight.pop_front() {
        rq.log_done(ctx.wqe_log, qpn, qp.dest_qpn, &mut w, WC_SUCCESS);
        ctx.finish_send(qpn, qp, &w.hdr, Ok(8));
    }
    rq.restart_timer(ctx.now());
}
