//! PCIe-side fault injection (docs/faults.md): what a driver author cannot make real
//! hardware do on purpose. A function's [`PcieFaults`] holds the armed faults, the link
//! state and the counters; the device asks it at each injection point through one small
//! hook: the DMA router before every access ([`PcieFaults::dma`]), the interrupt block
//! before every MSI-X message ([`PcieFaults::irq_delivered`]), the completion path before
//! every CQE ([`PcieFaults::cqe_delay`], [`PcieFaults::cqe_duplicate`]) and the command
//! register ([`PcieFaults::take_cmd_timeout`]). Faults that happen at once (AER errors,
//! link down/up, async events, fatal and FLR-required states) are applied by the RNIC
//! model itself (`crate::rnic`, its `pcie_faults` module), which owns the registers and
//! configuration space they change.
//!
//! Randomness (`prob=`) comes from a seeded generator ([`crate::prng`]), so a failing run
//! reproduces with the same seed and the same device activity. With nothing armed and the
//! link up, every hook is one atomic load.
//!
//! Not modelled: faults on the GPU function, ECRC errors, completion timeouts on the
//! host's side of the link, TLP prefixes and header logs.

pub mod spec;

use crate::prng::Rng;
pub use spec::{Armed, Fault, Now, Rule};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Uncorrectable error status bits PCIe Base 5.0 §7.8.4.2 defines (4, 5, 12..=26).
pub const AER_UNCOR_BITS: u32 = 0x07ff_f030;
/// Correctable error status bits §7.8.4.5 defines (0, 6, 7, 8, 12..=15).
pub const AER_COR_BITS: u32 = 0x0000_f1c1;
/// The uncorrectable error `aer uncorrectable` reports by default: Completion Timeout.
pub const AER_UNCOR_DEFAULT: u8 = 14;
/// The correctable error `aer correctable` reports by default: Bad TLP.
pub const AER_COR_DEFAULT: u8 = 6;
/// Uncorrectable status bit a poisoned DMA read sets: Poisoned TLP Received.
pub const AER_UNCOR_POISONED: u8 = 12;

/// Direction of a DMA access, seen from the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    Read,
    Write,
}

/// What happens to one DMA access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DmaAction {
    Pass,
    /// The access fails (an Unsupported Request / Completer Abort on the link).
    Fail,
    /// A read completes with poisoned data.
    Poison,
}

macro_rules! fault_counters {
    ($( $name:ident, $doc:literal; )*) => {
        /// A fault counter (host side only: `rnic-emu stats`, not BAR0).
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(usize)]
        pub enum Count { $( #[doc = $doc] $name, )* }
        /// Names of the counters, by index, as `rnic-emu stats` shows them (snake case).
        pub const COUNT_NAMES: &[&str] = &[ $( stringify!($name) ),* ];
    };
}

fault_counters! {
    FaultDmaReadFail, "DMA reads failed by a fault";
    FaultDmaWriteFail, "DMA writes failed by a fault";
    FaultPoison, "DMA reads that returned poisoned data";
    FaultCqeDelay, "CQEs held back by cqe-delay";
    FaultCqeDuplicate, "duplicate CQE attempts made";
    FaultCqeDuplicateDropped, "duplicate CQE attempts the device detected and dropped";
    FaultMsiLost, "MSI-X messages lost (msi-lost or link down)";
    FaultMsiSpurious, "spurious MSI-X messages sent";
    FaultCmdTimeout, "commands left BUSY by cmd-timeout or while stuck";
    FaultAsync, "asynchronous error events injected";
    FaultFatal, "fatal engine errors injected";
    FaultAerCorrectable, "AER correctable errors reported";
    FaultAerUncorrectable, "AER uncorrectable errors reported";
    FaultLinkDown, "link-down events";
    FaultLinkUp, "link-up events";
    FaultFlrRequired, "FLR-required states entered";
}

struct State {
    rules: Vec<Rule>,
    rng: Rng,
}

/// The fault state of one PCI function, shared by its MMIO side, its engine and its
/// DMA router.
pub struct PcieFaults {
    state: Mutex<State>,
    /// Something is armed (fast path for the hooks).
    armed: AtomicBool,
    link_down: AtomicBool,
    /// A command timed out: every command stays BUSY until a reset.
    cmd_stuck: AtomicBool,
    /// FLR required: only a Function Level Reset (or vfio-user reset) clears it.
    flr_required: AtomicBool,
    counts: [AtomicU64; COUNT_NAMES.len()],
    /// AER status bits the data path raised (correctable, uncorrectable), not yet merged
    /// into configuration space by the function model.
    aer_pending: [AtomicU32; 2],
}

impl Default for PcieFaults {
    fn default() -> Self {
        PcieFaults {
            state: Mutex::new(State { rules: Vec::new(), rng: Rng::new(0) }),
            armed: AtomicBool::new(false),
            link_down: AtomicBool::new(false),
            cmd_stuck: AtomicBool::new(false),
            flr_required: AtomicBool::new(false),
            counts: Default::default(),
            aer_pending: Default::default(),
        }
    }
}

impl PcieFaults {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn count(&self, c: Count) {
        self.counts[c as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(&self, c: Count) -> u64 {
        self.counts[c as usize].load(Ordering::Relaxed)
    }

    /// (name, value) of every counter.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        COUNT_NAMES.iter().zip(&self.counts).map(|(n, v)| (*n, v.load(Ordering::Relaxed))).collect()
    }

    pub fn seed(&self, seed: u64) {
        self.lock().rng = Rng::new(seed);
    }

    /// Arms a fault; cmd-timeout replaces an earlier armed one.
    pub fn arm(&self, rule: Rule) {
        let mut s = self.lock();
        s.rules.push(rule);
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Disarms every armed fault.
    pub fn clear(&self) {
        self.lock().rules.clear();
        self.armed.store(false, Ordering::SeqCst);
    }

    /// The armed rules (for `pcie status`).
    pub fn rules(&self) -> Vec<Rule> {
        self.lock().rules.clone()
    }

    /// Finds the first armed rule of `kind` that `matches` and whose dice roll fires;
    /// uses up one of its events. Returns it.
    fn fire(&self, kind: Armed, matches: impl Fn(&Rule) -> bool) -> Option<Rule> {
        if !self.armed.load(Ordering::SeqCst) {
            return None;
        }
        let mut s = self.lock();
        let State { rules, rng } = &mut *s;
        let i = rules.iter().position(|r| r.kind == kind && matches(r))?;
        let r = rules[i];
        if !rng.chance(r.prob) {
            return None;
        }
        if let Some(left) = r.count {
            match left.checked_sub(1).filter(|l| *l > 0) {
                Some(l) => rules[i].count = Some(l),
                None => {
                    rules.remove(i);
                }
            }
        }
        self.armed.store(!rules.is_empty(), Ordering::SeqCst);
        Some(r)
    }

    /// The DMA hook: what happens to an access of `len` bytes at `addr`.
    pub fn dma(&self, dir: Dir, addr: u64, len: usize) -> DmaAction {
        if self.link_down.load(Ordering::SeqCst) {
            return DmaAction::Fail;
        }
        let end = addr.saturating_add(len as u64);
        let inside = |r: &Rule| r.range.is_none_or(|(s, e)| addr < e && end > s);
        let (fail, count) = match dir {
            Dir::Read => (Armed::DmaReadFail, Count::FaultDmaReadFail),
            Dir::Write => (Armed::DmaWriteFail, Count::FaultDmaWriteFail),
        };
        if self.fire(fail, inside).is_some() {
            self.count(count);
            return DmaAction::Fail;
        }
        if dir == Dir::Read && self.fire(Armed::Poison, inside).is_some() {
            self.count(Count::FaultPoison);
            self.aer_pending[1].fetch_or(1 << AER_UNCOR_POISONED, Ordering::SeqCst);
            return DmaAction::Poison;
        }
        DmaAction::Pass
    }

    /// The interrupt hook: false when the MSI-X message on `vector` is lost.
    pub fn irq_delivered(&self, vector: usize) -> bool {
        let lost = self.link_down.load(Ordering::SeqCst) || self.fire(Armed::MsiLost, |r| r.vector.is_none_or(|v| usize::from(v) == vector)).is_some();
        if lost {
            self.count(Count::FaultMsiLost);
        }
        !lost
    }

    /// The completion hook: how long to hold the next CQE (None: write it now).
    pub fn cqe_delay(&self) -> Option<Duration> {
        let r = self.fire(Armed::CqeDelay, |_| true)?;
        self.count(Count::FaultCqeDelay);
        Some(r.delay)
    }

    /// The completion hook after a CQE was written: Some(deliver) when the device attempts
    /// to write it again (deliver: without the duplicate check).
    pub fn cqe_duplicate(&self) -> Option<bool> {
        let r = self.fire(Armed::CqeDuplicate, |_| true)?;
        self.count(Count::FaultCqeDuplicate);
        Some(r.deliver)
    }

    /// The command hook: true when this command must not complete (it stays BUSY, and so
    /// does every later one, until a reset).
    pub fn take_cmd_timeout(&self) -> bool {
        let stuck = self.cmd_stuck.load(Ordering::SeqCst) || self.fire(Armed::CmdTimeout, |_| true).is_some();
        if stuck {
            self.cmd_stuck.store(true, Ordering::SeqCst);
            self.count(Count::FaultCmdTimeout);
        }
        stuck
    }

    pub fn link_down(&self) -> bool {
        self.link_down.load(Ordering::SeqCst)
    }

    pub fn set_link_down(&self, down: bool) {
        self.link_down.store(down, Ordering::SeqCst);
        self.count(if down { Count::FaultLinkDown } else { Count::FaultLinkUp });
    }

    pub fn flr_required(&self) -> bool {
        self.flr_required.load(Ordering::SeqCst)
    }

    pub fn set_flr_required(&self, on: bool) {
        self.flr_required.store(on, Ordering::SeqCst);
    }

    /// AER status bits raised by the data path since the last call: (correctable,
    /// uncorrectable).
    pub fn take_aer(&self) -> (u32, u32) {
        (self.aer_pending[0].swap(0, Ordering::SeqCst), self.aer_pending[1].swap(0, Ordering::SeqCst))
    }

    /// A device reset (register reset, FLR, vfio-user reset) ends a stuck command.
    pub fn on_reset(&self) {
        self.cmd_stuck.store(false, Ordering::SeqCst);
    }
}

/// Renders an armed rule the way it was given (for `pcie status`).
pub fn describe(r: &Rule) -> String {
    let kind = match r.kind {
        Armed::DmaReadFail => "dma-read-fail",
        Armed::DmaWriteFail => "dma-write-fail",
        Armed::Poison => "poison",
        Armed::CqeDelay => "cqe-delay",
        Armed::CqeDuplicate => "cqe-duplicate",
        Armed::MsiLost => "msi-lost",
        Armed::CmdTimeout => "cmd-timeout",
    };
    let mut s = kind.to_string();
    match r.count {
        Some(n) => s += &format!(" count={n}"),
        None => s += " count=always",
    }
    if let Some((a, e)) = r.range {
        s += &format!(" addr={a:#x} len={}", e - a);
    }
    if r.prob < 1.0 {
        s += &format!(" prob={}", r.prob);
    }
    if let Some(v) = r.vector {
        s += &format!(" vector={v}");
    }
    if !r.delay.is_zero() {
        s += &format!(" ms={}", r.delay.as_millis());
    }
    if r.deliver {
        s += " deliver";
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arm(f: &PcieFaults, text: &str) {
        match spec::parse(text.split_whitespace()) {
            Ok(Fault::Arm(r)) => f.arm(r),
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn dma_faults_fire_count_times_inside_their_range_only() {
        let f = PcieFaults::default();
        assert_eq!(f.dma(Dir::Read, 0, 8), DmaAction::Pass, "nothing armed");
        arm(&f, "dma-read-fail count=2 addr=0x1000 len=0x1000");
        assert_eq!(f.dma(Dir::Write, 0x1000, 8), DmaAction::Pass, "reads only");
        assert_eq!(f.dma(Dir::Read, 0x2000, 8), DmaAction::Pass, "outside the range");
        assert_eq!(f.dma(Dir::Read, 0xff8, 16), DmaAction::Fail, "overlapping the range");
        assert_eq!(f.dma(Dir::Read, 0x1ff0, 8), DmaAction::Fail);
        assert_eq!(f.dma(Dir::Read, 0x1000, 8), DmaAction::Pass, "count used up");
        assert_eq!(f.get(Count::FaultDmaReadFail), 2);
        assert!(f.rules().is_empty());
        arm(&f, "dma-write-fail");
        assert_eq!(f.dma(Dir::Write, u64::MAX - 2, 8), DmaAction::Fail, "no overflow at the top");
        arm(&f, "poison count=always");
        assert_eq!(f.dma(Dir::Write, 0, 8), DmaAction::Pass, "poison is a read fault");
        assert_eq!((f.dma(Dir::Read, 0, 8), f.dma(Dir::Read, 0, 8)), (DmaAction::Poison, DmaAction::Poison));
        f.clear();
        assert_eq!(f.dma(Dir::Read, 0, 8), DmaAction::Pass);
    }

    #[test]
    fn probabilities_are_seeded_and_reproduce() {
        let run = |seed| {
            let f = PcieFaults::default();
            f.seed(seed);
            arm(&f, "dma-write-fail count=always prob=0.3");
            (0..200).map(|i| f.dma(Dir::Write, i, 1) == DmaAction::Fail).collect::<Vec<_>>()
        };
        let a = run(7);
        assert_eq!(a, run(7), "same seed, same decisions");
        assert_ne!(a, run(8));
        let hits = a.iter().filter(|h| **h).count();
        assert!((30..90).contains(&hits), "about 30% of 200: {hits}");
    }

    #[test]
    fn link_down_fails_dma_and_loses_interrupts() {
        let f = PcieFaults::default();
        assert!(f.irq_delivered(1));
        f.set_link_down(true);
        assert_eq!(f.dma(Dir::Read, 0, 1), DmaAction::Fail);
        assert!(!f.irq_delivered(1));
        f.set_link_down(false);
        assert!(f.irq_delivered(1));
        arm(&f, "msi-lost vector=2");
        assert!(f.irq_delivered(1), "another vector");
        assert!(!f.irq_delivered(2));
        assert!(f.irq_delivered(2), "count=1 by default");
        assert_eq!((f.get(Count::FaultMsiLost), f.get(Count::FaultLinkDown), f.get(Count::FaultLinkUp)), (2, 1, 1));
    }

    #[test]
    fn a_timed_out_command_sticks_until_reset() {
        let f = PcieFaults::default();
        assert!(!f.take_cmd_timeout());
        arm(&f, "cmd-timeout");
        assert!(f.take_cmd_timeout());
        assert!(f.take_cmd_timeout(), "later commands stay BUSY too");
        f.on_reset();
        assert!(!f.take_cmd_timeout());
        assert_eq!(f.get(Count::FaultCmdTimeout), 2);
    }

    #[test]
    fn completion_faults_and_their_descriptions() {
        let f = PcieFaults::default();
        assert_eq!((f.cqe_delay(), f.cqe_duplicate()), (None, None));
        arm(&f, "cqe-delay ms=30 count=2");
        arm(&f, "cqe-duplicate deliver");
        assert_eq!(f.rules().iter().map(describe).collect::<Vec<_>>(), ["cqe-delay count=2 ms=30", "cqe-duplicate count=1 deliver"]);
        assert_eq!(f.cqe_delay(), Some(Duration::from_millis(30)));
        assert_eq!(f.cqe_duplicate(), Some(true));
        assert_eq!(f.cqe_duplicate(), None);
    }
}
