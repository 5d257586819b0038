//! The DMA maps a vfio-user client announces: which bus addresses (IOVAs) are guest RAM.
//!
//! QEMU sends DMA_MAP with the memfd of guest RAM (shared memory backend) and the IOVA range
//! it covers; the server maps the fd and may then read and write that range. QEMU also
//! announces peer devices' BAR ranges WITHOUT an fd: those are recorded (so a later lookup
//! can say "that is a peer BAR, not RAM") but cannot be accessed through this table.
//! Every access is bounds-checked with overflow-safe arithmetic and must fall entirely inside
//! mapped ranges (vfio-user spec, DMA_MAP/DMA_UNMAP), and respect each range's DMA_MAP
//! protection (READ/WRITE flags, [`Prot`]): a device write into a read-only range fails
//! like an unmapped access.
//!
//! Snapshots: the set of maps is an immutable [`MapSet`] behind an `Arc`. Whoever DMAs
//! for a while (the engine, one pass at a time) takes a [`DmaMaps::snapshot`] under the
//! lock and drops the lock at once, so a large copy never holds it. DMA_MAP adds to the
//! set (in place when nobody holds a snapshot, else on a copy).
//!
//! DMA_UNMAP removes whole mappings only: a range that cuts a mapping removes nothing and
//! is an error ([`DmaError::PartialUnmap`]). It publishes a set without them, then
//! revokes each (`super::revoke`): every access copies in chunks and checks its mapping
//! before each, so once the revocation sees no chunk under way (a bounded wait, a chunk's
//! copy) no further byte of the range is read or written, however long the pass that
//! holds an older snapshot runs on; if a chunk were still under way after
//! [`super::revoke::REVOKE_WAIT`], the unmap reports an error, never success. The memory
//! stays mapped in this process until the last snapshot holding it is dropped, so
//! nothing is ever touched after its munmap.
//!
//! Not implemented: DMA_READ/DMA_WRITE messages for fd-less ranges (the rust-vmm server
//! does not support them); dirty-page tracking.

pub use super::revoke::Prot;
use super::revoke::{self, Live, Span, Stopped};
use crate::platform::shm::{SharedMemory, ShmError};
use std::collections::BTreeMap;
use std::fs::File;
use std::sync::Arc;
use thiserror::Error;
use vm_memory::mmap::MmapRegion;
use vm_memory::{FileOffset, VolatileMemory};

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum DmaError {
    #[error("DMA_MAP of {size:#x} bytes at {iova:#x}: empty, wrapping or overlapping an existing map")]
    BadMap { iova: u64, size: u64 },
    #[error("mapping the DMA fd failed: {0}")]
    Mmap(String),
    #[error("DMA of {len} bytes at {addr:#x} is not inside one mapped guest RAM range")]
    Unmapped { addr: u64, len: usize },
    #[error("DMA at {addr:#x} targets a GPU BAR1 that no BAR1_APERTURE slot names")]
    Aperture { addr: u64 },
    #[error("DMA of {len} bytes at {addr:#x} failed (injected fault or link down)")]
    Injected { addr: u64, len: usize },
    #[error("DMA read at {addr:#x} returned poisoned data (injected fault)")]
    Poisoned { addr: u64 },
    #[error("DMA write of {len} bytes at {addr:#x} into a range mapped without write access (or a read without read access)")]
    Protected { addr: u64, len: usize },
    #[error("DMA_MAP of {size:#x} bytes at {iova:#x} allows neither reads nor writes")]
    NoAccess { iova: u64, size: u64 },
    #[error("DMA_UNMAP of {size:#x} bytes at {iova:#x} cuts a mapping (only whole mappings are unmapped; nothing was)")]
    PartialUnmap { iova: u64, size: u64 },
    #[error("DMA_UNMAP of {size:#x} bytes at {iova:#x}: empty or wrapping range")]
    BadUnmap { iova: u64, size: u64 },
    #[error("DMA_UNMAP of {size:#x} bytes at {iova:#x}: DMA into it was still under way after the wait; it may not be reused")]
    UnmapBusy { iova: u64, size: u64 },
    #[error("DMA at {addr:#x} refused: PCI bus mastering is off")]
    BusMaster { addr: u64 },
    #[error("DMA at {addr:#x} refused: the device is quarantined (a call into its engine was abandoned)")]
    Quarantined { addr: u64 },
}

#[derive(Clone)]
struct Mapping {
    size: u64,
    /// The server's view of the range, when the client passed an fd.
    map: Option<Arc<MmapRegion>>,
    /// What DMA_MAP allowed.
    prot: Prot,
    /// Revoked by DMA_UNMAP; counts the chunks under way.
    live: Arc<Live>,
}

/// One immutable set of maps, keyed by IOVA. With an IOMMU, QEMU maps guest pages one by
/// one, so an access may span several adjacent maps: it is split into pieces, each inside
/// one fd-backed map, and refused whole if any byte is not covered.
#[derive(Clone, Default)]
pub struct MapSet {
    maps: BTreeMap<u64, Mapping>,
}

/// The client's DMA maps: the current [`MapSet`], replaced as DMA_MAP/UNMAP arrive.
#[derive(Default)]
pub struct DmaMaps {
    current: Arc<MapSet>,
}

/// A piece of an access: `len` bytes at `offset` of one mapping, and its liveness.
type Piece<'a> = (&'a MmapRegion, usize, usize, &'a Live);

impl DmaMaps {
    /// A read-write map (what QEMU announces for guest RAM).
    pub fn map(&mut self, iova: u64, size: u64, fd: Option<File>, fd_offset: u64) -> Result<(), DmaError> {
        self.map_with(iova, size, fd, fd_offset, Prot::READ_WRITE)
    }

    /// A map with the protection DMA_MAP's flags give.
    pub fn map_with(&mut self, iova: u64, size: u64, fd: Option<File>, fd_offset: u64, prot: Prot) -> Result<(), DmaError> {
        if !prot.read && !prot.write {
            return Err(DmaError::NoAccess { iova, size });
        }
        let bad = DmaError::BadMap { iova, size };
        let end = iova.checked_add(size).filter(|_| size > 0).ok_or(bad.clone())?;
        let before = self.current.maps.range(..end).next_back();
        if before.is_some_and(|(&start, m)| start.saturating_add(m.size) > iova) {
            return Err(bad);
        }
        let map = match fd {
            Some(file) => {
                crate::platform::shm::check_dma_fd(&file).map_err(DmaError::Mmap)?;
                let len = usize::try_from(size).map_err(|_| bad)?;
                let region = MmapRegion::from_file(FileOffset::new(file, fd_offset), len).map_err(|e| DmaError::Mmap(e.to_string()))?;
                Some(Arc::new(region))
            }
            None => None,
        };
        // In place when no snapshot holds the set, else on a copy; adding needs no wait.
        Arc::make_mut(&mut self.current).maps.insert(iova, Mapping { size, map, prot, live: Arc::default() });
        Ok(())
    }

    /// Removes the mappings inside `[iova, iova + size)`; returns how many went away.
    /// Returns Ok once no further byte of them is read or written (see the module
    /// header); a range that cuts a mapping removes nothing ([`DmaError::PartialUnmap`]).
    pub fn unmap(&mut self, iova: u64, size: u64) -> Result<usize, DmaError> {
        let end = iova.checked_add(size).filter(|_| size > 0).ok_or(DmaError::BadUnmap { iova, size })?;
        // Mappings never overlap, so their ends rise with their starts: the ones that
        // overlap the range are the last of those starting before its end.
        let hit: Vec<(u64, u64)> =
            self.current.maps.range(..end).rev().take_while(|(&s, m)| s.saturating_add(m.size) > iova).map(|(&s, m)| (s, m.size)).collect();
        if hit.iter().any(|&(s, n)| s < iova || s.saturating_add(n) > end) {
            return Err(DmaError::PartialUnmap { iova, size });
        }
        if hit.is_empty() {
            return Ok(0);
        }
        let mut next = (*self.current).clone();
        let gone: Vec<Mapping> = hit.iter().filter_map(|(s, _)| next.maps.remove(s)).collect();
        self.current = Arc::new(next);
        Self::revoke(&gone).map(|()| gone.len()).map_err(|()| DmaError::UnmapBusy { iova, size })
    }

    /// Removes every mapping (UNMAP_ALL, a client gone), with [`DmaMaps::unmap`]'s
    /// guarantee.
    pub fn clear(&mut self) -> Result<(), DmaError> {
        let old = std::mem::take(&mut self.current);
        let gone: Vec<Mapping> = old.maps.values().cloned().collect();
        Self::revoke(&gone).map_err(|()| DmaError::UnmapBusy { iova: 0, size: u64::MAX })
    }

    /// Revokes removed mappings and waits for the chunks under way through them.
    fn revoke(gone: &[Mapping]) -> Result<(), ()> {
        // Every one is revoked, even after one that did not drain.
        let all = gone.iter().map(|m| m.live.revoke()).filter(|drained| !drained).count() == 0;
        if all {
            Ok(())
        } else {
            log::error!("DMA_UNMAP: DMA through an unmapped range was still under way after {:?}", revoke::REVOKE_WAIT);
            Err(())
        }
    }

    /// The current set, for DMA that runs without the lock.
    pub fn snapshot(&self) -> Arc<MapSet> {
        self.current.clone()
    }

    pub fn len(&self) -> usize {
        self.current.maps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.current.maps.is_empty()
    }

    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        self.current.read(addr, buf)
    }

    pub fn write(&self, addr: u64, buf: &[u8]) -> Result<(), DmaError> {
        self.current.write(addr, buf)
    }

    /// Copies `len` bytes between two guest addresses, one memcpy per pair of pieces.
    pub fn copy(&self, src: u64, dst: u64, len: usize) -> Result<(), DmaError> {
        self.current.copy(src, dst, len)
    }
}

impl MapSet {
    /// Splits [addr, addr+len) into pieces, each inside one fd-backed mapping that allows
    /// the access (`write`: a device write).
    fn pieces(&self, addr: u64, len: usize, write: bool) -> Result<Vec<Piece<'_>>, DmaError> {
        let err = DmaError::Unmapped { addr, len };
        let end = addr.checked_add(len as u64).ok_or(err.clone())?;
        let mut out = Vec::new();
        let mut at = addr;
        while at < end {
            let (&start, m) = self.maps.range(..=at).next_back().ok_or(err.clone())?;
            let region = m.map.as_deref().filter(|_| at - start < m.size).ok_or(err.clone())?;
            if !m.prot.allows(write) {
                return Err(DmaError::Protected { addr, len });
            }
            let n = start.saturating_add(m.size).min(end) - at;
            out.push((region, (at - start) as usize, n as usize, &*m.live));
            at += n;
        }
        Ok(out)
    }

    /// The server's view of [addr, addr+len) for an access (`write`: a device write), as
    /// one span per mapping it spans; copy through [`super::revoke`].
    pub fn spans(&self, addr: u64, len: usize, write: bool) -> Result<Vec<Span<'_>>, DmaError> {
        self.pieces(addr, len, write)?
            .into_iter()
            .map(|(r, off, n, live)| r.get_slice(off, n).map(|slice| Span { slice, live: Some(live) }).map_err(|e| DmaError::Mmap(e.to_string())))
            .collect()
    }

    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        let len = buf.len();
        revoke::read(&self.spans(addr, len, false)?, buf, None).map_err(|s| stopped(s, addr, len))
    }

    pub fn write(&self, addr: u64, buf: &[u8]) -> Result<(), DmaError> {
        revoke::write(&self.spans(addr, buf.len(), true)?, buf, None).map_err(|s| stopped(s, addr, buf.len()))
    }

    /// Copies `len` bytes between two guest addresses, chunk by chunk.
    pub fn copy(&self, src: u64, dst: u64, len: usize) -> Result<(), DmaError> {
        revoke::copy(&self.spans(src, len, false)?, &self.spans(dst, len, true)?, None).map_err(|s| stopped(s, src, len))
    }
}

/// The error of an access a chunked copy stopped: a revoked range is an unmapped one.
pub fn stopped(s: Stopped, addr: u64, len: usize) -> DmaError {
    match s {
        Stopped::Revoked => DmaError::Unmapped { addr, len },
        Stopped::Gate(super::gate::Closed::BusMaster) => DmaError::BusMaster { addr },
        Stopped::Gate(super::gate::Closed::Quarantine) => DmaError::Quarantined { addr },
        Stopped::Gate(super::gate::Closed::LinkDown) => DmaError::Injected { addr, len },
    }
}

impl From<ShmError> for DmaError {
    fn from(e: ShmError) -> Self {
        // The message keeps the cause, which ShmError's Display leaves to its source().
        match std::error::Error::source(&e) {
            Some(cause) => DmaError::Mmap(format!("{e}: {cause}")),
            None => DmaError::Mmap(e.to_string()),
        }
    }
}

/// Test helper: a fresh memfd to hand to [`DmaMaps::map`] as if it were guest RAM.
pub fn test_ram(size: u64) -> Result<(SharedMemory, File), DmaError> {
    let shm = SharedMemory::memfd("test-ram", size)?;
    // SAFETY: dup of a descriptor we own; the result is checked.
    let fd = unsafe { libc::dup(shm.raw_fd()) };
    if fd < 0 {
        return Err(DmaError::Mmap(std::io::Error::last_os_error().to_string()));
    }
    // SAFETY: fd is a fresh descriptor we own.
    Ok((shm, unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accesses_span_adjacent_page_maps_like_an_iommu_makes() {
        let (ram, fd) = test_ram(1 << 20).unwrap();
        let mut dma = DmaMaps::default();
        // Three pages of IOVA space backed by scattered RAM pages, as an IOMMU maps them.
        for (i, page) in [5u64, 2, 9].iter().enumerate() {
            let f = fd.try_clone().unwrap();
            dma.map(0xffb0_0000 + i as u64 * 0x1000, 0x1000, Some(f), page * 0x1000).unwrap();
        }
        let data: Vec<u8> = (0..0x2000u32).map(|i| (i % 253) as u8).collect();
        dma.write(0xffb0_0800, &data).unwrap();
        let mut back = vec![0u8; 0x2000];
        dma.read(0xffb0_0800, &mut back).unwrap();
        assert_eq!(back, data);
        let mut page2 = vec![0u8; 0x800];
        ram.read(2 * 0x1000, &mut page2).unwrap();
        assert_eq!(page2, data[0x800..0x1000], "the second IOVA page lands in RAM page 2");
        dma.copy(0xffb0_0800, 0xffb0_0000, 0x1000).unwrap();
        assert!(dma.read(0xffb0_2800, &mut back).is_err(), "runs past the last map");
        assert!(dma.read(0xffaf_f800, &mut back[..0x1000]).is_err(), "starts before the first map");
    }

    #[test]
    fn map_access_unmap() {
        let (ram, fd) = test_ram(1 << 20).unwrap();
        let mut dma = DmaMaps::default();
        dma.map(0x10_0000, 1 << 20, Some(fd), 0).unwrap();
        dma.write(0x10_0010, b"abcd").unwrap();
        let mut b = [0u8; 4];
        ram.read(0x10, &mut b).unwrap();
        assert_eq!(&b, b"abcd");
        assert_eq!(dma.unmap(0x10_0000, 1 << 20), Ok(1));
        assert!(dma.read(0x10_0010, &mut b).is_err());
    }

    #[test]
    fn hostile_ranges() {
        let (_ram, fd) = test_ram(1 << 20).unwrap();
        let mut dma = DmaMaps::default();
        dma.map(0x10_0000, 1 << 20, Some(fd), 0).unwrap();
        let mut b = [0u8; 16];
        assert!(dma.read(0x10_0000 + (1 << 20) - 8, &mut b).is_err(), "crosses the end");
        assert!(dma.read(0xf_fff8, &mut b).is_err(), "crosses the start");
        assert!(dma.read(u64::MAX - 4, &mut b).is_err(), "wraps");
        assert!(dma.map(0x10_8000, 0x1000, None, 0).is_err(), "overlap");
        assert!(dma.map(u64::MAX - 10, 0x1000, None, 0).is_err(), "wrap");
        assert!(dma.map(0x1000, 0, None, 0).is_err(), "empty");
        dma.map(0x8000_0000, 0x1000, None, 0).unwrap();
        assert!(dma.write(0x8000_0000, &b).is_err(), "fd-less peer range is not accessible");
        assert_eq!(dma.unmap(0x8000_0000, 0x1000), Ok(1));
        assert!(dma.map(0x10_0000 - 0x1000, 0x1001, None, 0).is_err(), "overlaps the start of a map");
    }

    #[test]
    fn once_unmap_returns_a_pass_holding_an_older_snapshot_reaches_nothing() {
        let (ram, fd) = test_ram(1 << 20).unwrap();
        let mut dma = DmaMaps::default();
        dma.map(0x10_0000, 1 << 20, Some(fd), 0).unwrap();
        let snap = dma.snapshot();
        dma.map(0x8000_0000, 0x1000, None, 0).unwrap();
        assert_eq!(dma.len(), 2, "a map added while a snapshot is held");
        assert!(snap.write(0x10_0000, b"old").is_ok(), "the snapshot still reaches its maps");
        // The pass keeps its snapshot across the unmap (it is not waited for).
        assert_eq!(dma.unmap(0x10_0000, 1 << 20), Ok(1));
        assert_eq!(snap.write(0x10_0010, b"late"), Err(DmaError::Unmapped { addr: 0x10_0010, len: 4 }), "revoked for every snapshot");
        let mut b = [0u8; 4];
        assert!(snap.read(0x10_0000, &mut b).is_err(), "no read either");
        assert!(snap.copy(0x10_0000, 0x10_0100, 4).is_err());
        ram.read(0x10, &mut b).unwrap();
        assert_eq!(b, [0; 4], "nothing landed after DMA_UNMAP returned");
        assert!(dma.read(0x10_0010, &mut b).is_err());
    }

    #[test]
    fn a_partial_unmap_removes_nothing_and_is_an_error() {
        let (_ram, fd) = test_ram(1 << 20).unwrap();
        let mut dma = DmaMaps::default();
        dma.map(0x10_0000, 0x8_0000, Some(fd.try_clone().unwrap()), 0).unwrap();
        dma.map(0x18_0000, 0x8_0000, Some(fd), 0x8_0000).unwrap();
        let cut = DmaError::PartialUnmap { iova: 0x10_0000, size: 0x1000 };
        assert_eq!(dma.unmap(0x10_0000, 0x1000), Err(cut), "cuts the first map");
        assert!(matches!(dma.unmap(0x10_0000, 0x9_0000), Err(DmaError::PartialUnmap { .. })), "the first whole, the second cut");
        assert!(matches!(dma.unmap(0x17_f000, 0x2000), Err(DmaError::PartialUnmap { .. })), "straddles both");
        assert_eq!(dma.len(), 2, "nothing removed");
        dma.write(0x10_0000, b"kept").unwrap();
        assert_eq!(dma.unmap(0x20_0000, 0x1000), Ok(0), "nothing there: nothing to do");
        assert!(matches!(dma.unmap(u64::MAX, 2), Err(DmaError::BadUnmap { .. })));
        assert!(matches!(dma.unmap(0x10_0000, 0), Err(DmaError::BadUnmap { .. })));
        assert_eq!(dma.unmap(0xf_0000, 0x20_0000), Ok(2), "a range covering both removes both");
        assert!(dma.is_empty());
    }

    #[test]
    fn protection_flags_hold() {
        let (ram, fd) = test_ram(1 << 20).unwrap();
        let mut dma = DmaMaps::default();
        let ro = Prot { read: true, write: false };
        dma.map_with(0x10_0000, 0x1000, Some(fd.try_clone().unwrap()), 0, ro).unwrap();
        dma.map_with(0x20_0000, 0x1000, Some(fd.try_clone().unwrap()), 0x1000, Prot { read: false, write: true }).unwrap();
        ram.write(0, b"rom!").unwrap();
        let mut b = [0u8; 4];
        dma.read(0x10_0000, &mut b).unwrap();
        assert_eq!(&b, b"rom!");
        assert_eq!(dma.write(0x10_0000, b"xxxx"), Err(DmaError::Protected { addr: 0x10_0000, len: 4 }));
        assert!(dma.copy(0x10_0000, 0x10_0800, 4).is_err(), "no copy into a read-only range");
        assert!(dma.read(0x20_0000, &mut b).is_err(), "a write-only range is not readable");
        dma.copy(0x10_0000, 0x20_0000, 4).unwrap();
        ram.read(0, &mut b).unwrap();
        assert_eq!(&b, b"rom!", "untouched");
        ram.read(0x1000, &mut b).unwrap();
        assert_eq!(&b, b"rom!", "read-only to write-only works");
        assert!(matches!(dma.map_with(0x30_0000, 0x1000, Some(fd), 0, Prot { read: false, write: false }), Err(DmaError::NoAccess { .. })));
    }
}
