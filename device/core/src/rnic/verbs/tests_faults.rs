//! Unit tests of the PCIe fault hooks on the completion path (`ctx::Cqs`): a completion
//! delay holds CQEs in order and releases them, a duplicate attempt is dropped or (with
//! `deliver`) written into the next free slot, never over an unconsumed one.

use super::cq::{Cq, OWNER_OFFSET};
use super::ctx::{Cqs, Shared};
use crate::contract::abi::*;
use crate::contract::counters::{Counter, Stats};
use crate::platform::mem::dma::{test_ram, DmaMaps};
use crate::platform::msix::Interrupts;
use crate::platform::pcie_fault::{self, Count, Fault, PcieFaults};
use crate::platform::shm::SharedMemory;
use std::sync::Arc;
use std::time::Duration;
use vm_memory::ByteValued;

const RING: u64 = 0x1000;

fn cqs() -> (Cqs, DmaMaps, SharedMemory, Arc<PcieFaults>) {
    let (ram, fd) = test_ram(1 << 20).unwrap();
    let mut mem = DmaMaps::default();
    mem.map(0, 1 << 20, Some(fd), 0).unwrap();
    let shared = Shared {
        irqs: Arc::new(Interrupts::new(2)),
        stats: Arc::new(Stats::default()),
        last_error: Default::default(),
        fatal: Default::default(),
        clock: Default::default(),
    };
    let mut c = Cqs::new(4, shared);
    c.faults = Arc::new(PcieFaults::default());
    c.cqs[1] = Some(Cq::new(RING, 1, 1)); // two entries
    let f = c.faults.clone();
    (c, mem, ram, f)
}

fn arm(f: &PcieFaults, text: &str) {
    let Ok(Fault::Arm(r)) = pcie_fault::spec::parse(text.split_whitespace()) else { panic!("{text}") };
    f.arm(r);
}

/// The CQE in slot `i` if its owner byte says the first pass wrote it.
fn slot(ram: &SharedMemory, i: u64) -> Option<Cqe> {
    let mut c = Cqe::default();
    ram.read(RING + 32 * i, c.as_mut_slice()).unwrap();
    (c.as_slice()[OWNER_OFFSET] == 1).then_some(c)
}

fn cqe(wr_id: u64) -> Cqe {
    Cqe { wr_id, qpn: 3, ..Default::default() }
}

#[test]
fn a_delay_holds_every_cqe_in_order_until_it_expires() {
    let (mut c, mem, ram, f) = cqs();
    arm(&f, "cqe-delay ms=50");
    assert!(c.complete("t", &mem, 1, cqe(1)));
    assert!(c.complete("t", &mem, 1, cqe(2)), "a later CQE waits behind the held one");
    assert!(slot(&ram, 0).is_none() && slot(&ram, 1).is_none());
    assert!(!c.release_held("t", &mem, false), "not yet");
    std::thread::sleep(Duration::from_millis(60));
    assert!(c.release_held("t", &mem, false));
    assert_eq!((slot(&ram, 0).map(|c| c.wr_id), slot(&ram, 1).map(|c| c.wr_id)), (Some(1), Some(2)));
    assert_eq!((f.get(Count::FaultCqeDelay), c.shared.stats.get(Counter::Cqes)), (1, 2));
}

#[test]
fn a_duplicate_is_dropped_or_delivered_but_never_overwrites() {
    let (mut c, mem, ram, f) = cqs();
    arm(&f, "cqe-duplicate");
    assert!(c.complete("t", &mem, 1, cqe(1)));
    assert!(slot(&ram, 1).is_none(), "detected and dropped");
    assert_eq!(f.get(Count::FaultCqeDuplicateDropped), 1);
    arm(&f, "cqe-duplicate deliver count=always");
    assert!(c.complete("t", &mem, 1, cqe(2)));
    assert_eq!(slot(&ram, 1).map(|c| c.wr_id), Some(2), "the only original");
    // CQE 2 took the last slot, so its duplicate found none and was not written: the ring
    // is full (two entries, none consumed) and the CQ not in error.
    assert!(!c.cqs[1].as_ref().unwrap().error, "a duplicate with no room is skipped, not an overflow");
    assert!(c.cqs[1].as_mut().unwrap().consume(1));
    assert!(c.complete("t", &mem, 1, cqe(4)), "one slot free: the CQE goes in, its duplicate is skipped");
    let mut b = [0u8; 32];
    ram.read(RING, &mut b).unwrap();
    assert_eq!((u64::from_le_bytes(b[..8].try_into().unwrap()), b[OWNER_OFFSET]), (4, 0), "second pass of slot 0");
    assert_eq!(slot(&ram, 1).map(|c| c.wr_id), Some(2), "the unconsumed slot is untouched");
    assert!(!c.cqs[1].as_ref().unwrap().error);
}
