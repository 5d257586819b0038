//! The DMA router (docs/architecture.md): the one place that knows where an RNIC DMA address
//! lands. Built from (a) the client's DMA maps (guest RAM) and (b) the live BAR1 windows of
//! the node's GPUs (address and memory-enable from their config space, published by the
//! GPU model on every config write). A GPU window is reachable only when the driver named
//! its address in a BAR1_APERTURE slot. Every access is bounds-checked and returns the
//! PCIe path it took (host memory, P2P through a switch, P2P through the root complex);
//! payload bytes are counted on that path. An address nothing claims is an error, never a
//! guess. A view works on a snapshot of the DMA maps, not under their lock. Every access
//! is reported to the router's [`DmaObserver`] (the node's MMIO/DMA trace,
//! `crate::observe::iotrace`, when the server sets one) with the tag the engine last set
//! on the view ([`GuestMem::tag`]). Before any access, the function's PCIe-side faults
//! ([`crate::platform::pcie_fault`], docs/faults.md) may fail it or poison its data.

use super::access::{DmaTag, GuestMem, PciePath};
use super::dma::{stopped, DmaError, DmaMaps, MapSet};
use super::gate::{Busy, Closed, DmaGate, Passage};
use super::revoke::{self, Span, Stopped};
use crate::contract::counters::{Counter, Stats};
use crate::platform::pcie_fault::{Dir, DmaAction, PcieFaults};
use crate::platform::shm::SharedMemory;
pub use crate::platform::topology::P2pPath;
use crate::regs::rnic::APERTURE_SLOTS;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// A GPU's BAR1 as its config space currently places it.
pub struct PeerWindow {
    addr: AtomicU64,
    enabled: AtomicBool,
    /// DMA copies into or out of the window under way (see [`PeerWindow::set`]).
    busy: Busy,
    pub mem: Arc<SharedMemory>,
}

/// How long a BAR1 move waits for copies under way before it goes ahead regardless.
const MOVE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl PeerWindow {
    pub fn new(mem: Arc<SharedMemory>) -> Self {
        PeerWindow { addr: AtomicU64::new(0), enabled: AtomicBool::new(false), busy: Busy::default(), mem }
    }

    /// Publishes the window (None: not decoding: memory disabled or BAR unassigned).
    ///
    /// The old window stops decoding first, then this waits (bounded by [`MOVE_WAIT`])
    /// for copies already under way through it: once the guest's BAR write returns, no
    /// DMA reaches the GPU through the old address (the store-then-check pairing with
    /// [`PeerWindow::enter`] makes a copy either finish first or see the window closed).
    pub fn set(&self, window: Option<u64>) {
        self.enabled.store(false, Ordering::SeqCst);
        let _ = self.busy.drain(MOVE_WAIT); // past the bound it goes ahead regardless
        if let Some(addr) = window {
            self.addr.store(addr, Ordering::SeqCst);
            self.enabled.store(true, Ordering::SeqCst);
        }
    }

    /// (bus address, size) while decoding.
    pub fn get(&self) -> Option<(u64, u64)> {
        self.enabled.load(Ordering::SeqCst).then(|| (self.addr.load(Ordering::SeqCst), self.mem.size()))
    }

    /// Registers a copy through the window found at `base`; None when the window moved or
    /// stopped decoding meanwhile.
    fn enter(&self, base: u64) -> Option<Passage<'_>> {
        let guard = self.busy.enter();
        (self.get().map(|(a, _)| a) == Some(base)).then_some(guard)
    }
}

/// The byte counter of a path.
fn counter(path: PciePath) -> Counter {
    match path {
        PciePath::Host => Counter::DmaHostBytes,
        PciePath::P2p(P2pPath::Switch) => Counter::DmaP2pSwitchBytes,
        PciePath::P2p(P2pPath::RootComplex) => Counter::DmaP2pRootComplexBytes,
    }
}

/// What the router reports every access to. The node's MMIO/DMA trace
/// (`crate::observe::iotrace::IoTrace`) is one; a router nobody observes has
/// [`Unobserved`].
pub trait DmaObserver: Send + Sync {
    /// Whether accesses are reported at all: checked before every access, so cheap.
    fn enabled(&self) -> bool;
    /// An access by the function `function` (its name): `path` is where it went (None:
    /// refused), `tag` what the engine said it is for.
    fn dma(&self, function: &Arc<str>, addr: u64, len: usize, write: bool, path: Option<PciePath>, tag: DmaTag);
}

/// The observer of a router whose accesses nobody records.
pub struct Unobserved;

impl DmaObserver for Unobserved {
    fn enabled(&self) -> bool {
        false
    }

    fn dma(&self, _: &Arc<str>, _: u64, _: usize, _: bool, _: Option<PciePath>, _: DmaTag) {}
}

pub struct Peer {
    pub window: Arc<PeerWindow>,
    pub path: P2pPath,
}

pub struct Router {
    pub dma: Arc<RwLock<DmaMaps>>,
    pub peers: Vec<Peer>,
    /// BAR1_APERTURE slots as the driver programmed them (0: empty).
    pub apertures: Arc<[AtomicU64; APERTURE_SLOTS]>,
    pub stats: Arc<Stats>,
    /// What every access is reported to, and the name the RNIC's DMAs are reported under.
    pub observer: Arc<dyn DmaObserver>,
    pub observed_as: Arc<str>,
    /// The function's PCIe-side faults, asked before every access (docs/faults.md).
    pub faults: Arc<PcieFaults>,
    /// Bus mastering and quarantine, asked before every access ([`super::gate`]).
    pub gate: Arc<DmaGate>,
}

/// Where an access lands.
enum Target<'a> {
    Host,
    /// The peer, the offset in its BAR1, and the window's base the decision used.
    Peer(&'a Peer, u64, u64),
}

impl Router {
    pub fn new(dma: Arc<RwLock<DmaMaps>>, peers: Vec<Peer>, stats: Arc<Stats>) -> Router {
        let observer = Arc::new(Unobserved);
        Router {
            dma,
            peers,
            apertures: Arc::new(Default::default()),
            stats,
            observer,
            observed_as: Arc::from(""),
            faults: Arc::default(),
            gate: Arc::default(),
        }
    }

    /// A view for one engine pass: a snapshot of the DMA maps (the lock is held only to
    /// take it). DMA_UNMAP waits for the view to be dropped (see [`super::dma`]).
    pub fn view(&self) -> RouterView<'_> {
        let maps = self.dma.read().unwrap_or_else(|p| p.into_inner()).snapshot();
        RouterView { maps, router: self, tag: Cell::new(DmaTag::default()) }
    }

    /// Whether `addr` is the live BAR1 address of one of the node's GPUs.
    pub fn is_gpu_bar(&self, addr: u64) -> bool {
        self.peers.iter().any(|p| p.window.get().is_some_and(|(a, _)| a == addr))
    }

    fn target(&self, addr: u64, len: usize) -> Result<Target<'_>, DmaError> {
        for peer in &self.peers {
            let Some((base, size)) = peer.window.get() else { continue };
            if addr < base || addr - base >= size {
                continue;
            }
            let off = addr - base;
            if off.checked_add(len as u64).is_none_or(|end| end > size) {
                return Err(DmaError::Unmapped { addr, len });
            }
            if !self.apertures.iter().any(|a| a.load(Ordering::SeqCst) == base) {
                self.stats.inc(Counter::ApertureErrors);
                return Err(DmaError::Aperture { addr });
            }
            return Ok(Target::Peer(peer, off, base));
        }
        Ok(Target::Host)
    }
}

/// An access's spans, its path, and (through a GPU's BAR1) its in-flight guard.
type Slices<'a> = (Vec<Span<'a>>, PciePath, Option<Passage<'a>>);

pub struct RouterView<'a> {
    maps: Arc<MapSet>,
    router: &'a Router,
    /// What the engine said the next accesses are for (the observer's labels).
    tag: Cell<DmaTag>,
}

impl RouterView<'_> {
    /// The spans [addr, addr+len) lands in (one in a GPU's BAR1, or one per DMA map),
    /// and the path that reaches them (`write`: a device write, checked against the
    /// maps' protection). A peer's span comes with its in-flight guard: keep it until the
    /// copy is done.
    fn slices(&self, addr: u64, len: usize, write: bool) -> Result<Slices<'_>, DmaError> {
        match self.router.target(addr, len)? {
            Target::Host => Ok((self.maps.spans(addr, len, write)?, PciePath::Host, None)),
            Target::Peer(p, off, base) => {
                let guard = p.window.enter(base).ok_or(DmaError::Unmapped { addr, len })?;
                let slice = p.window.mem.slice(off, len).map_err(|_| DmaError::Unmapped { addr, len })?;
                Ok((vec![Span { slice, live: None }], PciePath::P2p(p.path), Some(guard)))
            }
        }
    }

    /// The error of an access whose chunked copy stopped (counted as at its start).
    fn stopped(&self, s: Stopped, addr: u64, len: usize) -> DmaError {
        if s == Stopped::Gate(Closed::BusMaster) {
            self.router.stats.inc(Counter::BusMasterErrors);
        }
        stopped(s, addr, len)
    }

    /// Passes the function's DMA gate for one access (bus mastering off: counted and
    /// logged, rate-limited).
    fn pass_gate(&self, addr: u64) -> Result<Passage<'_>, DmaError> {
        self.router.gate.enter().map_err(|closed| match closed {
            Closed::BusMaster => {
                self.router.stats.inc(Counter::BusMasterErrors);
                crate::guest_warn!("{}: DMA at {addr:#x} refused: bus mastering is off (PCI COMMAND bit 2)", self.router.observed_as);
                DmaError::BusMaster { addr }
            }
            Closed::Quarantine => DmaError::Quarantined { addr },
            Closed::LinkDown => DmaError::Injected { addr, len: 0 },
        })
    }

    /// Reports an access to the router's observer (when it records).
    #[inline]
    fn observed<T>(&self, addr: u64, len: usize, write: bool, r: Result<T, DmaError>, path: impl Fn(&T) -> PciePath) -> Result<T, DmaError> {
        let o = &self.router.observer;
        if o.enabled() {
            o.dma(&self.router.observed_as, addr, len, write, r.as_ref().ok().map(&path), self.tag.get());
        }
        r
    }
}

/// The fault hook of one access: Err when it fails, Ok(true) when a read is poisoned.
fn fault_hook(faults: &PcieFaults, dir: Dir, addr: u64, len: usize) -> Result<bool, DmaError> {
    match faults.dma(dir, addr, len) {
        DmaAction::Pass => Ok(false),
        DmaAction::Fail => Err(DmaError::Injected { addr, len }),
        DmaAction::Poison => Ok(true),
    }
}

/// What a poisoned read delivers: the data with every byte inverted.
fn poison(buf: &mut [u8]) {
    buf.iter_mut().for_each(|b| *b = !*b);
}

impl GuestMem for RouterView<'_> {
    fn tag(&self, tag: DmaTag) {
        self.tag.set(tag);
    }

    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<PciePath, DmaError> {
        drop(self.pass_gate(addr)?);
        let poisoned = fault_hook(&self.router.faults, Dir::Read, addr, buf.len())?;
        let len = buf.len();
        let (spans, path, _busy) = self.observed(addr, len, false, self.slices(addr, len, false), |s| s.1)?;
        revoke::read(&spans, buf, Some(&self.router.gate)).map_err(|s| self.stopped(s, addr, len))?;
        if poisoned {
            poison(buf);
            return Err(DmaError::Poisoned { addr });
        }
        Ok(path)
    }

    fn write(&self, addr: u64, buf: &[u8]) -> Result<PciePath, DmaError> {
        drop(self.pass_gate(addr)?);
        fault_hook(&self.router.faults, Dir::Write, addr, buf.len())?;
        let (spans, path, _busy) = self.observed(addr, buf.len(), true, self.slices(addr, buf.len(), true), |s| s.1)?;
        revoke::write(&spans, buf, Some(&self.router.gate)).map_err(|s| self.stopped(s, addr, buf.len()))?;
        Ok(path)
    }

    fn copy(&self, src: u64, dst: u64, len: usize) -> Result<(PciePath, PciePath), DmaError> {
        drop(self.pass_gate(src)?);
        let poisoned = fault_hook(&self.router.faults, Dir::Read, src, len)?;
        fault_hook(&self.router.faults, Dir::Write, dst, len)?;
        let (from, sp, _src_busy) = self.observed(src, len, false, self.slices(src, len, false), |s| s.1)?;
        let (to, dp, _dst_busy) = self.observed(dst, len, true, self.slices(dst, len, true), |s| s.1)?;
        let gate = Some(&*self.router.gate);
        revoke::copy(&from, &to, gate).map_err(|s| self.stopped(s, src, len))?;
        if poisoned {
            // The poisoned data is forwarded (the destination gets it corrupted), and the
            // access reports the poison so the operation completes in error.
            for s in &to {
                let mut b = vec![0u8; s.slice.len()];
                revoke::read(std::slice::from_ref(s), &mut b, gate).map_err(|e| self.stopped(e, dst, len))?;
                poison(&mut b);
                revoke::write(std::slice::from_ref(s), &b, gate).map_err(|e| self.stopped(e, dst, len))?;
            }
            return Err(DmaError::Poisoned { addr: src });
        }
        Ok((sp, dp))
    }

    fn account(&self, path: PciePath, bytes: u64) {
        self.router.stats.add(counter(path), bytes);
    }

    fn path_of(&self, addr: u64) -> PciePath {
        let claims = |p: &&Peer| p.window.get().is_some_and(|(base, size)| addr >= base && addr - base < size);
        self.router.peers.iter().find(claims).map_or(PciePath::Host, |p| PciePath::P2p(p.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::mem::dma::test_ram;

    fn router() -> (Router, Arc<PeerWindow>, SharedMemoryPair) {
        let (ram, fd) = test_ram(1 << 20).unwrap();
        let mut maps = DmaMaps::default();
        maps.map(0x1000_0000, 1 << 20, Some(fd), 0).unwrap();
        let gpu = Arc::new(SharedMemory::memfd("gpu", 1 << 20).unwrap());
        let window = Arc::new(PeerWindow::new(gpu.clone()));
        let peers = vec![Peer { window: window.clone(), path: P2pPath::Switch }];
        let r = Router::new(Arc::new(RwLock::new(maps)), peers, Arc::new(Stats::default()));
        (r, window, SharedMemoryPair { ram, gpu })
    }

    struct SharedMemoryPair {
        ram: SharedMemory,
        gpu: Arc<SharedMemory>,
    }

    #[test]
    fn a_bar1_move_waits_for_copies_under_way_and_later_ones_see_it() {
        let (_r, window, _m) = router();
        window.set(Some(0x8000_0000));
        let guard = window.enter(0x8000_0000).expect("the window is where the access found it");
        let (tx, rx) = std::sync::mpsc::channel();
        let w = window.clone();
        let mover = std::thread::spawn(move || {
            w.set(Some(0x9000_0000));
            tx.send(()).unwrap();
        });
        assert!(rx.recv_timeout(std::time::Duration::from_millis(200)).is_err(), "the move waits for the copy");
        assert!(window.enter(0x8000_0000).is_none(), "no new copy through the closing window");
        drop(guard);
        rx.recv_timeout(std::time::Duration::from_secs(5)).expect("the move completes once the copy is done");
        mover.join().unwrap();
        assert_eq!(window.get().map(|w| w.0), Some(0x9000_0000));
        assert!(window.enter(0x8000_0000).is_none() && window.enter(0x9000_0000).is_some());
    }

    #[test]
    fn injected_faults_fail_or_poison_accesses() {
        let (r, _window, m) = router();
        let v = r.view();
        let arm = |text: &str| match crate::platform::pcie_fault::spec::parse(text.split_whitespace()) {
            Ok(crate::platform::pcie_fault::Fault::Arm(rule)) => r.faults.arm(rule),
            other => panic!("{text}: {other:?}"),
        };
        m.ram.write(0x100, b"data").unwrap();
        arm("dma-write-fail addr=0x10000200 len=4");
        assert_eq!(v.copy(0x1000_0100, 0x1000_0200, 4), Err(DmaError::Injected { addr: 0x1000_0200, len: 4 }));
        let mut b = [0u8; 4];
        m.ram.read(0x200, &mut b).unwrap();
        assert_eq!(b, [0; 4], "nothing written");
        arm("poison");
        assert_eq!(v.copy(0x1000_0100, 0x1000_0200, 4), Err(DmaError::Poisoned { addr: 0x1000_0100 }));
        m.ram.read(0x200, &mut b).unwrap();
        assert_eq!(b, [!b'd', !b'a', !b't', !b'a'], "the poisoned bytes are forwarded");
        arm("poison");
        assert_eq!(v.read(0x1000_0100, &mut b), Err(DmaError::Poisoned { addr: 0x1000_0100 }));
        assert_eq!(b, [!b'd', !b'a', !b't', !b'a']);
        assert_eq!(r.faults.take_aer(), (0, 1 << crate::platform::pcie_fault::AER_UNCOR_POISONED), "AER Poisoned TLP Received");
        arm("dma-read-fail");
        assert!(v.read(0x1000_0100, &mut b).is_err());
        assert_eq!(v.read(0x1000_0100, &mut b), Ok(PciePath::Host), "count=1");
        assert_eq!(&b, b"data");
    }

    #[test]
    fn classifies_host_peer_and_nothing() {
        let (r, window, m) = router();
        let v = r.view();
        assert!(v.write(0x8000_0000, b"x").is_err(), "BAR not decoding yet: nothing there");
        window.set(Some(0x8000_0000));
        assert_eq!(v.write(0x8000_0010, b"x"), Err(DmaError::Aperture { addr: 0x8000_0010 }), "no aperture slot names it");
        r.apertures[2].store(0x8000_0000, Ordering::SeqCst);
        v.write(0x8000_0010, b"peer").unwrap();
        let mut b = [0u8; 4];
        m.gpu.read(0x10, &mut b).unwrap();
        assert_eq!(&b, b"peer");
        v.write(0x1000_0020, b"host").unwrap();
        m.ram.read(0x20, &mut b).unwrap();
        assert_eq!(&b, b"host");
        assert!(v.write(0x8000_0000 + (1 << 20) - 2, b"xyz").is_err(), "straddles the end of BAR1");
        assert!(v.read(u64::MAX - 1, &mut b).is_err());
        v.copy(0x8000_0010, 0x1000_0100, 4).unwrap();
        m.ram.read(0x100, &mut b).unwrap();
        assert_eq!(&b, b"peer", "GPU to host in one copy");
        assert_eq!(v.copy(0x8000_0010, 0x1000_0100, 4), Ok((PciePath::P2p(P2pPath::Switch), PciePath::Host)));
        assert_eq!(v.read(0x1000_0000, &mut b), Ok(PciePath::Host));
        v.account(PciePath::P2p(P2pPath::Switch), 100);
        v.account(PciePath::Host, 7);
        assert_eq!(r.stats.get(Counter::DmaP2pSwitchBytes), 100);
        assert_eq!(r.stats.get(Counter::DmaHostBytes), 7);
        assert!(r.is_gpu_bar(0x8000_0000) && !r.is_gpu_bar(0x8000_1000));
        window.set(None);
        assert!(v.write(0x8000_0010, b"x").is_err(), "memory decoding off: unreachable");
        assert_eq!(r.stats.get(Counter::ApertureErrors), 1);
    }
}
