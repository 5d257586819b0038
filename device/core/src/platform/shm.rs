//! Shared memory the server and QEMU both map: memfd-backed (or a named file, for
//! inspection from the host), accessed by the server only through bounds-checked volatile
//! copies, since the guest may write it at any time.
//!
//! The client gets the memory's fd (BAR2's doorbell page, a GPU's BAR1) and could
//! truncate it, which would make the server's next access raise SIGBUS: a memfd is
//! therefore sealed at its size (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`). For the same
//! reason an fd-backed DMA map (guest RAM the client gives us) must be a memfd sealed
//! against shrinking ([`check_dma_fd`]; QEMU's `memory-backend-memfd` seals by default).
//! A named file (`--gpu-mem-dir`, for host inspection) cannot be sealed: its mapping is
//! registered with [`super::sigbus`], so a truncation makes accesses fail
//! ([`ShmError::Truncated`]) instead of ending the server.

use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::path::Path;
use thiserror::Error;
use vm_memory::mmap::MmapRegion;
use vm_memory::{FileOffset, VolatileMemory};

#[derive(Debug, Error)]
pub enum ShmError {
    #[error("creating shared memory '{name}'")]
    Create { name: String, source: std::io::Error },
    #[error("mapping shared memory: {0}")]
    Map(String),
    #[error("access of {len} bytes at {offset:#x} is outside the {size:#x}-byte region")]
    OutOfRange { offset: u64, len: usize, size: u64 },
    #[error("access at {offset:#x}: the shared memory's file was truncated under its mapping")]
    Truncated { offset: u64 },
}

/// Whether `fd` may back a DMA map: a memfd sealed against shrinking, so that the client
/// cannot truncate it under the server's mapping (an access would raise SIGBUS).
pub fn check_dma_fd(fd: &File) -> Result<(), String> {
    // SAFETY: F_GET_SEALS on an open descriptor; the result is checked.
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 {
        return Err(format!(
            "the DMA fd cannot be sealed ({}): guest RAM must be a memfd sealed against shrinking (QEMU: memory-backend-memfd, seal=on)",
            std::io::Error::last_os_error()
        ));
    }
    if seals & libc::F_SEAL_SHRINK == 0 {
        return Err("the DMA fd is a memfd not sealed against shrinking (F_SEAL_SHRINK; QEMU: memory-backend-memfd, seal=on)".into());
    }
    Ok(())
}

pub struct SharedMemory {
    file: File,
    /// A named file's mapping, registered against SIGBUS (dropped before the mapping).
    guard: Option<super::sigbus::Guard>,
    map: MmapRegion,
}

impl SharedMemory {
    /// A sparse anonymous memfd of `size` bytes (costs nothing until touched).
    pub fn memfd(name: &str, size: u64) -> Result<Self, ShmError> {
        let cname = std::ffi::CString::new(name).map_err(|e| ShmError::Create { name: name.into(), source: e.into() })?;
        // SAFETY: memfd_create takes a valid C string and flags; the result is checked.
        let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
        if fd < 0 {
            return Err(ShmError::Create { name: name.into(), source: std::io::Error::last_os_error() });
        }
        // SAFETY: fd is a fresh descriptor owned by nobody else.
        let file = unsafe { File::from_raw_fd(fd) };
        let shm = Self::from_file(file, name, size)?;
        // SAFETY: F_ADD_SEALS on a memfd we own; the result is checked.
        if unsafe { libc::fcntl(shm.raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL) } < 0 {
            return Err(ShmError::Create { name: name.into(), source: std::io::Error::last_os_error() });
        }
        Ok(shm)
    }

    /// A named file (created sparse if missing, contents kept), for host-side inspection.
    /// A symlink at `path` or anything but a regular file there is refused (the size would
    /// truncate or extend what it names).
    pub fn file(path: &Path, size: u64) -> Result<Self, ShmError> {
        use std::os::unix::fs::OpenOptionsExt;
        let name = path.display().to_string();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(|source| ShmError::Create { name: name.clone(), source })?;
        if !file.metadata().is_ok_and(|m| m.file_type().is_file()) {
            let source = std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file");
            return Err(ShmError::Create { name, source });
        }
        let mut shm = Self::from_file(file, &name, size)?;
        shm.guard = super::sigbus::register(shm.map.as_ptr(), shm.map.size());
        Ok(shm)
    }

    fn from_file(file: File, name: &str, size: u64) -> Result<Self, ShmError> {
        file.set_len(size).map_err(|source| ShmError::Create { name: name.into(), source })?;
        let len = usize::try_from(size).map_err(|e| ShmError::Map(e.to_string()))?;
        let fo = FileOffset::new(file.try_clone().map_err(|source| ShmError::Create { name: name.into(), source })?, 0);
        let map = MmapRegion::from_file(fo, len).map_err(|e| ShmError::Map(e.to_string()))?;
        Ok(SharedMemory { file, guard: None, map })
    }

    pub fn size(&self) -> u64 {
        self.map.size() as u64
    }

    pub fn raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Err once the file behind a named mapping was found truncated (every access after
    /// the first fault: what it read were zeros, what it wrote went nowhere).
    fn intact(&self, offset: u64) -> Result<(), ShmError> {
        match &self.guard {
            Some(g) if g.poisoned() => Err(ShmError::Truncated { offset }),
            _ => Ok(()),
        }
    }

    fn check(&self, offset: u64, len: usize) -> Result<usize, ShmError> {
        let size = self.size();
        match offset.checked_add(len as u64) {
            // offset <= size, and size came from a usize.
            Some(end) if end <= size => Ok(offset as usize),
            _ => Err(ShmError::OutOfRange { offset, len, size }),
        }
    }

    /// The server's view of [offset, offset+len).
    pub fn slice(&self, offset: u64, len: usize) -> Result<vm_memory::VolatileSlice<'_, ()>, ShmError> {
        let off = self.check(offset, len)?;
        self.map.get_slice(off, len).map_err(|e| ShmError::Map(e.to_string()))
    }

    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ShmError> {
        let off = self.check(offset, buf.len())?;
        let slice = self.map.get_slice(off, buf.len()).map_err(|e| ShmError::Map(e.to_string()))?;
        slice.copy_to(buf);
        self.intact(offset)
    }

    /// Copies `len` bytes from `src` to `dst` inside the region with one memcpy
    /// (benchmarks use it as the baseline of a DMA copy).
    pub fn copy_within(&self, src: u64, dst: u64, len: usize) -> Result<(), ShmError> {
        let (s, d) = (self.check(src, len)?, self.check(dst, len)?);
        let map_err = |e: vm_memory::volatile_memory::Error| ShmError::Map(e.to_string());
        let from = self.map.get_slice(s, len).map_err(map_err)?;
        from.copy_to_volatile_slice(self.map.get_slice(d, len).map_err(map_err)?);
        self.intact(src)
    }

    pub fn write(&self, offset: u64, buf: &[u8]) -> Result<(), ShmError> {
        let off = self.check(offset, buf.len())?;
        let slice = self.map.get_slice(off, buf.len()).map_err(|e| ShmError::Map(e.to_string()))?;
        slice.copy_from(buf);
        self.intact(offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memfd_round_trip_and_bounds() {
        let m = SharedMemory::memfd("test", 1 << 20).unwrap();
        m.write(4096, b"hello").unwrap();
        let mut b = [0u8; 5];
        m.read(4096, &mut b).unwrap();
        assert_eq!(&b, b"hello");
        assert!(m.read((1 << 20) - 2, &mut b).is_err());
        assert!(m.write(u64::MAX - 1, b"xx").is_err());
    }

    #[test]
    fn memfds_are_sealed_and_dma_fds_must_be() {
        let m = SharedMemory::memfd("sealed", 1 << 16).unwrap();
        // SAFETY: ftruncate on the memfd we own.
        assert!(unsafe { libc::ftruncate(m.raw_fd(), 4096) } < 0, "shrinking is sealed");
        // SAFETY: as above.
        assert!(unsafe { libc::ftruncate(m.raw_fd(), 1 << 20) } < 0, "growing is sealed");
        assert_eq!(m.size(), 1 << 16);
        let dup = m.file.try_clone().unwrap();
        check_dma_fd(&dup).unwrap();
        // SAFETY: a fresh memfd without seals, owned by the File.
        let unsealed = unsafe { File::from_raw_fd(libc::memfd_create(c"unsealed".as_ptr(), libc::MFD_CLOEXEC)) };
        assert!(check_dma_fd(&unsealed).is_err());
        let dir = tempfile::tempdir().unwrap();
        assert!(check_dma_fd(&File::create(dir.path().join("f")).unwrap()).is_err(), "a regular file cannot be sealed");
    }

    #[test]
    fn named_file_keeps_contents() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bar1");
        std::fs::write(&path, b"abc").unwrap();
        let m = SharedMemory::file(&path, 8192).unwrap();
        let mut b = [0u8; 3];
        m.read(0, &mut b).unwrap();
        assert_eq!(&b, b"abc");
        m.write(8189, b"xyz").unwrap();
        assert_eq!(&std::fs::read(&path).unwrap()[8189..], b"xyz");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(SharedMemory::file(&link, 4096).is_err(), "a symlink is refused");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 8192, "its target is untouched");
    }

    #[test]
    fn a_truncated_named_file_fails_accesses_instead_of_sigbus() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bar1");
        let m = SharedMemory::file(&path, 1 << 20).unwrap();
        m.write(0x8000, b"before").unwrap();
        // What a client holding the fd may do.
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(4096).unwrap();
        m.read(0, &mut [0u8; 4]).unwrap();
        let mut b = [0u8; 6];
        assert!(matches!(m.read(0x8000, &mut b), Err(ShmError::Truncated { .. })), "past the new end");
        assert!(matches!(m.write(0x9000, b"lost"), Err(ShmError::Truncated { .. })));
        assert!(matches!(m.read(0, &mut b), Err(ShmError::Truncated { .. })), "the mapping stays broken");
    }
}
