//! Taking a RECV for an incoming message (IBA 10.8, as rxe's `check_resource`): the head
//! WQE of the QP's own receive queue, which stays in its ring until its completion, or of
//! its SRQ (contract minor 15), taken out of the SRQ's ring at once; resolved to its
//! buffers, or completed in error (the QP then goes to ERROR) when it is malformed or its
//! buffers fail their checks. The responder and the UD receive path share it.

use super::ctx::{fail, Ctx, Failure};
use super::qp::Qp;
use super::sgl::Sgl;
use super::wqe::{read_header, read_wqe, SlotError};
use crate::contract::abi::*;
use crate::platform::mem::access::{DmaKind, DmaTag};

/// A RECV at the head of the receive queue, resolved to its buffers.
pub struct Recv {
    pub wr_id: u64,
    pub sgl: Sgl,
}

/// The head WQE of the QP's SRQ (minor 15), taken out of the SRQ's ring at once (its
/// consumer index moves now, not at the completion, so QPs sharing it take WQEs in ring
/// order and complete them in any order); its limit event when it leaves fewer WQEs than
/// the armed limit. Buffers are checked in the SRQ's protection domain.
fn next_srq_recv(ctx: &mut Ctx, qpn: u32, qp: &mut Qp, src_qpn: u32) -> Result<Option<Recv>, Failure> {
    let Some((ring, pd, srqn)) = ctx.srq.as_deref().map(|v| (v.ring, v.pd, v.qpn)) else { return Ok(None) };
    if ring.is_empty() {
        return Ok(None);
    }
    ctx.mem.tag(DmaTag::qp(DmaKind::RqWqeFetch, srqn));
    let read = read_wqe(ctx.mem, &ring, ring.ci, false);
    // A WQE read (well-formed or not) leaves the ring; one the device cannot read stays
    // (the SRQ's ring is not guest memory) and only this QP fails.
    let mut limit_reached = false;
    if let (false, Some(v)) = (matches!(read, Err(SlotError::Dma)), ctx.srq.as_deref_mut()) {
        v.ring.ci = v.ring.ci.wrapping_add(1);
        if v.limit != 0 && u32::from(v.ring.pending()) < v.limit {
            v.limit = 0;
            limit_reached = true;
        }
    }
    if limit_reached {
        ctx.cqs.event(EQE_SRQ_LIMIT, srqn, 0);
    }
    let (wr_id, status, reason) = match read {
        Ok(w) => match ctx.local_sgl(&w.sges, pd, ACCESS_LOCAL_WRITE) {
            Ok(sgl) => return Ok(Some(Recv { wr_id: w.hdr.wr_id, sgl })),
            Err(f) => (w.hdr.wr_id, f.status, f.reason),
        },
        Err(SlotError::Dma) => (read_header(ctx.mem, &ring, ring.ci).wr_id, WC_FATAL_ERR, QP_ERR_DMA),
        Err(SlotError::Malformed(h)) => (h.wr_id, WC_LOC_QP_OP_ERR, QP_ERR_BAD_WQE),
    };
    fail_recv(ctx, qpn, qp, src_qpn, wr_id, status, reason);
    Err(fail(WC_REM_OP_ERR, QP_ERR_REMOTE_INVALID))
}

/// The head RECV: None if there is none (RNR). A malformed RECV, or one whose buffers
/// fail their checks, completes in error (this QP to ERROR) and fails the request.
pub fn next_recv(ctx: &mut Ctx, qpn: u32, qp: &mut Qp, src_qpn: u32) -> Result<Option<Recv>, Failure> {
    if qp.srq.is_some() {
        return next_srq_recv(ctx, qpn, qp, src_qpn);
    }
    if qp.rq.is_empty() {
        return Ok(None);
    }
    ctx.mem.tag(DmaTag::qp(DmaKind::RqWqeFetch, qpn));
    let (wr_id, status, reason) = match read_wqe(ctx.mem, &qp.rq, qp.rq.ci, false) {
        Ok(w) => match ctx.local_sgl(&w.sges, qp.pd, ACCESS_LOCAL_WRITE) {
            Ok(sgl) => return Ok(Some(Recv { wr_id: w.hdr.wr_id, sgl })),
            Err(f) => (w.hdr.wr_id, f.status, f.reason),
        },
        Err(SlotError::Dma) => (read_header(ctx.mem, &qp.rq, qp.rq.ci).wr_id, WC_FATAL_ERR, QP_ERR_DMA),
        Err(SlotError::Malformed(h)) => (h.wr_id, WC_LOC_QP_OP_ERR, QP_ERR_BAD_WQE),
    };
    fail_recv(ctx, qpn, qp, src_qpn, wr_id, status, reason);
    Err(fail(WC_REM_OP_ERR, QP_ERR_REMOTE_INVALID))
}

/// Completes the head RECV in error (the QP goes to ERROR).
pub fn fail_recv(ctx: &mut Ctx, qpn: u32, qp: &mut Qp, src_qpn: u32, wr_id: u64, status: u8, reason: u8) {
    let cqe = Cqe { opcode: CQE_OP_RECV, status, syndrome: u32::from(reason), ..Default::default() };
    ctx.complete_recv(qpn, qp, wr_id, src_qpn, cqe);
}
