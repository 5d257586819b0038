//! Moving bytes between a source (guest memory segments or inline WQE data) and
//! destination segments, piece by piece, every access going through the DMA maps' bounds
//! checks: memory to memory with one memcpy per piece, inline data written directly.

use super::mr::Segment;
use crate::dma::{DmaError, DmaMaps};

/// Guest memory as the engine reaches it (the client's DMA maps; a test memfd in tests).
pub trait GuestMem {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError>;
    fn write(&self, addr: u64, buf: &[u8]) -> Result<(), DmaError>;
    /// Counts `len` payload bytes at `addr` by the path they take (the router does).
    fn count_payload(&self, _addr: u64, _len: u64) {}

    /// Copies between two guest addresses; the default goes through a small buffer.
    fn copy(&self, src: u64, dst: u64, len: usize) -> Result<(), DmaError> {
        let mut buf = [0u8; 4096];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(buf.len());
            self.read(src + done as u64, &mut buf[..n])?;
            self.write(dst + done as u64, &buf[..n])?;
            done += n;
        }
        Ok(())
    }
}

impl GuestMem for DmaMaps {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        DmaMaps::read(self, addr, buf)
    }

    fn write(&self, addr: u64, buf: &[u8]) -> Result<(), DmaError> {
        DmaMaps::write(self, addr, buf)
    }

    fn copy(&self, src: u64, dst: u64, len: usize) -> Result<(), DmaError> {
        DmaMaps::copy(self, src, dst, len)
    }
}

pub enum Source<'a> {
    Inline(&'a [u8]),
    Segments(&'a [Segment]),
}

/// Walks a segment list piece by piece.
struct Cursor<'a> {
    segs: &'a [Segment],
    idx: usize,
    off: u64,
}

impl<'a> Cursor<'a> {
    fn new(segs: &'a [Segment]) -> Self {
        Cursor { segs, idx: 0, off: 0 }
    }

    /// The next piece of at most `max` bytes: (bus address, length).
    fn take(&mut self, max: u64) -> Option<(u64, u64)> {
        while let Some(s) = self.segs.get(self.idx) {
            if self.off < s.len {
                let n = (s.len - self.off).min(max);
                let piece = (s.addr + self.off, n);
                self.off += n;
                return Some(piece);
            }
            self.idx += 1;
            self.off = 0;
        }
        None
    }
}

/// Copies `len` bytes from `src` into `dst` (which must hold at least `len` bytes):
/// memory to memory piece by piece, inline data written directly.
pub fn copy(mem: &dyn GuestMem, src: &Source, dst: &[Segment], len: u64) -> Result<(), DmaError> {
    match src {
        Source::Segments(segs) => copy_segments(mem, segs, dst, len),
        Source::Inline(data) => {
            let data = data.get(..len as usize).ok_or(DmaError::Unmapped { addr: 0, len: len as usize })?;
            write_at(mem, dst, 0, data)
        }
    }
}

/// Memory to memory: one copy per piece where both lists' current pieces overlap.
fn copy_segments(mem: &dyn GuestMem, src: &[Segment], dst: &[Segment], len: u64) -> Result<(), DmaError> {
    let (mut s, mut d) = (Cursor::new(src), Cursor::new(dst));
    let (mut pending_s, mut pending_d) = (None, None);
    let mut done = 0u64;
    while done < len {
        let (sa, sn) = match pending_s.take() {
            Some(p) => p,
            None => s.take(len - done).ok_or(DmaError::Unmapped { addr: 0, len: 0 })?,
        };
        let (da, dn) = match pending_d.take() {
            Some(p) => p,
            None => d.take(len - done).ok_or(DmaError::Unmapped { addr: 0, len: 0 })?,
        };
        let n = sn.min(dn);
        mem.copy(sa, da, n as usize)?;
        mem.count_payload(sa, n);
        mem.count_payload(da, n);
        if sn > n {
            pending_s = Some((sa + n, sn - n));
        }
        if dn > n {
            pending_d = Some((da + n, dn - n));
        }
        done += n;
    }
    Ok(())
}

/// Walks `len` bytes of `segs` from `offset` on, piece by piece: `access(addr, range)`
/// moves the bytes of `range` (of the transfer) at bus address `addr`, then they are
/// counted as payload. Fails when the list ends first or an access fails (moving nothing
/// always succeeds).
fn for_each_piece(
    mem: &dyn GuestMem,
    segs: &[Segment],
    offset: u64,
    len: usize,
    mut access: impl FnMut(u64, std::ops::Range<usize>) -> Result<(), DmaError>,
) -> Result<(), DmaError> {
    if len == 0 {
        return Ok(());
    }
    let mut c = Cursor::new(segs);
    let mut skip = offset;
    while skip > 0 {
        let (_, n) = c.take(skip).ok_or(DmaError::Unmapped { addr: 0, len })?;
        skip -= n;
    }
    let mut done = 0usize;
    while done < len {
        let (addr, n) = c.take((len - done) as u64).ok_or(DmaError::Unmapped { addr: 0, len })?;
        access(addr, done..done + n as usize)?;
        mem.count_payload(addr, n);
        done += n as usize;
    }
    Ok(())
}

/// Reads `buf.len()` bytes starting `offset` bytes into `segs`.
pub fn read_at(mem: &dyn GuestMem, segs: &[Segment], offset: u64, buf: &mut [u8]) -> Result<(), DmaError> {
    for_each_piece(mem, segs, offset, buf.len(), |addr, r| mem.read(addr, &mut buf[r]))
}

/// Writes `data` starting `offset` bytes into `segs`.
pub fn write_at(mem: &dyn GuestMem, segs: &[Segment], offset: u64, data: &[u8]) -> Result<(), DmaError> {
    for_each_piece(mem, segs, offset, data.len(), |addr, r| mem.write(addr, &data[r]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dma::test_ram;

    #[test]
    fn scatter_gather_copy_across_uneven_segments() {
        let (ram, fd) = test_ram(1 << 20).unwrap();
        let mut mem = DmaMaps::default();
        mem.map(0, 1 << 20, Some(fd), 0).unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        ram.write(0x1000, &data[..3000]).unwrap();
        ram.write(0x9000, &data[3000..]).unwrap();
        let src = [Segment { addr: 0x1000, len: 3000 }, Segment { addr: 0x9000, len: 7000 }];
        let dst = [Segment { addr: 0x40000, len: 1 }, Segment { addr: 0x50000, len: 9999 }];
        copy(&mem, &Source::Segments(&src), &dst, 10_000).unwrap();
        let mut out = vec![0u8; 10_000];
        ram.read(0x40000, &mut out[..1]).unwrap();
        ram.read(0x50000, &mut out[1..]).unwrap();
        assert_eq!(out, data);
        let short = [Segment { addr: 0x60000, len: 10 }];
        assert!(copy(&mem, &Source::Inline(&data[..20]), &short, 20).is_err(), "destination too small");
        let outside = [Segment { addr: 1 << 20, len: 10 }];
        assert!(copy(&mem, &Source::Inline(&data[..10]), &outside, 10).is_err(), "unmapped");
    }

    #[test]
    fn read_and_write_at_an_offset_into_a_segment_list() {
        let (ram, fd) = test_ram(1 << 20).unwrap();
        let mut mem = DmaMaps::default();
        mem.map(0, 1 << 20, Some(fd), 0).unwrap();
        let segs = [Segment { addr: 0x1000, len: 100 }, Segment { addr: 0, len: 0 }, Segment { addr: 0x8000, len: 300 }];
        let data: Vec<u8> = (1..=150u8).collect();
        // 150 bytes from offset 90: 10 in the first segment, 140 in the third.
        write_at(&mem, &segs, 90, &data).unwrap();
        let mut head = [0u8; 10];
        ram.read(0x1000 + 90, &mut head).unwrap();
        assert_eq!(head[..], data[..10]);
        let mut tail = vec![0u8; 140];
        ram.read(0x8000, &mut tail).unwrap();
        assert_eq!(tail[..], data[10..]);
        let mut back = vec![0u8; 150];
        read_at(&mem, &segs, 90, &mut back).unwrap();
        assert_eq!(back, data);
        assert!(read_at(&mem, &segs, 300, &mut back).is_err(), "runs past the end of the list");
        assert!(write_at(&mem, &segs, 401, &[1]).is_err(), "starts past the end of the list");
        assert!(write_at(&mem, &segs, 401, &[]).is_ok(), "moving nothing always succeeds");
    }
}
