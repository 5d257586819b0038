//! The DMA maps a vfio-user client announces: which bus addresses (IOVAs) are guest RAM.
//!
//! QEMU sends DMA_MAP with the memfd of guest RAM (shared memory backend) and the IOVA range
//! it covers; the server maps the fd and may then read and write that range. QEMU also
//! announces peer devices' BAR ranges WITHOUT an fd: those are recorded (so a later lookup
//! can say "that is a peer BAR, not RAM") but cannot be accessed through this table.
//! Every access is bounds-checked with overflow-safe arithmetic and must fall entirely inside
//! one mapping (vfio-user spec, DMA_MAP/DMA_UNMAP).
//!
//! Not implemented: DMA_READ/DMA_WRITE messages for fd-less ranges (the rust-vmm server
//! does not support them); dirty-page tracking.

use crate::shm::{SharedMemory, ShmError};
use std::fs::File;
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
}

struct Mapping {
    iova: u64,
    size: u64,
    /// The server's view of the range, when the client passed an fd.
    map: Option<MmapRegion>,
}

#[derive(Default)]
pub struct DmaMaps {
    maps: Vec<Mapping>,
}

impl DmaMaps {
    pub fn map(&mut self, iova: u64, size: u64, fd: Option<File>, fd_offset: u64) -> Result<(), DmaError> {
        let bad = DmaError::BadMap { iova, size };
        let end = iova.checked_add(size).filter(|_| size > 0).ok_or(bad.clone())?;
        if self.maps.iter().any(|m| iova < m.iova + m.size && m.iova < end) {
            return Err(bad);
        }
        let map = match fd {
            Some(file) => {
                let len = usize::try_from(size).map_err(|_| bad)?;
                let region = MmapRegion::from_file(FileOffset::new(file, fd_offset), len)
                    .map_err(|e| DmaError::Mmap(e.to_string()))?;
                Some(region)
            }
            None => None,
        };
        self.maps.push(Mapping { iova, size, map });
        Ok(())
    }

    /// Removes every mapping inside `[iova, iova + size)`; returns how many went away.
    pub fn unmap(&mut self, iova: u64, size: u64) -> usize {
        let end = iova.saturating_add(size);
        let before = self.maps.len();
        self.maps.retain(|m| !(m.iova >= iova && m.iova + m.size <= end));
        before - self.maps.len()
    }

    pub fn clear(&mut self) {
        self.maps.clear();
    }

    pub fn len(&self) -> usize {
        self.maps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.maps.is_empty()
    }

    /// Whether `[addr, addr+len)` lies inside a fd-backed (accessible) mapping.
    fn locate(&self, addr: u64, len: usize) -> Result<(&MmapRegion, usize), DmaError> {
        let err = DmaError::Unmapped { addr, len };
        let end = addr.checked_add(len as u64).ok_or(err.clone())?;
        let m = self
            .maps
            .iter()
            .find(|m| addr >= m.iova && end <= m.iova + m.size)
            .ok_or(err.clone())?;
        let region = m.map.as_ref().ok_or(err)?;
        Ok((region, (addr - m.iova) as usize))
    }

    /// The server's view of [addr, addr+len), which must lie inside one fd-backed map.
    pub fn slice(&self, addr: u64, len: usize) -> Result<vm_memory::VolatileSlice<'_, ()>, DmaError> {
        let (region, off) = self.locate(addr, len)?;
        region.get_slice(off, len).map_err(|e| DmaError::Mmap(e.to_string()))
    }

    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        let (region, off) = self.locate(addr, buf.len())?;
        let slice = region.get_slice(off, buf.len()).map_err(|e| DmaError::Mmap(e.to_string()))?;
        slice.copy_to(buf);
        Ok(())
    }

    /// Copies `len` bytes between two guest addresses with one memcpy, each side inside
    /// one mapping.
    pub fn copy(&self, src: u64, dst: u64, len: usize) -> Result<(), DmaError> {
        let (sr, so) = self.locate(src, len)?;
        let (dr, doff) = self.locate(dst, len)?;
        let from = sr.get_slice(so, len).map_err(|e| DmaError::Mmap(e.to_string()))?;
        let to = dr.get_slice(doff, len).map_err(|e| DmaError::Mmap(e.to_string()))?;
        from.copy_to_volatile_slice(to);
        Ok(())
    }

    pub fn write(&self, addr: u64, buf: &[u8]) -> Result<(), DmaError> {
        let (region, off) = self.locate(addr, buf.len())?;
        let slice = region.get_slice(off, buf.len()).map_err(|e| DmaError::Mmap(e.to_string()))?;
        slice.copy_from(buf);
        Ok(())
    }
}

impl From<ShmError> for DmaError {
    fn from(e: ShmError) -> Self {
        DmaError::Mmap(e.to_string())
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
    }
}
