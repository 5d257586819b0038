//! A function's DMA gate: whether its DMA may reach memory right now, asked before every
//! chunk of every access (`super::router`). Three things close it: PCI bus mastering off
//! (COMMAND bit 2, mirrored here on every configuration change), the link down (PCIe
//! fault injection, docs/faults.md) and a quarantine (a call
//! into the verbs engine was abandoned, `crate::rnic::verbs::runner::Remote`: the engine
//! may resume at any time and must reach nothing). Accesses register while they copy, so
//! whoever closes the gate can wait (bounded by [`GATE_WAIT`]) until none is under way:
//! once that wait succeeds, no further byte is read or written.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long closing the gate waits for accesses under way: each is one chunk of at most
/// [`super::dma::CHUNK`] bytes, so this bound is never reached by a working copy.
pub const GATE_WAIT: Duration = Duration::from_secs(1);

/// Why the gate refused an access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closed {
    /// PCI bus mastering is off.
    BusMaster,
    /// A call into the engine was abandoned; a device reset reopens the gate.
    Quarantine,
    /// The link is down (fault injection).
    LinkDown,
}

pub struct DmaGate {
    bus_master: AtomicBool,
    link_up: AtomicBool,
    quarantined: AtomicBool,
    busy: Busy,
}

impl Default for DmaGate {
    /// Open: a function whose configuration space is not modelled (unit tests) masters
    /// the bus; an RNIC mirrors its COMMAND register from reset on.
    fn default() -> Self {
        DmaGate { bus_master: AtomicBool::new(true), link_up: AtomicBool::new(true), quarantined: AtomicBool::new(false), busy: Busy::default() }
    }
}

/// The accesses under way through one thing whose closer must wait for them (the DMA
/// gate, a DMA mapping, a GPU's BAR1 window): each registers while it copies
/// ([`Busy::enter`]); the closer first closes (its own flag), then [`Busy::drain`]s.
/// Register-then-check on the access side, paired with close-then-drain, makes an access
/// either end before the drain does or see the closed flag.
#[derive(Default)]
pub struct Busy(AtomicU64);

impl Busy {
    /// Registers one access until the returned [`Passage`] is dropped.
    pub fn enter(&self) -> Passage<'_> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Passage(&self.0)
    }

    /// Waits until no access is under way, at most `wait`; false when one still is.
    pub fn drain(&self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        while self.0.load(Ordering::SeqCst) > 0 {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::yield_now();
        }
        true
    }
}

/// One access under way; [`Busy::drain`] waits for it to be dropped.
pub struct Passage<'a>(&'a AtomicU64);

impl Drop for Passage<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl DmaGate {
    /// Registers one chunk; Err when the gate is closed. The register-then-check order,
    /// paired with the closer's store-then-wait, makes a chunk either finish before the
    /// closer's wait ends or see the gate closed.
    pub fn enter(&self) -> Result<Passage<'_>, Closed> {
        let p = self.busy.enter();
        if self.quarantined.load(Ordering::SeqCst) {
            return Err(Closed::Quarantine);
        }
        if !self.link_up.load(Ordering::SeqCst) {
            return Err(Closed::LinkDown);
        }
        if !self.bus_master.load(Ordering::SeqCst) {
            return Err(Closed::BusMaster);
        }
        Ok(p)
    }

    /// COMMAND bit 2 as the configuration space now holds it. Turned off, this returns
    /// once no access is under way (false: one still was after [`GATE_WAIT`]).
    pub fn set_bus_master(&self, on: bool) -> bool {
        let was = self.bus_master.swap(on, Ordering::SeqCst);
        !was || on || self.busy.drain(GATE_WAIT)
    }

    /// Whether the link is up. Going down, this returns once no access is under way
    /// (false: one still was after [`GATE_WAIT`]).
    pub fn set_link(&self, up: bool) -> bool {
        let was = self.link_up.swap(up, Ordering::SeqCst);
        !was || up || self.busy.drain(GATE_WAIT)
    }

    pub fn bus_master(&self) -> bool {
        self.bus_master.load(Ordering::SeqCst)
    }

    /// Closes the gate until [`DmaGate::release`]; returns once no access is under way
    /// (false: one still was after [`GATE_WAIT`]).
    pub fn quarantine(&self) -> bool {
        self.quarantine_within(GATE_WAIT)
    }

    fn quarantine_within(&self, wait: Duration) -> bool {
        self.quarantined.store(true, Ordering::SeqCst);
        self.busy.drain(wait)
    }

    pub fn quarantined(&self) -> bool {
        self.quarantined.load(Ordering::SeqCst)
    }

    /// Lifts a quarantine (the engine took a device reset).
    pub fn release(&self) {
        self.quarantined.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closing_waits_for_the_chunk_under_way_and_refuses_later_ones() {
        let gate = std::sync::Arc::new(DmaGate::default());
        let chunk = gate.enter().expect("open");
        let (tx, rx) = std::sync::mpsc::channel();
        let g = gate.clone();
        // A long wait: a failure guard only, so a loaded host cannot end it early.
        let closer = std::thread::spawn(move || tx.send(g.quarantine_within(Duration::from_secs(60))).unwrap());
        let guard = Instant::now() + Duration::from_secs(10); // a failure guard, not a timing
        while !gate.quarantined() {
            assert!(Instant::now() < guard, "the closer never closed the gate");
            std::thread::yield_now();
        }
        assert_eq!(gate.enter().err(), Some(Closed::Quarantine), "no new chunk once closing");
        drop(chunk);
        assert_eq!(rx.recv_timeout(Duration::from_secs(120)), Ok(true), "drained once the chunk ended");
        closer.join().unwrap();
        gate.release();
        assert!(gate.set_bus_master(false));
        assert_eq!(gate.enter().err(), Some(Closed::BusMaster));
        gate.set_bus_master(true);
        assert!(gate.enter().is_ok());
    }
}
