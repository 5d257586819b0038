//! Completion queues as the device sees them: ring placement, producer and consumer
//! indices, the owner (pass) bit, overflow detection and one-shot arming. A CQ that
//! overflowed is in error (IBA 11.4.2.1, "CQ overrun"): it takes no more CQEs until it
//! is destroyed.

use crate::contract::abi::Cqe;
use vm_memory::ByteValued;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cq {
    pub ring_addr: u64,
    pub log_size: u8,
    pub vector: u16,
    /// Next entry the device writes (free-running).
    pub pi: u32,
    /// Consumer index software reported (16-bit, free-running).
    pub ci: u16,
    pub armed: bool,
    /// Overflowed: a completion was lost, so none is written any more.
    pub error: bool,
}

/// Where and what to write for one CQE.
pub struct CqeSlot {
    pub addr: u64,
    /// The CQE bytes, owner included; write `bytes[..27]`, `bytes[28..]`, then `bytes[27]`.
    pub bytes: [u8; 32],
}

/// Offset of the owner byte inside a CQE.
pub const OWNER_OFFSET: usize = 27;

impl Cq {
    pub fn new(ring_addr: u64, log_size: u8, vector: u16) -> Cq {
        Cq { ring_addr, log_size, vector, pi: 0, ci: 0, armed: false, error: false }
    }

    pub fn size(&self) -> u32 {
        1 << self.log_size
    }

    /// Entries written and not yet consumed.
    pub fn used(&self) -> u32 {
        u32::from((self.pi as u16).wrapping_sub(self.ci))
    }

    /// Accepts a consumer index; false if it claims entries that were never written.
    pub fn consume(&mut self, ci: u16) -> bool {
        let consumed = ci.wrapping_sub(self.ci);
        if u32::from(consumed) > self.used() {
            return false;
        }
        self.ci = ci;
        true
    }

    /// Prepares the next CQE, or None when the CQ is full (overflow: the CQ is in error
    /// from then on) or already in error.
    pub fn push(&mut self, mut cqe: Cqe) -> Option<CqeSlot> {
        if self.error || self.used() >= self.size() {
            self.error = true;
            return None;
        }
        let idx = u64::from(self.pi & (self.size() - 1));
        cqe.owner = (((self.pi >> self.log_size) & 1) ^ 1) as u8;
        let mut bytes = [0u8; 32];
        bytes.copy_from_slice(cqe.as_slice());
        self.pi = self.pi.wrapping_add(1);
        Some(CqeSlot { addr: self.ring_addr + idx * 32, bytes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_bit_flips_each_pass_and_overflow_is_detected() {
        let mut cq = Cq::new(0x1000, 1, 1);
        let a = cq.push(Cqe::default()).unwrap();
        let b = cq.push(Cqe::default()).unwrap();
        assert_eq!((a.addr, a.bytes[OWNER_OFFSET]), (0x1000, 1));
        assert_eq!((b.addr, b.bytes[OWNER_OFFSET]), (0x1020, 1));
        assert!(cq.consume(1));
        let c = cq.push(Cqe::default()).unwrap();
        assert_eq!((c.addr, c.bytes[OWNER_OFFSET]), (0x1000, 0), "second pass");
        assert!(!cq.consume(5), "cannot consume what was not written");
        assert!(!cq.error);
        assert!(cq.push(Cqe::default()).is_none(), "full: the unconsumed entries are not overwritten");
        assert!(cq.error, "an overflow puts the CQ in error");
        assert!(cq.consume(3));
        assert_eq!(cq.used(), 0);
        assert!(cq.push(Cqe::default()).is_none(), "in error: not even a free slot takes a CQE");
    }
}
