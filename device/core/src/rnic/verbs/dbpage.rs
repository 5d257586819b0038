//! The engine's side of the doorbell page (docs/verbs.md §3.1, [`crate::rnic::doorbell`]):
//! taking producer and consumer indices from the page, and publishing event indices
//! before the engine sleeps.
//!
//! An index from the page is accepted when it moves its queue forward: for a work queue,
//! when it puts more WQEs outstanding than the device knows of (the MMIO doorbell may have
//! told it first, so an index that is behind is stale, not an error); more than a ring's
//! worth outstanding is the same malformed request as an MMIO doorbell that overruns.

use super::engine::Engine;
use super::qp::QpState;
use crate::contract::abi::{CMD_CREATE_CQ, CMD_DESTROY_CQ, CMD_DESTROY_QP, CMD_MODIFY_QP};
use crate::contract::counters::Counter;
use crate::rnic::doorbell::DoorbellPage;
use std::sync::atomic::{fence, Ordering};

/// What a producer index read from the page means for a ring with `pi`, `ci` and `size`.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum PageIndex {
    /// Nothing new (equal or behind what the device knows).
    Same,
    /// New WQEs up to this producer index.
    Advance(u16),
    /// More than a ring outstanding: malformed.
    Overrun,
}

pub(super) fn classify(page_pi: u16, pi: u16, ci: u16, size: u16) -> PageIndex {
    let new_pending = page_pi.wrapping_sub(ci);
    let known = pi.wrapping_sub(ci);
    if new_pending > size {
        PageIndex::Overrun
    } else if new_pending > known {
        PageIndex::Advance(page_pi)
    } else {
        PageIndex::Same
    }
}

impl Engine {
    /// The page was turned on (DMA_CTRL): it starts from the device's own indices, so a
    /// driver may switch to it with queues already in use.
    pub fn init_doorbell_page(&self, page: &DoorbellPage) {
        for (qpn, qp) in self.qps.iter().enumerate() {
            page.set_producers(qpn as u32, qp.sq.pi, qp.rq.pi);
            page.set_sq_event(qpn as u32, qp.sq.pi);
            page.set_rq_event(qpn as u32, qp.rq.pi);
        }
        for (cqn, cq) in self.cqs.cqs.iter().enumerate() {
            page.set_cq_ci(cqn as u32, cq.as_ref().map_or(0, |c| c.ci));
        }
    }

    /// Takes every queue's indices from the page; returns whether anything moved.
    pub fn poll_doorbell_page(&mut self, page: &DoorbellPage) -> bool {
        let mut moved = false;
        for qpn in 0..self.qps.len() as u32 {
            let qp = &self.qps[qpn as usize];
            if qp.state == QpState::Reset {
                continue;
            }
            let (sq, rq) = (qp.sq, qp.rq);
            for (send, ring, page_pi) in [(true, sq, page.sq_pi(qpn)), (false, rq, page.rq_pi(qpn))] {
                let Some(page_pi) = page_pi else { continue };
                match classify(page_pi, ring.pi, ring.ci, ring.size()) {
                    PageIndex::Same => {}
                    PageIndex::Advance(_) | PageIndex::Overrun => {
                        // The MMIO doorbell's own checks (overrun -> QP error) apply.
                        self.shared.stats.inc(Counter::DbPageUpdates);
                        if send {
                            self.sq_doorbell_index(qpn, page_pi);
                        } else {
                            self.rq_doorbell_index(qpn, page_pi);
                        }
                        moved = true;
                    }
                }
            }
        }
        for cqn in 0..self.cqs.cqs.len() as u32 {
            let Some(cq) = self.cqs.cqs[cqn as usize].as_mut() else { continue };
            let Some(ci) = page.cq_ci(cqn) else { continue };
            let consumed = ci.wrapping_sub(cq.ci);
            if consumed != 0 && u32::from(consumed) <= cq.used() {
                cq.ci = ci;
                self.shared.stats.inc(Counter::DbPageUpdates);
                moved = true;
            }
        }
        moved
    }

    /// After command `op` on object `index`: a QP back in RESET and a CQ created or
    /// destroyed restart from index 0 on the page, as they do in the device (docs/verbs.md
    /// §3.1), so a value left from the object's previous life is never taken.
    pub fn sync_doorbell_page(&self, page: &DoorbellPage, op: u32, index: u32) {
        match op {
            CMD_MODIFY_QP | CMD_DESTROY_QP if self.qp(index).is_some_and(|q| q.state == QpState::Reset) => page.clear_qp(index),
            CMD_CREATE_CQ | CMD_DESTROY_CQ => page.clear_cq(index),
            _ => {}
        }
    }

    /// Before sleeping: publishes, for every live queue, the producer index the device has
    /// seen as its event index, fences, and reads the page again. Returns true when
    /// something moved meanwhile (then the caller must not sleep).
    pub fn publish_doorbell_events(&mut self, page: &DoorbellPage) -> bool {
        for (qpn, qp) in self.qps.iter().enumerate() {
            if qp.state == QpState::Reset {
                continue;
            }
            page.set_sq_event(qpn as u32, qp.sq.pi);
            page.set_rq_event(qpn as u32, qp.rq.pi);
        }
        fence(Ordering::SeqCst);
        self.poll_doorbell_page(page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_indices_advance_go_stale_or_overrun() {
        assert_eq!(classify(5, 3, 0, 8), PageIndex::Advance(5));
        assert_eq!(classify(3, 3, 0, 8), PageIndex::Same);
        assert_eq!(classify(2, 3, 0, 8), PageIndex::Same, "behind an MMIO doorbell: stale");
        assert_eq!(classify(9, 3, 0, 8), PageIndex::Overrun);
        assert_eq!(classify(2, 0xfffe, 0xfffc, 8), PageIndex::Advance(2), "across the wrap");
        assert_eq!(classify(0xfffc, 0, 0xfffc, 8), PageIndex::Same, "an index below ci is nothing new");
    }
}
