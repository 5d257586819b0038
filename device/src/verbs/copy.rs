//! Moving bytes between a source (guest memory segments or inline WQE data) and
//! destination segments through a bounded bounce buffer, every access going through the
//! DMA maps' bounds checks.

use super::mr::Segment;
use crate::dma::{DmaError, DmaMaps};

/// Guest memory as the engine reaches it (the client's DMA maps; a test memfd in tests).
pub trait GuestMem {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError>;
    fn write(&self, addr: u64, buf: &[u8]) -> Result<(), DmaError>;
}

impl GuestMem for DmaMaps {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        DmaMaps::read(self, addr, buf)
    }

    fn write(&self, addr: u64, buf: &[u8]) -> Result<(), DmaError> {
        DmaMaps::write(self, addr, buf)
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

/// Copies `len` bytes from `src` into `dst` (which must hold at least `len` bytes).
pub fn copy(mem: &dyn GuestMem, src: &Source, dst: &[Segment], len: u64, bounce: &mut Vec<u8>) -> Result<(), DmaError> {
    const CHUNK: usize = 256 << 10;
    if bounce.len() < CHUNK {
        bounce.resize(CHUNK, 0);
    }
    let mut d = Cursor::new(dst);
    let mut done = 0u64;
    let mut s = match src {
        Source::Segments(segs) => Some(Cursor::new(segs)),
        Source::Inline(_) => None,
    };
    while done < len {
        let chunk = (len - done).min(CHUNK as u64) as usize;
        let buf = &mut bounce[..chunk];
        match (&mut s, src) {
            (Some(cur), _) => {
                let mut filled = 0usize;
                while filled < chunk {
                    let (addr, n) = cur.take((chunk - filled) as u64).ok_or(DmaError::Unmapped { addr: 0, len: chunk })?;
                    mem.read(addr, &mut buf[filled..filled + n as usize])?;
                    filled += n as usize;
                }
            }
            (None, Source::Inline(data)) => {
                let piece = data.get(done as usize..done as usize + chunk).ok_or(DmaError::Unmapped { addr: 0, len: chunk })?;
                buf.copy_from_slice(piece);
            }
            (None, Source::Segments(_)) => unreachable!("segment sources always have a cursor"),
        }
        let mut drained = 0usize;
        while drained < chunk {
            let (addr, n) = d.take((chunk - drained) as u64).ok_or(DmaError::Unmapped { addr: 0, len: chunk })?;
            mem.write(addr, &buf[drained..drained + n as usize])?;
            drained += n as usize;
        }
        done += chunk as u64;
    }
    Ok(())
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
        let mut bounce = Vec::new();
        copy(&mem, &Source::Segments(&src), &dst, 10_000, &mut bounce).unwrap();
        let mut out = vec![0u8; 10_000];
        ram.read(0x40000, &mut out[..1]).unwrap();
        ram.read(0x50000, &mut out[1..]).unwrap();
        assert_eq!(out, data);
        let short = [Segment { addr: 0x60000, len: 10 }];
        assert!(copy(&mem, &Source::Inline(&data[..20]), &short, 20, &mut bounce).is_err(), "destination too small");
        let outside = [Segment { addr: 1 << 20, len: 10 }];
        assert!(copy(&mem, &Source::Inline(&data[..10]), &outside, 10, &mut bounce).is_err(), "unmapped");
    }
}
