//! Atomics at the responder (IBA 9.4.5, contract minor 12): the operation on the 8 bytes
//! at the target, and the results the responder keeps so that a duplicate request (its
//! ACKNOWLEDGE was lost) is answered again with the original value it returned, never
//! executed twice (IBA 9.4.5: "the responder shall not re-execute").
//!
//! The operation is atomic with respect to every other atomic of this device, since one
//! engine thread runs them all (IB_ATOMIC_HCA), not with respect to the CPUs.

use crate::rnic::fabric::packet::{op, AtomicEth};
use std::collections::VecDeque;

/// The value at the target after the operation of `opcode` on `original`.
pub fn apply(opcode: u8, a: &AtomicEth, original: u64) -> u64 {
    match opcode {
        op::COMPARE_SWAP if original == a.compare => a.swap_add,
        op::COMPARE_SWAP => original,
        _ => original.wrapping_add(a.swap_add),
    }
}

/// One atomic executed: what a duplicate must repeat to be answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    pub psn: u32,
    pub opcode: u8,
    pub request: AtomicEth,
    pub original: u64,
    pub msn: u32,
}

/// The newest atomics executed, at most `limit` (the responder's resources).
#[derive(Clone, Debug, Default)]
pub struct History {
    done: VecDeque<Done>,
}

impl History {
    pub fn record(&mut self, d: Done, limit: usize) {
        while self.done.len() >= limit.max(1) {
            self.done.pop_front();
        }
        self.done.push_back(d);
    }

    /// The result for a duplicate of PSN `psn` that repeats the request exactly.
    pub fn replay(&self, psn: u32, opcode: u8, request: &AtomicEth) -> Option<Done> {
        self.done.iter().find(|d| d.psn == psn && d.opcode == opcode && d.request == *request).copied()
    }

    /// Forgets the atomics on MR `index` (CMD_DEREG_MR).
    pub fn drop_mr(&mut self, index: u32) {
        self.done.retain(|d| d.request.rkey >> 8 != index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_swap_and_fetch_add_and_the_bounded_history() {
        let a = AtomicEth { va: 0, rkey: 0x105, swap_add: 7, compare: 3 };
        assert_eq!((apply(op::COMPARE_SWAP, &a, 3), apply(op::COMPARE_SWAP, &a, 4)), (7, 4));
        assert_eq!(apply(op::FETCH_ADD, &a, u64::MAX), 6, "wraps");
        let mut h = History::default();
        for psn in 0..5 {
            h.record(Done { psn, opcode: op::FETCH_ADD, request: a, original: u64::from(psn), msn: psn }, 2);
        }
        assert!(h.replay(2, op::FETCH_ADD, &a).is_none(), "only the newest two are kept");
        assert_eq!(h.replay(4, op::FETCH_ADD, &a).map(|d| d.original), Some(4));
        assert!(h.replay(4, op::COMPARE_SWAP, &a).is_none(), "a different request is no duplicate");
        h.drop_mr(1);
        assert!(h.replay(4, op::FETCH_ADD, &a).is_none());
    }
}
