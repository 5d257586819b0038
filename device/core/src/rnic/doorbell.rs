//! The doorbell page (register contract minor 3, `regs::rnic::dbpage`, docs/verbs.md §6):
//! shared memory in the RNIC's BAR2 where the driver writes producer and consumer indices
//! with plain stores, so a steady stream of work costs no trapped MMIO write (and so no
//! vfio-user message), and where the device publishes per queue the index after which it
//! wants an MMIO doorbell again (an event index, as virtio's `avail_event` and NVMe's
//! Doorbell Buffer Config EventIdx).
//!
//! Protocol (each side's steps, in program order):
//! - driver, posting WQEs `old..new`: write the WQEs; write barrier; store `new` into
//!   `SQ_PI`; full barrier; load `SQ_EVENT`; ring `WQE_DB_IDX` iff
//!   [`need_kick`](crate::ring::need_kick)`(event, new, old)`.
//! - device, before it sleeps: store the producer index it has seen into `SQ_EVENT`; full
//!   barrier; load `SQ_PI` again; sleep only if it is unchanged, else go on working.
//!
//! Why no doorbell is lost: both sides store, fence, then load the other's variable (the
//! store-buffering pattern). With both fences, at least one side sees the other's store:
//! either the device sees the new `SQ_PI` and keeps working, or the driver sees
//! `SQ_EVENT == old` and rings. [`tests`] checks this over every interleaving of a
//! store-buffer (x86-TSO) model and shows that dropping either fence loses a wake-up.
//! While the device is busy it leaves `SQ_EVENT` behind, so drivers do not ring.
//!
//! The same applies to `RQ_PI`/`RQ_EVENT`. `CQ_CI` needs no event index: the device reads
//! it only when a CQ looks full or when it is armed.
//!
//! Every access is bounds-checked against the page's size; an object number beyond the
//! page reads as "no value" and is never written.

use crate::platform::shm::SharedMemory;
use crate::regs::rnic::dbpage;
use crate::regs::rnic::MAX_QP;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use vm_memory::Bytes;

/// The device's view of the doorbell page.
#[derive(Clone)]
pub struct DoorbellPage {
    mem: Arc<SharedMemory>,
}

impl DoorbellPage {
    pub fn new(mem: Arc<SharedMemory>) -> Self {
        DoorbellPage { mem }
    }

    /// The shared memory behind the page (BAR2), for the transport to offer for mmap.
    pub fn memory(&self) -> &Arc<SharedMemory> {
        &self.mem
    }

    fn qp_field(qpn: u32, field: u64) -> Option<u64> {
        (u64::from(qpn) < MAX_QP).then(|| dbpage::QP_PAGES + u64::from(qpn) * dbpage::PAGE + field)
    }

    fn cq_field(cqn: u32, field: u64) -> Option<u64> {
        (u64::from(cqn) < crate::regs::rnic::MAX_CQ).then(|| dbpage::CQ_PAGES + u64::from(cqn) * dbpage::PAGE + field)
    }

    fn load(&self, offset: Option<u64>) -> Option<u16> {
        let off = usize::try_from(offset?).ok()?;
        let slice = self.mem.slice(0, usize::try_from(self.mem.size()).ok()?).ok()?;
        slice.load::<u32>(off, Ordering::SeqCst).ok().map(|v| v as u16)
    }

    fn store(&self, offset: Option<u64>, value: u16) {
        let (Some(off), Ok(size)) = (offset.and_then(|o| usize::try_from(o).ok()), usize::try_from(self.mem.size())) else {
            return;
        };
        if let Ok(slice) = self.mem.slice(0, size) {
            let _ = slice.store(u32::from(value), off, Ordering::SeqCst);
        }
    }

    /// The send-queue producer index the driver last wrote for QP `qpn`.
    pub fn sq_pi(&self, qpn: u32) -> Option<u16> {
        self.load(Self::qp_field(qpn, dbpage::SQ_PI))
    }

    /// The receive-queue producer index the driver last wrote for QP `qpn`.
    pub fn rq_pi(&self, qpn: u32) -> Option<u16> {
        self.load(Self::qp_field(qpn, dbpage::RQ_PI))
    }

    /// The consumer index the driver last wrote for CQ `cqn`.
    pub fn cq_ci(&self, cqn: u32) -> Option<u16> {
        self.load(Self::cq_field(cqn, dbpage::CQ_CI))
    }

    /// Writes QP `qpn`'s producer indices (the device's own, when the page is turned on).
    pub fn set_producers(&self, qpn: u32, sq_pi: u16, rq_pi: u16) {
        self.store(Self::qp_field(qpn, dbpage::SQ_PI), sq_pi);
        self.store(Self::qp_field(qpn, dbpage::RQ_PI), rq_pi);
    }

    /// Writes CQ `cqn`'s consumer index (the device's own, when the page is turned on).
    pub fn set_cq_ci(&self, cqn: u32, ci: u16) {
        self.store(Self::cq_field(cqn, dbpage::CQ_CI), ci);
    }

    /// Publishes the send-queue event index of QP `qpn`.
    pub fn set_sq_event(&self, qpn: u32, idx: u16) {
        self.store(Self::qp_field(qpn, dbpage::SQ_EVENT), idx);
    }

    /// Publishes the receive-queue event index of QP `qpn`.
    pub fn set_rq_event(&self, qpn: u32, idx: u16) {
        self.store(Self::qp_field(qpn, dbpage::RQ_EVENT), idx);
    }

    /// Zeroes QP `qpn`'s fields (the QP went back to RESET: its rings restart at 0).
    pub fn clear_qp(&self, qpn: u32) {
        for f in [dbpage::SQ_PI, dbpage::RQ_PI, dbpage::SQ_EVENT, dbpage::RQ_EVENT] {
            self.store(Self::qp_field(qpn, f), 0);
        }
    }

    /// Zeroes CQ `cqn`'s consumer index (the CQ was created or destroyed).
    pub fn clear_cq(&self, cqn: u32) {
        self.store(Self::cq_field(cqn, dbpage::CQ_CI), 0);
    }

    /// Zeroes the whole page (device reset: indices restart at 0 with the rings).
    pub fn clear(&self) {
        let Ok(size) = usize::try_from(self.mem.size()) else { return };
        if let Ok(slice) = self.mem.slice(0, size) {
            let _ = slice.write_slice(&vec![0u8; size], 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::need_kick;
    use std::collections::VecDeque;

    #[test]
    fn page_fields_round_trip_and_are_bounded() {
        let mem = Arc::new(SharedMemory::memfd("dbpage-test", crate::regs::pci_ids::RNIC_DB_BAR_SIZE).unwrap());
        let page = DoorbellPage::new(mem.clone());
        mem.write(dbpage::PAGE * 3 + dbpage::SQ_PI, &0x1_0007u32.to_le_bytes()).unwrap();
        assert_eq!(page.sq_pi(3), Some(7), "the low 16 bits are the index");
        mem.write(dbpage::CQ_PAGES + dbpage::PAGE * 255 + dbpage::CQ_CI, &9u32.to_le_bytes()).unwrap();
        assert_eq!(page.cq_ci(255), Some(9), "last CQ's page");
        page.set_rq_event(4, 0xabcd);
        let mut b = [0u8; 4];
        mem.read(dbpage::PAGE * 4 + dbpage::RQ_EVENT, &mut b).unwrap();
        assert_eq!(u32::from_le_bytes(b), 0xabcd);
        assert_eq!(page.sq_pi(MAX_QP as u32), None, "beyond MAX_QP");
        assert_eq!(page.cq_ci(u32::MAX), None);
        page.set_sq_event(u32::MAX, 1); // ignored, no panic
        page.clear();
        assert_eq!(page.sq_pi(3), Some(0));
    }

    // ---- the race argument, checked over an x86-TSO store-buffer model ----

    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    enum Var {
        Pi,
        Event,
    }

    #[derive(Clone, Copy, Debug)]
    enum Op {
        Store(Var, u16),
        Fence,
        /// Load into the thread's register.
        Load(Var),
    }

    #[derive(Clone, Debug)]
    struct Thread {
        prog: Vec<Op>,
        pc: usize,
        buffer: VecDeque<(Var, u16)>,
        reg: Option<u16>,
    }

    #[derive(Clone, Debug)]
    struct World {
        mem: [u16; 2],
        t: [Thread; 2],
    }

    fn idx(v: Var) -> usize {
        v as usize
    }

    impl World {
        fn load(&self, who: usize, v: Var) -> u16 {
            let own = self.t[who].buffer.iter().rev().find(|(w, _)| *w == v);
            own.map_or(self.mem[idx(v)], |(_, val)| *val)
        }

        /// Every state one step away (an instruction, or a store-buffer drain).
        fn successors(&self) -> Vec<World> {
            let mut out = Vec::new();
            for who in 0..2 {
                if let Some(&(v, val)) = self.t[who].buffer.front() {
                    let mut w = self.clone();
                    w.t[who].buffer.pop_front();
                    w.mem[idx(v)] = val;
                    out.push(w);
                }
                let th = &self.t[who];
                let Some(&op) = th.prog.get(th.pc) else { continue };
                let mut w = self.clone();
                match op {
                    Op::Store(v, val) => w.t[who].buffer.push_back((v, val)),
                    Op::Fence if !th.buffer.is_empty() => continue,
                    Op::Fence => {}
                    Op::Load(v) => w.t[who].reg = Some(self.load(who, v)),
                }
                w.t[who].pc += 1;
                out.push(w);
            }
            out
        }

        fn done(&self) -> bool {
            self.t.iter().all(|t| t.pc == t.prog.len() && t.buffer.is_empty())
        }
    }

    const DRIVER: usize = 0;
    const DEVICE: usize = 1;
    /// The device has seen producer index 0 and is going idle; the driver posts 0 -> 1.
    const SEEN: u16 = 0;
    const NEW: u16 = 1;
    /// What the device left in the event index while it was busy: far behind.
    const STALE_EVENT: u16 = 0x8000;

    /// Explores every interleaving; returns how many final states lose the wake-up: the
    /// device went to sleep (its re-check saw the old index) and the driver did not ring.
    fn lost_wakeups(driver_fence: bool, device_fence: bool) -> usize {
        let mut driver = vec![Op::Store(Var::Pi, NEW)];
        if driver_fence {
            driver.push(Op::Fence);
        }
        driver.push(Op::Load(Var::Event));
        let mut device = vec![Op::Store(Var::Event, SEEN)];
        if device_fence {
            device.push(Op::Fence);
        }
        device.push(Op::Load(Var::Pi));
        let thread = |prog| Thread { prog, pc: 0, buffer: VecDeque::new(), reg: None };
        let start = World { mem: [SEEN, STALE_EVENT], t: [thread(driver), thread(device)] };
        let mut stack = vec![start];
        let (mut lost, mut finals) = (0, 0);
        while let Some(w) = stack.pop() {
            if w.done() {
                finals += 1;
                let kicked = w.t[DRIVER].reg.is_some_and(|event| need_kick(event, NEW, SEEN));
                let sleeps = w.t[DEVICE].reg == Some(SEEN);
                if sleeps && !kicked {
                    lost += 1;
                }
                continue;
            }
            stack.extend(w.successors());
        }
        assert!(finals > 10, "the model explored {finals} executions");
        lost
    }

    #[test]
    fn no_lost_wakeup_with_both_fences_under_tso() {
        assert_eq!(lost_wakeups(true, true), 0);
    }

    #[test]
    fn each_fence_is_necessary() {
        assert!(lost_wakeups(false, true) > 0, "without the driver's full barrier a doorbell can be lost");
        assert!(lost_wakeups(true, false) > 0, "without the device's barrier a doorbell can be lost");
    }
}
