//! Surviving a truncated file under a shared mapping. A memfd can be sealed against that
//! (`shm`), a named file (`--gpu-mem-dir`) cannot: a client holding its fd may truncate it,
//! and the server's next access past the new end raises SIGBUS, which would end the whole
//! node. Mappings of such files are registered here (at most [`SLOTS`]); a SIGBUS inside
//! one maps an anonymous zero page over the faulting page (`mmap` with `MAP_FIXED` is
//! async-signal-safe) and marks the mapping poisoned, so the access completes and the
//! caller reports it ([`Guard::poisoned`]: `SharedMemory` turns every later access into
//! an error).
//! A SIGBUS anywhere else restores the previous action, so the fault is handled as before.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Once;

/// Mappings that can be registered at once.
pub const SLOTS: usize = 64;

struct Slot {
    start: AtomicUsize,
    len: AtomicUsize,
    poisoned: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot { start: AtomicUsize::new(0), len: AtomicUsize::new(0), poisoned: AtomicBool::new(false) };
static TABLE: [Slot; SLOTS] = [EMPTY; SLOTS];
static INSTALL: Once = Once::new();
static mut PREVIOUS: std::mem::MaybeUninit<libc::sigaction> = std::mem::MaybeUninit::zeroed();

/// A registered mapping; unregistered when dropped (before the mapping goes away).
pub struct Guard {
    slot: usize,
}

impl Guard {
    /// Whether an access has faulted (and was served zeros): the file is shorter than
    /// the mapping, for good.
    pub fn poisoned(&self) -> bool {
        TABLE[self.slot].poisoned.load(Ordering::SeqCst)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let s = &TABLE[self.slot];
        s.len.store(0, Ordering::SeqCst);
        s.start.store(0, Ordering::SeqCst);
    }
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    for s in &TABLE {
        let (start, len) = (s.start.load(Ordering::SeqCst), s.len.load(Ordering::SeqCst));
        if len != 0 && addr >= start && addr - start < len {
            // SAFETY: sysconf is async-signal-safe.
            let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
            let base = addr & !(page - 1);
            // SAFETY: replaces one page inside a mapping this process owns (registered);
            // mmap is async-signal-safe.
            let p = unsafe {
                libc::mmap(
                    base as *mut libc::c_void,
                    page,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                s.poisoned.store(true, Ordering::SeqCst);
                return;
            }
        }
    }
    // Not ours: the previous action takes the fault when the access runs again.
    // SAFETY: PREVIOUS was written once by `install` before this handler could run.
    unsafe { libc::sigaction(sig, (&raw const PREVIOUS).cast(), std::ptr::null_mut()) };
}

fn install() {
    INSTALL.call_once(|| {
        // SAFETY: a zeroed sigaction is valid; the handler has the SA_SIGINFO signature;
        // PREVIOUS is written here only, once, before the handler is installed.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_sigbus as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut act.sa_mask);
            if libc::sigaction(libc::SIGBUS, &act, (&raw mut PREVIOUS).cast()) != 0 {
                log::warn!("installing the SIGBUS handler: {}", std::io::Error::last_os_error());
            }
        }
    });
}

/// Registers `[start, start + len)`; None when every slot is taken (the mapping is then
/// unprotected, as before).
pub fn register(start: *const u8, len: usize) -> Option<Guard> {
    install();
    for (slot, s) in TABLE.iter().enumerate() {
        if s.start.compare_exchange(0, start as usize, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            s.poisoned.store(false, Ordering::SeqCst);
            s.len.store(len, Ordering::SeqCst);
            return Some(Guard { slot });
        }
    }
    log::warn!("more than {SLOTS} file mappings: a truncated file would end the server");
    None
}
