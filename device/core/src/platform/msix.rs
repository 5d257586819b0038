//! MSI-X interrupt delivery through the eventfds QEMU hands over with SET_IRQS.
//!
//! QEMU's vfio-user client emulates the MSI-X table and PBA itself (masking included) and
//! gives the server one eventfd per enabled vector (VFIO_IRQ_SET_DATA_EVENTFD |
//! VFIO_IRQ_SET_ACTION_TRIGGER on VFIO_PCI_MSIX_IRQ_INDEX). Raising a vector is writing 1
//! to its eventfd. Mask/unmask requests are accepted and need no action here.
//! A DATA_EVENTFD request that carries no fds de-assigns its vectors: QEMU cannot pass the
//! fd -1 it uses for "no eventfd" over the socket, so it sends such runs without fds
//! (it does this on MSI-X enable, for vector 0, before the guest requests any vector).
//! Only eventfds are taken (a pipe or socket whose reader never reads would block the
//! writer), each is made non-blocking, and a vector is raised outside the vectors' lock:
//! a full eventfd (a client wrote it to its limit) loses that message, it never stalls
//! the raiser (the node's event loop).

use crate::platform::pcie_fault::PcieFaults;
use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use thiserror::Error;
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_MASK, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_ACTION_TYPE_MASK, VFIO_IRQ_SET_ACTION_UNMASK, VFIO_IRQ_SET_DATA_EVENTFD,
    VFIO_IRQ_SET_DATA_NONE, VFIO_IRQ_SET_DATA_TYPE_MASK,
};

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum IrqError {
    #[error("vectors {start}+{count} exceed the {max} the function has")]
    Range { start: u32, count: u32, max: usize },
    #[error("{fds} eventfds for {count} vectors")]
    FdCount { fds: usize, count: u32 },
    #[error("unsupported SET_IRQS flags {0:#x}")]
    Flags(u32),
    #[error("SET_IRQS fd for vector {vector} is not an eventfd ({what})")]
    NotEventfd { vector: u32, what: String },
}

/// Checks that `fd` is an eventfd and makes it non-blocking (QEMU's own are already).
/// An eventfd is an anonymous inode whose `/proc/self/fd` link reads `anon_inode:[eventfd]`.
pub fn checked_eventfd(fd: &File) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let raw = fd.as_raw_fd();
    let link = std::fs::read_link(format!("/proc/self/fd/{raw}")).map_err(|e| format!("reading its /proc link: {e}"))?;
    if link.as_os_str() != "anon_inode:[eventfd]" {
        return Err(link.display().to_string());
    }
    // SAFETY: F_GETFL/F_SETFL on a descriptor we own; results checked.
    let flags = unsafe { libc::fcntl(raw, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(raw, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(format!("making it non-blocking: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The eventfds of a function's MSI-X vectors; shared by the socket thread (SET_IRQS) and
/// whoever raises interrupts (register self-test, the verbs engine), behind a narrow lock.
pub struct Interrupts {
    count: usize,
    vectors: Mutex<Vec<Option<Arc<File>>>>,
    raised: AtomicU64,
    /// PCIe-side faults: a message may be lost on the way (docs/faults.md).
    faults: Arc<PcieFaults>,
}

impl Interrupts {
    pub fn new(count: u16) -> Self {
        Self::with_faults(count, Arc::default())
    }

    /// Interrupts whose messages pass through `faults` (msi-lost, link down).
    pub fn with_faults(count: u16, faults: Arc<PcieFaults>) -> Self {
        Interrupts { count: usize::from(count), vectors: Mutex::new((0..count).map(|_| None).collect()), raised: AtomicU64::new(0), faults }
    }

    pub fn count(&self) -> usize {
        self.count
    }

    /// Interrupts raised since the last reset.
    pub fn raised(&self) -> u64 {
        self.raised.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Option<Arc<File>>>> {
        self.vectors.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets every eventfd (client disconnect).
    pub fn reset(&self) {
        self.lock().iter_mut().for_each(|v| *v = None);
        self.raised.store(0, Ordering::Relaxed);
    }

    /// Applies a SET_IRQS request for the MSI-X index.
    pub fn set(&self, flags: u32, start: u32, count: u32, fds: Vec<File>) -> Result<(), IrqError> {
        let mut vectors = self.lock();
        let action = flags & VFIO_IRQ_SET_ACTION_TYPE_MASK;
        let data = flags & VFIO_IRQ_SET_DATA_TYPE_MASK;
        if action == VFIO_IRQ_SET_ACTION_MASK || action == VFIO_IRQ_SET_ACTION_UNMASK {
            return Ok(());
        }
        if action != VFIO_IRQ_SET_ACTION_TRIGGER {
            return Err(IrqError::Flags(flags));
        }
        let range_err = IrqError::Range { start, count, max: vectors.len() };
        let end = start.checked_add(count).ok_or(range_err.clone())? as usize;
        match data {
            VFIO_IRQ_SET_DATA_NONE if count == 0 => {
                vectors.iter_mut().for_each(|v| *v = None);
                Ok(())
            }
            VFIO_IRQ_SET_DATA_NONE => {
                (end <= vectors.len()).then_some(()).ok_or(range_err)?;
                drop(vectors);
                for v in start as usize..end {
                    self.trigger(v);
                }
                Ok(())
            }
            VFIO_IRQ_SET_DATA_EVENTFD => {
                (end <= vectors.len()).then_some(()).ok_or(range_err)?;
                let slots = &mut vectors[start as usize..end];
                if fds.is_empty() {
                    slots.iter_mut().for_each(|v| *v = None);
                    return Ok(());
                }
                if fds.len() != slots.len() {
                    return Err(IrqError::FdCount { fds: fds.len(), count });
                }
                for (vector, fd) in (start..).zip(&fds) {
                    checked_eventfd(fd).map_err(|what| IrqError::NotEventfd { vector, what })?;
                }
                for (slot, fd) in slots.iter_mut().zip(fds) {
                    *slot = Some(Arc::new(fd));
                }
                Ok(())
            }
            _ => Err(IrqError::Flags(flags)),
        }
    }

    /// Raises `vector`; returns false when it has no eventfd (not enabled) or is out of range.
    /// A message the fault state loses counts as raised (the device sent it) but never
    /// reaches the eventfd.
    pub fn trigger(&self, vector: usize) -> bool {
        if !self.faults.irq_delivered(vector) {
            return self.lock().get(vector).is_some_and(Option::is_some);
        }
        self.inject(vector)
    }

    /// Raises `vector` past the fault hook (a spurious message is injected this way).
    pub fn inject(&self, vector: usize) -> bool {
        let Some(Some(fd)) = self.lock().get(vector).cloned() else {
            return false;
        };
        // Non-blocking (see checked_eventfd): a full eventfd fails with EAGAIN.
        match (&*fd).write(&1u64.to_ne_bytes()) {
            Ok(8) => {
                self.raised.fetch_add(1, Ordering::Relaxed);
                true
            }
            Ok(n) => {
                crate::guest_warn!("raising MSI-X vector {vector}: short eventfd write ({n} bytes)");
                false
            }
            Err(e) => {
                crate::guest_warn!("raising MSI-X vector {vector}: {e}");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::FromRawFd;

    fn eventfd() -> File {
        // SAFETY: eventfd returns a fresh descriptor we own, or -1 (checked).
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: fd is a valid, owned descriptor.
        unsafe { File::from_raw_fd(fd) }
    }

    const TRIGGER_FD: u32 = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;

    #[test]
    fn eventfd_delivery() {
        let irqs = Interrupts::new(4);
        let fd = eventfd();
        let mut reader = fd.try_clone().unwrap();
        irqs.set(TRIGGER_FD, 2, 1, vec![fd]).unwrap();
        assert!(!irqs.trigger(0), "vector 0 has no eventfd");
        assert!(irqs.trigger(2));
        let mut buf = [0u8; 8];
        reader.read_exact(&mut buf).unwrap();
        assert_eq!(u64::from_ne_bytes(buf), 1);
        assert_eq!(irqs.raised(), 1);
        irqs.set(VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER, 0, 0, vec![]).unwrap();
        assert!(!irqs.trigger(2));
    }

    #[test]
    fn hostile_requests_are_refused() {
        let irqs = Interrupts::new(4);
        assert!(matches!(irqs.set(TRIGGER_FD, 3, 2, vec![eventfd(), eventfd()]), Err(IrqError::Range { .. })));
        assert!(matches!(irqs.set(TRIGGER_FD, u32::MAX, 2, vec![]), Err(IrqError::Range { .. })));
        assert!(matches!(irqs.set(TRIGGER_FD, 0, 2, vec![eventfd()]), Err(IrqError::FdCount { .. })));
        irqs.set(TRIGGER_FD, 1, 1, vec![eventfd()]).unwrap();
        irqs.set(TRIGGER_FD, 1, 1, vec![]).unwrap();
        assert!(!irqs.trigger(1), "a fd-less DATA_EVENTFD request de-assigns the vector");
        assert!(matches!(irqs.set(0x7f, 0, 1, vec![]), Err(IrqError::Flags(_))));
        assert!(!irqs.trigger(usize::MAX));
    }

    #[test]
    fn only_eventfds_are_taken_and_a_full_one_never_blocks() {
        let irqs = Interrupts::new(4);
        let (rd, wr) = std::io::pipe().unwrap();
        let pipe = File::from(std::os::fd::OwnedFd::from(wr));
        assert!(matches!(irqs.set(TRIGGER_FD, 0, 1, vec![pipe]), Err(IrqError::NotEventfd { vector: 0, .. })));
        assert!(!irqs.trigger(0), "the refused fd was not installed");
        let fd = eventfd();
        let mut peer = fd.try_clone().unwrap();
        irqs.set(TRIGGER_FD, 0, 1, vec![fd]).unwrap();
        // The client fills its eventfd to the limit: the raise fails instead of blocking.
        peer.write_all(&(u64::MAX - 1).to_ne_bytes()).unwrap();
        assert!(!irqs.trigger(0));
        let mut b = [0u8; 8];
        peer.read_exact(&mut b).unwrap();
        assert!(irqs.trigger(0), "delivered again once drained");
        drop(rd);
    }
}
