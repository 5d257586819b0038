//! The asynchronous event queue (contract minor 11, docs/verbs.md §9): what happened to
//! a QP, a CQ or the port that no completion reports (IBA 11.6.3, the events ib_core
//! calls IB_EVENT_*). The driver gives one ring of 16-byte `rnic_eqe` entries (CMD_SET_EQ,
//! from EQ_BASE and EQ_LOG) and hands back its consumer index in EQ_CI; the engine writes
//! an entry (owner byte last, as CQEs) and raises the async vector.
//!
//! Bounds: an event finding the ring full waits, with at most [`MAX_PENDING`] others;
//! beyond that it is dropped and counted (EQ_OVERFLOWS). Without a ring nothing is
//! queued: the single RNIC_REG_LAST_ERROR latch is all a driver of an older contract sees.

use crate::contract::abi::{Eqe, CMD_ERR_INVALID};
use crate::contract::counters::{Counter, Stats};
use crate::platform::mem::access::GuestMem;
use std::collections::VecDeque;
use vm_memory::ByteValued;

/// Bytes per entry.
pub const EQE_SIZE: u64 = 16;
/// Largest ring: 2^12 entries.
pub const MAX_EQ_LOG2: u64 = 12;
/// Events that wait for room in a full ring.
pub const MAX_PENDING: usize = 1024;
/// Offset of the owner byte in an entry.
const OWNER_OFFSET: usize = 3;

/// The ring and the events not yet written to it.
#[derive(Default)]
pub struct EventQueue {
    /// Bus address and log2 entries; None: no queue.
    ring: Option<(u64, u8)>,
    /// Entries written and entries the driver has consumed, free-running.
    pi: u32,
    ci: u32,
    pending: VecDeque<Eqe>,
}

impl EventQueue {
    /// CMD_SET_EQ: the ring at `base` of 2^`log` entries (log 0: no queue). Starts empty;
    /// events waiting for the old ring are dropped with it.
    pub fn set(&mut self, base: u64, log: u64) -> Result<(), u32> {
        *self = EventQueue::default();
        if log == 0 {
            return Ok(());
        }
        let bytes = EQE_SIZE << log.min(MAX_EQ_LOG2);
        if log > MAX_EQ_LOG2 || base == 0 || !base.is_multiple_of(EQE_SIZE) || base.checked_add(bytes).is_none() {
            return Err(CMD_ERR_INVALID);
        }
        self.ring = Some((base, log as u8));
        Ok(())
    }

    pub fn is_set(&self) -> bool {
        self.ring.is_some()
    }

    fn size(&self) -> u32 {
        self.ring.map_or(0, |(_, log)| 1u32 << log)
    }

    /// Queues event `event` (EQE_*) about `object`, `syndrome` its QP_ERR_* reason.
    pub fn push(&mut self, stats: &Stats, event: u8, object: u32, syndrome: u32) {
        if self.ring.is_none() {
            return;
        }
        if self.pending.len() >= MAX_PENDING {
            stats.inc(Counter::EqOverflows);
            crate::guest_warn!("event queue full and {MAX_PENDING} events waiting: event {event} for object {object} dropped");
            return;
        }
        self.pending.push_back(Eqe { event, object, syndrome, ..Default::default() });
    }

    /// EQ_CI: the driver has consumed up to `ci`; false (and ignored, a driver error)
    /// for an index behind the one taken or past what was written.
    pub fn consumed(&mut self, ci: u32) -> bool {
        let (ahead, written) = (ci.wrapping_sub(self.ci), self.pi.wrapping_sub(self.ci));
        if ahead > written {
            return false;
        }
        self.ci = ci;
        true
    }

    /// Writes waiting events while the ring has room; true if any was written.
    pub fn flush(&mut self, mem: &dyn GuestMem, stats: &Stats) -> bool {
        let Some((base, log)) = self.ring else { return false };
        let mut wrote = false;
        while self.pi.wrapping_sub(self.ci) < self.size() {
            let Some(mut eqe) = self.pending.pop_front() else { break };
            let slot = self.pi & (self.size() - 1);
            eqe.owner = u8::from((self.pi >> log) & 1 == 0);
            let addr = base + u64::from(slot) * EQE_SIZE; // inside the ring, checked at CMD_SET_EQ
            let bytes = eqe.as_slice();
            let written = mem
                .write(addr, &bytes[..OWNER_OFFSET])
                .and_then(|_| mem.write(addr + OWNER_OFFSET as u64 + 1, &bytes[OWNER_OFFSET + 1..]))
                .and_then(|_| mem.write(addr + OWNER_OFFSET as u64, &bytes[OWNER_OFFSET..OWNER_OFFSET + 1]));
            if written.is_err() {
                stats.inc(Counter::DmaErrors);
                crate::guest_warn!("event queue at {base:#x} is not mapped guest memory: the queue is off until CMD_SET_EQ");
                *self = EventQueue::default();
                return wrote;
            }
            self.pi = self.pi.wrapping_add(1);
            stats.inc(Counter::EqEvents);
            wrote = true;
        }
        wrote
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::abi::{EQE_CQ_ERR, EQE_QP_FATAL};
    use crate::platform::mem::dma::{test_ram, DmaMaps};

    fn ram() -> (DmaMaps, crate::platform::shm::SharedMemory) {
        let (shm, fd) = test_ram(0x10000).unwrap();
        let mut mem = DmaMaps::default();
        mem.map(0, 0x10000, Some(fd), 0).unwrap();
        (mem, shm)
    }

    fn entry(mem: &DmaMaps, base: u64, i: u64) -> Eqe {
        let mut e = Eqe::default();
        mem.read(base + i * EQE_SIZE, e.as_mut_slice()).unwrap();
        e
    }

    #[test]
    fn events_fill_the_ring_wait_while_it_is_full_and_flip_the_owner_bit_per_pass() {
        let ((mem, _ram), stats, base) = (ram(), Stats::default(), 0x1000);
        let mut eq = EventQueue::default();
        eq.set(base, 2).unwrap();
        for i in 0..6 {
            eq.push(&stats, EQE_QP_FATAL, i, 8);
        }
        assert!(eq.flush(&mem, &stats));
        assert_eq!((0..4).map(|i| (entry(&mem, base, i).object, entry(&mem, base, i).owner)).collect::<Vec<_>>(), [(0, 1), (1, 1), (2, 1), (3, 1)]);
        assert!(!eq.flush(&mem, &stats), "full: the other two wait");
        assert!(!eq.consumed(9), "past what was written");
        assert!(eq.consumed(2));
        assert!(!eq.consumed(1), "behind what was taken");
        assert!(eq.flush(&mem, &stats));
        let (e0, e1) = (entry(&mem, base, 0), entry(&mem, base, 1));
        assert_eq!((e0.object, e0.owner, e0.event, e0.syndrome), (4, 0, EQE_QP_FATAL, 8), "second pass: owner 0");
        assert_eq!((e1.object, e1.owner), (5, 0));
        assert_eq!(stats.get(Counter::EqEvents), 6);
    }

    #[test]
    fn the_wait_is_bounded_and_no_ring_queues_nothing() {
        let ((mem, _ram), stats) = (ram(), Stats::default());
        let mut eq = EventQueue::default();
        eq.push(&stats, EQE_CQ_ERR, 1, 0);
        assert!(!eq.flush(&mem, &stats), "no ring: nothing queued");
        eq.set(0x1000, 1).unwrap();
        for i in 0..(MAX_PENDING as u32 + 10) {
            eq.push(&stats, EQE_CQ_ERR, i, 0);
        }
        assert_eq!(stats.get(Counter::EqOverflows), 10);
        assert!(eq.set(0x1001, 1).is_err() && eq.set(0x1000, MAX_EQ_LOG2 + 1).is_err() && eq.set(u64::MAX - 15, 2).is_err());
        assert!(!eq.is_set(), "a refused ring leaves none");
    }
}
