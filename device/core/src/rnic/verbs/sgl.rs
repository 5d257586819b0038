//! A work request's local buffers (its SGE list), checked whole through the MR table when
//! the work request starts and translated into bus segments one packet's share at a time:
//! what the engine holds for a WQE in flight, or for the RECV a message is filling, is its
//! SGEs, not a segment per page of up to 2 GiB.

use super::mr::{KeyError, MrTable, Segment};
use crate::contract::abi::Sge;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sgl {
    /// The SGEs of non-zero length, in order.
    sges: Vec<Sge>,
    pd: u32,
    access: u8,
    len: u64,
}

impl Sgl {
    /// Checks every SGE of non-zero length (key, protection domain `pd`, `access` bits,
    /// range); nothing is translated. The caller bounds the total length.
    pub fn check(mrs: &MrTable, sges: &[Sge], pd: u32, access: u8) -> Result<Sgl, KeyError> {
        let sges: Vec<Sge> = sges.iter().filter(|s| s.length != 0).copied().collect();
        for s in &sges {
            mrs.check(s.lkey, pd, access, s.addr, u64::from(s.length))?;
        }
        let len = sges.iter().map(|s| u64::from(s.length)).sum();
        Ok(Sgl { sges, pd, access, len })
    }

    /// Bytes the buffers hold.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the buffers name MR `index` (what CMD_DEREG_MR looks for).
    pub fn uses(&self, index: u32) -> bool {
        self.sges.iter().any(|s| s.lkey >> 8 == index)
    }

    /// The MR of the first buffer (what the DMA trace tags the payload with).
    pub fn first_mr(&self) -> Option<u32> {
        self.sges.first().map(|s| s.lkey >> 8)
    }

    /// The bus segments of bytes `[off, off + len)` of the buffers, checked again (an MR
    /// deregistered or registered anew since [`Sgl::check`] is refused, never reused).
    pub fn segments(&self, mrs: &MrTable, off: u64, len: u64) -> Result<Vec<Segment>, KeyError> {
        let mut out = Vec::new();
        let (mut skip, mut left) = (off, len);
        for s in &self.sges {
            if left == 0 {
                break;
            }
            let l = u64::from(s.length);
            if skip >= l {
                skip -= l;
                continue;
            }
            let n = (l - skip).min(left);
            let va = s.addr.checked_add(skip).ok_or(KeyError::Range)?;
            mrs.check(s.lkey, self.pd, self.access, va, n)?.segments(va, n, &mut out)?;
            skip = 0;
            left -= n;
        }
        if left != 0 {
            return Err(KeyError::Range);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::abi::{MrCtx, ACCESS_LOCAL_WRITE};
    use crate::rnic::verbs::mr::Mr;

    #[test]
    fn a_range_across_sges_is_translated_piece_by_piece() {
        let ctx = MrCtx { iova: 0x10_0000, length: 0x3000, pd: 1, npages: 3, access: ACCESS_LOCAL_WRITE, key: 7, page_shift: 12, ..Default::default() };
        let mut t = MrTable::new(4);
        t.insert(1, Mr::from_ctx(&ctx, vec![0xa000, 0x5000, 0x6000]).unwrap());
        let key = 1 << 8 | 7;
        let sge = |addr, length| Sge { addr, length, lkey: key };
        let sgl = Sgl::check(&t, &[sge(0x10_0800, 0x1000), sge(0, 0), sge(0x10_2000, 0x100)], 1, ACCESS_LOCAL_WRITE).unwrap();
        assert_eq!((sgl.len(), sgl.first_mr(), sgl.uses(1), sgl.uses(0)), (0x1100, Some(1), true, false), "the empty SGE dropped");
        let segs = sgl.segments(&t, 0x700, 0x200).unwrap();
        assert_eq!(segs, vec![Segment { addr: 0xaf00, len: 0x100 }, Segment { addr: 0x5000, len: 0x100 }], "a page boundary inside the first SGE");
        let segs = sgl.segments(&t, 0xf00, 0x200).unwrap();
        assert_eq!(segs, vec![Segment { addr: 0x5700, len: 0x100 }, Segment { addr: 0x6000, len: 0x100 }], "across the SGEs");
        assert_eq!(sgl.segments(&t, 0x1000, 0x101), Err(KeyError::Range), "past the end");
        assert_eq!(Sgl::check(&t, &[sge(0x10_2f00, 0x200)], 1, ACCESS_LOCAL_WRITE), Err(KeyError::Range));
        t.remove(1);
        assert_eq!(sgl.segments(&t, 0, 1), Err(KeyError::NoSuchKey), "the MR is gone");
    }
}
