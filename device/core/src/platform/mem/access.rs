//! Guest memory as the engine reaches it ([`GuestMem`]: the router's view, or the bare DMA
//! maps in tests), and moving bytes between a source (guest memory segments or bytes in
//! hand) and destination segments, piece by piece, every access bounds-checked by the
//! DMA maps or the router: memory to memory with one memcpy per piece, bytes written
//! directly. Each access returns the PCIe path it took; payload moves report it through
//! [`GuestMem::account`] so the per-path byte counters need no second lookup. The engine
//! names what its next accesses are for with [`GuestMem::tag`] ([`DmaTag`]), for the
//! MMIO/DMA trace.

use super::dma::{DmaError, DmaMaps};
use crate::platform::topology::P2pPath;

/// A contiguous piece of a transfer: `len` bytes at bus address `addr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub addr: u64,
    pub len: u64,
}

/// The PCIe path an access took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PciePath {
    /// Host memory (guest RAM) through the root complex.
    Host,
    /// A GPU's BAR1, peer to peer.
    P2p(P2pPath),
}

impl PciePath {
    /// The path's name in the WQE log and the MMIO/DMA trace.
    pub fn name(self) -> &'static str {
        match self {
            PciePath::Host => "host",
            PciePath::P2p(P2pPath::Switch) => "p2p-switch",
            PciePath::P2p(P2pPath::RootComplex) => "p2p-root-complex",
        }
    }
}

/// What a DMA is for, as the MMIO/DMA trace ([`crate::observe::iotrace`]) names it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DmaKind {
    /// A send-queue WQE (or its header) read from the ring.
    WqeFetch,
    /// A receive-queue WQE read from the ring.
    RqWqeFetch,
    /// Message data: read at the source, written at the destination.
    Payload,
    /// A CQE written into a completion ring.
    Cqe,
    /// A command reading its context or MTT entries.
    Command,
    /// A QP context written back (state, consumer indices).
    QpCtx,
    #[default]
    Other,
}

impl DmaKind {
    pub fn name(self) -> &'static str {
        match self {
            DmaKind::WqeFetch => "wqe_fetch",
            DmaKind::RqWqeFetch => "rq_wqe_fetch",
            DmaKind::Payload => "payload",
            DmaKind::Cqe => "cqe",
            DmaKind::Command => "command",
            DmaKind::QpCtx => "qp_ctx",
            DmaKind::Other => "other",
        }
    }
}

/// What the next accesses are for, and the objects they concern (where known).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DmaTag {
    pub what: DmaKind,
    pub qp: Option<u32>,
    pub cq: Option<u32>,
    pub mr: Option<u32>,
}

impl DmaTag {
    pub fn qp(what: DmaKind, qp: u32) -> DmaTag {
        DmaTag { what, qp: Some(qp), ..DmaTag::default() }
    }
}

/// Guest memory as the engine reaches it (the client's DMA maps through the router; a
/// test memfd in tests).
pub trait GuestMem {
    /// Names what the following accesses are for (the MMIO/DMA trace; a plain store, so
    /// it costs nothing when the trace is off). The tag holds until the next one.
    fn tag(&self, _tag: DmaTag) {}
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<PciePath, DmaError>;
    fn write(&self, addr: u64, buf: &[u8]) -> Result<PciePath, DmaError>;
    /// Counts `bytes` of payload moved on `path` (the router feeds its statistics).
    fn account(&self, _path: PciePath, _bytes: u64) {}

    /// The path an access at `addr` would take, without moving data or counting anything
    /// (the WQE trace names the path of each buffer).
    fn path_of(&self, _addr: u64) -> PciePath {
        PciePath::Host
    }

    /// Copies between two guest addresses (source path, destination path); the default
    /// goes through a small buffer.
    fn copy(&self, src: u64, dst: u64, len: usize) -> Result<(PciePath, PciePath), DmaError> {
        let mut buf = [0u8; 4096];
        let mut done = 0;
        let mut paths = (PciePath::Host, PciePath::Host);
        while done < len {
            let n = (len - done).min(buf.len());
            let off = done as u64;
            let at = |a: u64| a.checked_add(off).ok_or(DmaError::Unmapped { addr: a, len });
            paths.0 = self.read(at(src)?, &mut buf[..n])?;
            paths.1 = self.write(at(dst)?, &buf[..n])?;
            done += n;
        }
        Ok(paths)
    }
}

impl GuestMem for DmaMaps {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<PciePath, DmaError> {
        DmaMaps::read(self, addr, buf).map(|()| PciePath::Host)
    }

    fn write(&self, addr: u64, buf: &[u8]) -> Result<PciePath, DmaError> {
        DmaMaps::write(self, addr, buf).map(|()| PciePath::Host)
    }

    fn copy(&self, src: u64, dst: u64, len: usize) -> Result<(PciePath, PciePath), DmaError> {
        DmaMaps::copy(self, src, dst, len).map(|()| (PciePath::Host, PciePath::Host))
    }
}

pub enum Source<'a> {
    Inline(&'a [u8]),
    Segments(&'a [Segment]),
}

/// Walks a segment list piece by piece. Addresses come from MR page lists and the wire:
/// every sum is checked, and a piece whose end is not addressable ends the walk with an
/// error instead of wrapping.
struct Cursor<'a> {
    segs: &'a [Segment],
    idx: usize,
    off: u64,
}

impl<'a> Cursor<'a> {
    fn new(segs: &'a [Segment]) -> Self {
        Cursor { segs, idx: 0, off: 0 }
    }

    /// The next piece of at most `max` bytes: (bus address, length); None at the end of
    /// the list, Err when the piece's address would wrap.
    fn take(&mut self, max: u64) -> Result<Option<(u64, u64)>, DmaError> {
        while let Some(s) = self.segs.get(self.idx) {
            if self.off < s.len {
                let n = (s.len - self.off).min(max);
                let addr = s.addr.checked_add(self.off).filter(|a| a.checked_add(n).is_some());
                let addr = addr.ok_or(DmaError::Unmapped { addr: s.addr, len: s.len as usize })?;
                self.off += n;
                return Ok(Some((addr, n)));
            }
            self.idx += 1;
            self.off = 0;
        }
        Ok(None)
    }

    /// The next piece, which must exist.
    fn need(&mut self, max: u64) -> Result<(u64, u64), DmaError> {
        self.take(max)?.ok_or(DmaError::Unmapped { addr: 0, len: max as usize })
    }

    /// Skips `n` bytes (fails when the list is shorter).
    fn skip(&mut self, mut n: u64) -> Result<(), DmaError> {
        while n > 0 {
            let (_, k) = self.need(n)?;
            n -= k;
        }
        Ok(())
    }
}

/// Copies `len` bytes from `src` into `dst` (which must hold at least `len` bytes):
/// memory to memory piece by piece, inline data written directly.
pub fn copy(mem: &dyn GuestMem, src: &Source, dst: &[Segment], len: u64) -> Result<(), DmaError> {
    copy_at(mem, src, 0, dst, 0, len)
}

/// Copies `len` bytes from `src_off` bytes into `src` to `dst_off` bytes into `dst`.
pub fn copy_at(mem: &dyn GuestMem, src: &Source, src_off: u64, dst: &[Segment], dst_off: u64, len: u64) -> Result<(), DmaError> {
    match src {
        Source::Segments(segs) => copy_segments(mem, segs, src_off, dst, dst_off, len),
        Source::Inline(data) => {
            let unmapped = DmaError::Unmapped { addr: 0, len: len as usize };
            let start = usize::try_from(src_off).map_err(|_| unmapped.clone())?;
            let end = start.checked_add(usize::try_from(len).map_err(|_| unmapped.clone())?).ok_or(unmapped.clone())?;
            let data = data.get(start..end).ok_or(unmapped)?;
            write_at(mem, dst, dst_off, data)
        }
    }
}

/// Memory to memory: one copy per piece where both lists' current pieces overlap.
fn copy_segments(mem: &dyn GuestMem, src: &[Segment], src_off: u64, dst: &[Segment], dst_off: u64, len: u64) -> Result<(), DmaError> {
    let (mut s, mut d) = (Cursor::new(src), Cursor::new(dst));
    s.skip(src_off)?;
    d.skip(dst_off)?;
    let (mut pending_s, mut pending_d) = (None, None);
    let mut done = 0u64;
    while done < len {
        let (sa, sn) = match pending_s.take() {
            Some(p) => p,
            None => s.need(len - done)?,
        };
        let (da, dn) = match pending_d.take() {
            Some(p) => p,
            None => d.need(len - done)?,
        };
        let n = sn.min(dn);
        let (sp, dp) = mem.copy(sa, da, n as usize)?;
        mem.account(sp, n);
        mem.account(dp, n);
        // The cursor checked that each piece's end is addressable, so these cannot wrap;
        // checked all the same.
        let wrap = || DmaError::Unmapped { addr: sa, len: n as usize };
        if sn > n {
            pending_s = Some((sa.checked_add(n).ok_or_else(wrap)?, sn - n));
        }
        if dn > n {
            pending_d = Some((da.checked_add(n).ok_or_else(wrap)?, dn - n));
        }
        done += n;
    }
    Ok(())
}

/// Walks `len` bytes of `segs` from `offset` on, piece by piece: `access(addr, range)`
/// moves the bytes of `range` (of the transfer) at bus address `addr` and says which path
/// it took; they are counted as payload on that path. Fails when the list ends first or an access fails (moving nothing
/// always succeeds).
fn for_each_piece(
    mem: &dyn GuestMem,
    segs: &[Segment],
    offset: u64,
    len: usize,
    mut access: impl FnMut(u64, std::ops::Range<usize>) -> Result<PciePath, DmaError>,
) -> Result<(), DmaError> {
    if len == 0 {
        return Ok(());
    }
    let mut c = Cursor::new(segs);
    c.skip(offset)?;
    let mut done = 0usize;
    while done < len {
        let (addr, n) = c.need((len - done) as u64)?;
        let path = access(addr, done..done + n as usize)?;
        mem.account(path, n);
        done += n as usize;
    }
    Ok(())
}

/// Total bytes of a segment list (saturating: lists come from checked MR translations).
pub fn total_len(segs: &[Segment]) -> u64 {
    segs.iter().fold(0u64, |t, s| t.saturating_add(s.len))
}

/// The sub-list of `segs` covering `len` bytes from `offset` on (loopback payload
/// descriptors); None when the list is shorter.
pub fn sub_segments(segs: &[Segment], offset: u64, len: u64, out: &mut Vec<Segment>) -> Option<()> {
    let mut c = Cursor::new(segs);
    c.skip(offset).ok()?;
    let mut done = 0;
    while done < len {
        let (addr, n) = c.need(len - done).ok()?;
        out.push(Segment { addr, len: n });
        done += n;
    }
    Some(())
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
    use crate::platform::mem::dma::test_ram;

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

    #[test]
    fn segments_near_the_top_of_the_address_space_fail_cleanly() {
        let (ram, fd) = test_ram(1 << 20).unwrap();
        let mut mem = DmaMaps::default();
        mem.map(0, 1 << 20, Some(fd), 0).unwrap();
        ram.write(0, &[7u8; 64]).unwrap();
        let top = [Segment { addr: 0xFFFF_FFFF_FFFF_F000, len: 0x2000 }];
        let low = [Segment { addr: 0, len: 0x4000 }];
        // `s.addr + self.off`: a piece that starts past the wrap point.
        assert!(read_at(&mem, &top, 0x1800, &mut [0u8; 16]).is_err());
        // `sa + n`: the source's remainder after a short destination piece would wrap.
        let short = [Segment { addr: 0, len: 0x800 }, Segment { addr: 0x1000, len: 0x1800 }];
        assert!(copy(&mem, &Source::Segments(&top), &short, 0x2000).is_err());
        // `da + n`: the same on the destination side.
        assert!(copy(&mem, &Source::Segments(&short), &top, 0x2000).is_err());
        assert!(copy_at(&mem, &Source::Segments(&low), 0, &top, 0x1000, 16).is_err());
        assert!(copy_at(&mem, &Source::Inline(&[1, 2]), u64::MAX, &low, 0, 2).is_err(), "inline offset overflow");
    }
}
