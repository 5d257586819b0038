//! Revocable access to the DMA maps: every mapping carries a [`Live`] state (revoked by
//! DMA_UNMAP, with a count of the chunks under way through it) and its client's
//! protection ([`Prot`], the DMA_MAP READ/WRITE flags). Accesses copy in chunks of at
//! most [`CHUNK`] bytes; before each chunk they register with the mapping (and the
//! function's [`DmaGate`]) and check it is still live, so an unmap that revokes a mapping
//! and then sees no chunk under way knows no further byte of it is read or written,
//! however long the pass that took the old snapshot runs on.

use super::gate::{Busy, Closed, DmaGate, Passage};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use vm_memory::VolatileSlice;

/// The largest copy between two checks of a mapping's state: an unmap waits for one
/// chunk at most (a memcpy of 64 KiB), never for a whole access.
pub const CHUNK: usize = 64 << 10;

/// How long DMA_UNMAP waits for the chunks under way through a revoked mapping before it
/// reports an error instead of success: far longer than one chunk's copy takes.
pub const REVOKE_WAIT: Duration = Duration::from_secs(1);

/// What a DMA_MAP allowed the device to do in its range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prot {
    pub read: bool,
    pub write: bool,
}

impl Prot {
    pub const READ_WRITE: Prot = Prot { read: true, write: true };

    /// Whether an access in direction `write` is allowed.
    pub fn allows(self, write: bool) -> bool {
        if write {
            self.write
        } else {
            self.read
        }
    }
}

/// A mapping's liveness: revoked once, never revived (a new DMA_MAP makes a new one).
#[derive(Default)]
pub struct Live {
    revoked: AtomicBool,
    busy: Busy,
}

impl Live {
    /// Registers one chunk; None once revoked (register first, then check: paired with
    /// [`Live::revoke`]'s store-then-wait, a chunk either ends before the wait does or
    /// sees the revocation).
    fn enter(&self) -> Option<Passage<'_>> {
        let u = self.busy.enter();
        (!self.revoked.load(Ordering::SeqCst)).then_some(u)
    }

    /// Revokes the mapping; true once no chunk is under way through it (false: one still
    /// was after [`REVOKE_WAIT`]).
    pub fn revoke(&self) -> bool {
        self.revoke_within(REVOKE_WAIT)
    }

    fn revoke_within(&self, wait: Duration) -> bool {
        self.revoked.store(true, Ordering::SeqCst);
        self.busy.drain(wait)
    }
}

/// A piece of an access: a slice of one mapping (or of a GPU's BAR1: no [`Live`]).
pub struct Span<'a> {
    pub slice: VolatileSlice<'a, ()>,
    pub live: Option<&'a Live>,
}

/// Why a chunked copy stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// A mapping it uses was unmapped meanwhile.
    Revoked,
    /// The function's DMA gate closed meanwhile.
    Gate(Closed),
}

/// The registrations one chunk needs: the gate, and each mapping it touches (held, not
/// read: dropping them ends the chunk).
struct ChunkGuard<'a>(#[allow(dead_code)] Option<Passage<'a>>, #[allow(dead_code)] Option<Passage<'a>>, #[allow(dead_code)] Option<Passage<'a>>);

fn enter<'a>(gate: Option<&'a DmaGate>, a: Option<&'a Live>, b: Option<&'a Live>) -> Result<ChunkGuard<'a>, Stopped> {
    let g = gate.map(DmaGate::enter).transpose().map_err(Stopped::Gate)?;
    let ua = a.map(|l| l.enter().ok_or(Stopped::Revoked)).transpose()?;
    let ub = b.map(|l| l.enter().ok_or(Stopped::Revoked)).transpose()?;
    Ok(ChunkGuard(g, ua, ub))
}

/// Runs `f(chunk, offset into the whole, its length)` on each chunk of the spans in turn,
/// each inside the gate and its mapping's entry.
fn each_chunk(spans: &[Span<'_>], gate: Option<&DmaGate>, mut f: impl FnMut(&VolatileSlice<'_>, usize, usize)) -> Result<(), Stopped> {
    let mut done = 0;
    for s in spans {
        let mut off = 0;
        while off < s.slice.len() {
            let n = (s.slice.len() - off).min(CHUNK);
            let _g = enter(gate, s.live, None)?;
            if let Ok(part) = s.slice.subslice(off, n) {
                f(&part, done, n);
            }
            (off, done) = (off + n, done + n);
        }
    }
    Ok(())
}

/// Copies the spans into `buf` (as long as they are together), chunk by chunk.
pub fn read(spans: &[Span<'_>], buf: &mut [u8], gate: Option<&DmaGate>) -> Result<(), Stopped> {
    each_chunk(spans, gate, |part, done, n| {
        part.copy_to(&mut buf[done..done + n]);
    })
}

/// Copies `buf` into the spans, chunk by chunk.
pub fn write(spans: &[Span<'_>], buf: &[u8], gate: Option<&DmaGate>) -> Result<(), Stopped> {
    each_chunk(spans, gate, |part, done, n| part.copy_from(&buf[done..done + n]))
}

/// Copies between two span lists covering the same number of bytes, chunk by chunk.
pub fn copy(from: &[Span<'_>], to: &[Span<'_>], gate: Option<&DmaGate>) -> Result<(), Stopped> {
    let (mut i, mut io, mut j, mut jo) = (0, 0, 0, 0);
    while i < from.len() && j < to.len() {
        let n = (from[i].slice.len() - io).min(to[j].slice.len() - jo).min(CHUNK);
        let _g = enter(gate, from[i].live, to[j].live)?;
        if let (Ok(a), Ok(b)) = (from[i].slice.subslice(io, n), to[j].slice.subslice(jo, n)) {
            a.copy_to_volatile_slice(b);
        }
        io += n;
        jo += n;
        if io == from[i].slice.len() {
            i += 1;
            io = 0;
        }
        if jo == to[j].slice.len() {
            j += 1;
            jo = 0;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn revoking_waits_for_the_chunk_under_way_and_refuses_later_ones() {
        let live = std::sync::Arc::new(Live::default());
        let chunk = live.enter().expect("live");
        let (tx, rx) = std::sync::mpsc::channel();
        let l = live.clone();
        // A long wait: a failure guard only, so a loaded host cannot end it early.
        let unmap = std::thread::spawn(move || tx.send(l.revoke_within(Duration::from_secs(60))).unwrap());
        let guard = Instant::now() + Duration::from_secs(10); // a failure guard, not a timing
        while !live.revoked.load(Ordering::SeqCst) {
            assert!(Instant::now() < guard, "the revocation never started");
            std::thread::yield_now();
        }
        assert!(live.enter().is_none(), "no new chunk once revoked");
        assert!(rx.try_recv().is_err(), "the unmap waits for the chunk under way (it cannot end while the chunk is held)");
        drop(chunk);
        assert_eq!(rx.recv_timeout(Duration::from_secs(120)), Ok(true), "done once the chunk ended");
        unmap.join().unwrap();
    }
}
