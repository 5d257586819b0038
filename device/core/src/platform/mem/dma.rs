//! The DMA maps a vfio-user client announces: which bus addresses (IOVAs) are guest RAM.
//!
//! QEMU sends DMA_MAP with the memfd of guest RAM (shared memory backend) and the IOVA range
//! it covers; the server maps the fd and may then read and write that range. QEMU also
//! announces peer devices' BAR ranges WITHOUT an fd: those are recorded (so a later lookup
//! can say "that is a peer BAR, not RAM") but cannot be accessed through this table.
//! Every access is bounds-checked with overflow-safe arithmetic and must fall entirely inside
//! one mapping (vfio-user spec, DMA_MAP/DMA_UNMAP).
//!
//! Snapshots: the set of maps is an immutable [`MapSet`] behind an `Arc`. Whoever DMAs
//! for a while (the engine, one pass at a time) takes a [`DmaMaps::snapshot`] under the
//! lock and drops the lock at once, so a large copy never holds it. DMA_MAP adds to the
//! set (in place when nobody holds a snapshot, else on a copy). DMA_UNMAP publishes a set
//! without the range and then waits, at most [`UNMAP_WAIT`], until every holder of an
//! older snapshot has let go: when it returns, no byte is written into the unmapped range
//! any more (a pass that outlives the bound is logged; its mapping stays valid memory
//! until the pass ends, so nothing is ever touched after its munmap).
//!
//! Not implemented: DMA_READ/DMA_WRITE messages for fd-less ranges (the rust-vmm server
//! does not support them); dirty-page tracking.

use crate::platform::shm::{SharedMemory, ShmError};
use std::collections::BTreeMap;
use std::fs::File;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
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
}

/// How long DMA_UNMAP waits for DMA through an older snapshot to finish.
pub const UNMAP_WAIT: Duration = Duration::from_secs(5);

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
    /// Sets replaced while a snapshot held them (DMA_MAP); DMA_UNMAP waits for them too.
    retired: Vec<Weak<MapSet>>,
}

/// A piece of an access: `len` bytes at `offset` of one mapping.
type Piece<'a> = (&'a MmapRegion, usize, usize);

impl DmaMaps {
    pub fn map(&mut self, iova: u64, size: u64, fd: Option<File>, fd_offset: u64) -> Result<(), DmaError> {
        let bad = DmaError::BadMap { iova, size };
        let end = iova.checked_add(size).filter(|_| size > 0).ok_or(bad.clone())?;
        let before = self.current.maps.range(..end).next_back();
        if before.is_some_and(|(&start, m)| start.saturating_add(m.size) > iova) {
            return Err(bad);
        }
        let map = match fd {
            Some(file) => {
                let len = usize::try_from(size).map_err(|_| bad)?;
                let region = MmapRegion::from_file(FileOffset::new(file, fd_offset), len).map_err(|e| DmaError::Mmap(e.to_string()))?;
                Some(Arc::new(region))
            }
            None => None,
        };
        // In place when no snapshot holds the set; adding a range needs no wait, but a
        // later unmap must wait for the holders of the set replaced here.
        if Arc::strong_count(&self.current) > 1 {
            self.retired.retain(|w| w.strong_count() > 0);
            self.retired.push(Arc::downgrade(&self.current));
        }
        Arc::make_mut(&mut self.current).maps.insert(iova, Mapping { size, map });
        Ok(())
    }

    /// Removes every mapping inside `[iova, iova + size)`; returns how many went away.
    /// Returns once no DMA through an older snapshot can still write them (bounded by
    /// [`UNMAP_WAIT`]).
    pub fn unmap(&mut self, iova: u64, size: u64) -> usize {
        let end = iova.saturating_add(size);
        let maps = &self.current.maps;
        let doomed: Vec<u64> = maps.range(iova..end).filter(|(&s, m)| s.saturating_add(m.size) <= end).map(|(&s, _)| s).collect();
        if doomed.is_empty() {
            return 0;
        }
        let mut next = (*self.current).clone();
        for s in &doomed {
            next.maps.remove(s);
        }
        self.publish(next);
        doomed.len()
    }

    pub fn clear(&mut self) {
        if !self.current.maps.is_empty() {
            self.publish(MapSet::default());
        }
    }

    /// Replaces the current set and waits for the holders of every older one.
    fn publish(&mut self, next: MapSet) {
        let old = std::mem::replace(&mut self.current, Arc::new(next));
        self.retired.push(Arc::downgrade(&old));
        drop(old);
        let start = Instant::now();
        let mut nap = Duration::from_micros(10);
        // Snapshots are only taken under the lock our caller holds for writing, so the
        // counts can only fall.
        while self.retired.iter().any(|w| w.strong_count() > 0) {
            if start.elapsed() >= UNMAP_WAIT {
                log::error!("DMA_UNMAP: a DMA pass still holds the old maps after {UNMAP_WAIT:?}; returning anyway");
                return;
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(1));
        }
        self.retired.clear();
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

    pub fn slices(&self, addr: u64, len: usize) -> Result<Vec<vm_memory::VolatileSlice<'_, ()>>, DmaError> {
        self.current.slices(addr, len)
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
    /// Splits [addr, addr+len) into pieces, each inside one fd-backed mapping.
    fn pieces(&self, addr: u64, len: usize) -> Result<Vec<Piece<'_>>, DmaError> {
        let err = DmaError::Unmapped { addr, len };
        let end = addr.checked_add(len as u64).ok_or(err.clone())?;
        let mut out = Vec::new();
        let mut at = addr;
        while at < end {
            let (&start, m) = self.maps.range(..=at).next_back().ok_or(err.clone())?;
            let region = m.map.as_deref().filter(|_| at - start < m.size).ok_or(err.clone())?;
            let n = start.saturating_add(m.size).min(end) - at;
            out.push((region, (at - start) as usize, n as usize));
            at += n;
        }
        Ok(out)
    }

    /// The server's view of [addr, addr+len), as one slice per mapping it spans.
    pub fn slices(&self, addr: u64, len: usize) -> Result<Vec<vm_memory::VolatileSlice<'_, ()>>, DmaError> {
        self.pieces(addr, len)?.into_iter().map(|(r, off, n)| r.get_slice(off, n).map_err(|e| DmaError::Mmap(e.to_string()))).collect()
    }

    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        let mut done = 0;
        for s in self.slices(addr, buf.len())? {
            s.copy_to(&mut buf[done..done + s.len()]);
            done += s.len();
        }
        Ok(())
    }

    pub fn write(&self, addr: u64, buf: &[u8]) -> Result<(), DmaError> {
        let mut done = 0;
        for s in self.slices(addr, buf.len())? {
            s.copy_from(&buf[done..done + s.len()]);
            done += s.len();
        }
        Ok(())
    }

    /// Copies `len` bytes between two guest addresses, one memcpy per pair of pieces.
    pub fn copy(&self, src: u64, dst: u64, len: usize) -> Result<(), DmaError> {
        copy_slices(&self.slices(src, len)?, &self.slices(dst, len)?);
        Ok(())
    }
}

/// Copies between two lists of slices covering the same number of bytes.
pub fn copy_slices(from: &[vm_memory::VolatileSlice<'_, ()>], to: &[vm_memory::VolatileSlice<'_, ()>]) {
    let (mut i, mut io, mut j, mut jo) = (0, 0, 0, 0);
    while i < from.len() && j < to.len() {
        let n = (from[i].len() - io).min(to[j].len() - jo);
        if let (Ok(a), Ok(b)) = (from[i].subslice(io, n), to[j].subslice(jo, n)) {
            a.copy_to_volatile_slice(b);
        }
        io += n;
        jo += n;
        if io == from[i].len() {
            i += 1;
            io = 0;
        }
        if jo == to[j].len() {
            j += 1;
            jo = 0;
        }
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
        assert_eq!(dma.unmap(0x10_0000, 1 << 20), 1);
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
        assert_eq!(dma.unmap(0x8000_0000, 0x1000), 1);
        assert!(dma.map(0x10_0000 - 0x1000, 0x1001, None, 0).is_err(), "overlaps the start of a map");
    }

    #[test]
    fn unmap_waits_for_dma_through_an_older_snapshot() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let (ram, fd) = test_ram(1 << 20).unwrap();
        let mut dma = DmaMaps::default();
        dma.map(0x10_0000, 1 << 20, Some(fd), 0).unwrap();
        let snap = dma.snapshot();
        dma.map(0x8000_0000, 0x1000, None, 0).unwrap();
        assert_eq!(dma.len(), 2, "a map added while a snapshot is held");
        assert!(snap.write(0x10_0000, b"old").is_ok(), "the snapshot still reaches its maps");
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        let pass = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            snap.write(0x10_0010, b"last").unwrap(); // the end of an engine pass
            d.store(true, Ordering::SeqCst);
            drop(snap);
        });
        assert_eq!(dma.unmap(0x10_0000, 1 << 20), 1);
        assert!(done.load(Ordering::SeqCst), "DMA_UNMAP returned while a pass could still write");
        let mut b = [0u8; 4];
        ram.read(0x10, &mut b).unwrap();
        assert_eq!(&b, b"last");
        assert!(dma.read(0x10_0010, &mut b).is_err());
        pass.join().unwrap();
    }
}
