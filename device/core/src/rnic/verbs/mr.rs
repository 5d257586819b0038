//! Memory regions: the table CMD_REG_MR fills, key lookup with PD, access and range checks
//! (as rxe's `lookup_mr`/`mr_check_range`), and translation of a virtual range into bus
//! address segments through the MR's page list (copied once from the MTT at registration;
//! at most `MAX_MR_PAGES` entries in all, so what a guest makes the host hold is bounded).

use crate::contract::abi::{
    MrCtx, ACCESS_FLUSH_GLOBAL, ACCESS_FLUSH_PERSISTENT, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE, MAX_MR_PAGES,
};

pub const ACCESS_ALL: u8 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC | ACCESS_FLUSH_GLOBAL | ACCESS_FLUSH_PERSISTENT;
/// Page sizes an MR may use: 4 KiB .. 1 GiB.
pub const PAGE_SHIFTS: std::ops::RangeInclusive<u8> = 12..=30;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mr {
    pub key: u8,
    pub pd: u32,
    pub access: u8,
    pub iova: u64,
    pub length: u64,
    pub page_shift: u8,
    /// Bus address of each page, the first being the page that holds `iova`.
    pub pages: Vec<u64>,
}

/// Why a key check failed (the caller maps it to a local or remote error status).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyError {
    NoSuchKey,
    WrongPd,
    Access,
    Range,
}

pub use crate::platform::mem::access::Segment;

impl Mr {
    /// Checks an MR context (before its MTT entries are read); returns the page count it
    /// needs, or why it is invalid.
    pub fn check_ctx(ctx: &MrCtx, mtt_entries: u64) -> Result<(), &'static str> {
        if !PAGE_SHIFTS.contains(&ctx.page_shift) {
            return Err("page_shift outside 12..=30");
        }
        if ctx.access & !ACCESS_ALL != 0 {
            return Err("unknown access bits");
        }
        if ctx.access & (ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC) != 0 && ctx.access & ACCESS_LOCAL_WRITE == 0 {
            return Err("REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE");
        }
        if ctx.length == 0 || ctx.iova.checked_add(ctx.length).is_none() {
            return Err("empty or wrapping range");
        }
        if ctx.rsvd0 != 0 {
            return Err("reserved field set");
        }
        let page = 1u64 << ctx.page_shift;
        let first = ctx.iova & !(page - 1);
        let needed = (ctx.iova + ctx.length - first).div_ceil(page);
        if u64::from(ctx.npages) < needed {
            return Err("npages does not cover [iova, iova + length)");
        }
        match u64::from(ctx.mtt_offset).checked_add(u64::from(ctx.npages)) {
            Some(end) if end <= mtt_entries => Ok(()),
            _ => Err("MTT range outside MTT_ENTRIES"),
        }
    }

    pub fn from_ctx(ctx: &MrCtx, pages: Vec<u64>) -> Result<Mr, &'static str> {
        let page = 1u64 << ctx.page_shift;
        if pages.iter().any(|p| p & (page - 1) != 0) {
            return Err("an MTT entry is not page aligned");
        }
        // The end of every page must be addressable: [p, p + page) may not reach 2^64.
        if pages.iter().any(|p| p.checked_add(page).is_none()) {
            return Err("an MTT entry's page runs past the end of the bus address space");
        }
        Ok(Mr { key: ctx.key, pd: ctx.pd, access: ctx.access, iova: ctx.iova, length: ctx.length, page_shift: ctx.page_shift, pages })
    }

    /// Whether [va, va + len) lies inside the MR.
    fn contains(&self, va: u64, len: u64) -> bool {
        let mr_end = self.iova.checked_add(self.length);
        va >= self.iova && va.checked_add(len).zip(mr_end).is_some_and(|(end, mr_end)| end <= mr_end)
    }

    /// Appends the bus segments of [va, va + len), merging physically contiguous pages.
    /// The range should have been checked with [`MrTable::check`]; a range outside the
    /// page list or a segment whose end is not addressable is refused (`KeyError::Range`),
    /// never a panic or a wrapped address.
    pub fn segments(&self, va: u64, len: u64, out: &mut Vec<Segment>) -> Result<(), KeyError> {
        let page = 1u64 << self.page_shift;
        let base = self.iova & !(page - 1);
        let mut va = va;
        let mut left = len;
        while left > 0 {
            let rel = va.checked_sub(base).ok_or(KeyError::Range)?;
            let idx = usize::try_from(rel >> self.page_shift).map_err(|_| KeyError::Range)?;
            let off = va & (page - 1);
            let n = (page - off).min(left);
            let addr = self.pages.get(idx).and_then(|p| p.checked_add(off)).ok_or(KeyError::Range)?;
            addr.checked_add(n).ok_or(KeyError::Range)?;
            match out.last_mut() {
                Some(last) if last.addr.checked_add(last.len) == Some(addr) => last.len += n,
                _ => out.push(Segment { addr, len: n }),
            }
            va = va.checked_add(n).ok_or(KeyError::Range)?;
            left -= n;
        }
        Ok(())
    }
}

pub struct MrTable {
    mrs: Vec<Option<Mr>>,
    /// Page-list entries the registered MRs hold in all (at most `pages_limit`).
    pages_held: u64,
    /// `MAX_MR_PAGES`, or less for a harness that wants to reach the bound.
    pages_limit: u64,
}

impl MrTable {
    pub fn new(max: usize) -> Self {
        MrTable { mrs: vec![None; max], pages_held: 0, pages_limit: MAX_MR_PAGES }
    }

    pub fn clear(&mut self) {
        self.mrs.iter_mut().for_each(|m| *m = None);
        self.pages_held = 0;
    }

    /// Whether `npages` more page-list entries fit under [`MAX_MR_PAGES`] (asked before
    /// they are read from the MTT).
    pub fn has_room(&self, npages: u64) -> bool {
        self.pages_held.checked_add(npages).is_some_and(|n| n <= self.pages_limit)
    }

    /// Lowers the page-list bound (fuzz harnesses, whose MTT is small, reach it this way).
    pub fn limit_pages(&mut self, limit: u64) {
        self.pages_limit = limit.min(MAX_MR_PAGES);
    }

    /// Registers `mr` at a free `index` (the caller checked both, and the room).
    pub fn insert(&mut self, index: usize, mr: Mr) {
        if let Some(slot @ None) = self.mrs.get_mut(index) {
            self.pages_held += mr.pages.len() as u64;
            *slot = Some(mr);
        }
    }

    /// Deregisters MR `index`, returning it.
    pub fn remove(&mut self, index: usize) -> Option<Mr> {
        let mr = self.mrs.get_mut(index)?.take()?;
        self.pages_held -= mr.pages.len() as u64;
        Some(mr)
    }

    pub fn get(&self, index: usize) -> Option<&Mr> {
        self.mrs.get(index).and_then(Option::as_ref)
    }

    /// Looks up `key` for an access of `len` bytes at `va` needing `access` bits, from
    /// protection domain `pd`.
    pub fn check(&self, key: u32, pd: u32, access: u8, va: u64, len: u64) -> Result<&Mr, KeyError> {
        let mr = self.get((key >> 8) as usize).filter(|m| m.key == key as u8).ok_or(KeyError::NoSuchKey)?;
        if mr.pd != pd {
            return Err(KeyError::WrongPd);
        }
        if mr.access & access != access {
            return Err(KeyError::Access);
        }
        if !mr.contains(va, len) {
            return Err(KeyError::Range);
        }
        Ok(mr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> MrCtx {
        MrCtx {
            iova: 0x7000_0800,
            length: 0x2000,
            pd: 3,
            mtt_offset: 10,
            npages: 3,
            access: ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE,
            key: 0x5a,
            page_shift: 12,
            rsvd0: 0,
        }
    }

    #[test]
    fn context_checks() {
        assert_eq!(Mr::check_ctx(&ctx(), 13), Ok(()));
        assert!(Mr::check_ctx(&ctx(), 12).is_err(), "MTT range beyond MTT_ENTRIES");
        assert!(Mr::check_ctx(&MrCtx { npages: 2, ..ctx() }, 100).is_err(), "0x800 + 0x2000 spans 3 pages");
        assert!(Mr::check_ctx(&MrCtx { page_shift: 11, ..ctx() }, 100).is_err());
        assert!(Mr::check_ctx(&MrCtx { access: ACCESS_REMOTE_WRITE, ..ctx() }, 100).is_err());
        assert!(Mr::check_ctx(&MrCtx { access: 0x80, ..ctx() }, 100).is_err());
        assert!(Mr::check_ctx(&MrCtx { length: 0, ..ctx() }, 100).is_err());
        assert!(Mr::check_ctx(&MrCtx { iova: u64::MAX - 10, ..ctx() }, 100).is_err());
        assert!(Mr::check_ctx(&MrCtx { mtt_offset: u32::MAX, ..ctx() }, 100).is_err());
        assert!(Mr::from_ctx(&ctx(), vec![0x1000, 0x2001, 0x3000]).is_err(), "unaligned page");
    }

    #[test]
    fn key_lookup_checks_key_pd_access_range() {
        let mut t = MrTable::new(16);
        t.insert(2, Mr::from_ctx(&ctx(), vec![0x10_0000, 0x10_1000, 0x30_0000]).unwrap());
        let key = 2 << 8 | 0x5a;
        assert!(t.check(key, 3, ACCESS_REMOTE_WRITE, 0x7000_0800, 0x2000).is_ok());
        assert_eq!(t.check(2 << 8 | 0x5b, 3, 0, 0x7000_0800, 1).err(), Some(KeyError::NoSuchKey));
        assert_eq!(t.check(3 << 8 | 0x5a, 3, 0, 0x7000_0800, 1).err(), Some(KeyError::NoSuchKey));
        assert_eq!(t.check(u32::MAX, 3, 0, 0x7000_0800, 1).err(), Some(KeyError::NoSuchKey));
        assert_eq!(t.check(key, 4, 0, 0x7000_0800, 1).err(), Some(KeyError::WrongPd));
        assert_eq!(t.check(key, 3, ACCESS_REMOTE_READ, 0x7000_0800, 1).err(), Some(KeyError::Access));
        assert_eq!(t.check(key, 3, 0, 0x7000_07ff, 1).err(), Some(KeyError::Range));
        assert_eq!(t.check(key, 3, 0, 0x7000_0800, 0x2001).err(), Some(KeyError::Range));
        assert_eq!(t.check(key, 3, 0, u64::MAX, 2).err(), Some(KeyError::Range));
    }

    #[test]
    fn translation_splits_and_merges_pages() {
        let mr = Mr::from_ctx(&ctx(), vec![0x10_0000, 0x10_1000, 0x30_0000]).unwrap();
        let mut segs = Vec::new();
        mr.segments(0x7000_0800, 0x2000, &mut segs).unwrap();
        assert_eq!(
            segs,
            vec![Segment { addr: 0x10_0800, len: 0x1800 }, Segment { addr: 0x30_0000, len: 0x800 }],
            "pages 0 and 1 are contiguous and merge; page 2 is elsewhere"
        );
        segs.clear();
        mr.segments(0x7000_1ffe, 4, &mut segs).unwrap();
        assert_eq!(segs, vec![Segment { addr: 0x10_1ffe, len: 2 }, Segment { addr: 0x30_0000, len: 2 }]);
    }

    #[test]
    fn mtt_entries_near_the_top_of_the_address_space_are_refused_not_wrapped() {
        let top = 0xFFFF_FFFF_FFFF_F000u64;
        // REG_MR refuses a page whose end is not addressable (was `last.addr + last.len`).
        assert!(Mr::from_ctx(&ctx(), vec![top, 0x1000, 0x2000]).is_err());
        assert!(Mr::from_ctx(&MrCtx { page_shift: 30, ..ctx() }, vec![0xFFFF_FFFF_C000_0000, 0, 0]).is_err());
        // An MR built around the check still translates without overflow: a clean error.
        let mr = Mr { key: 1, pd: 3, access: 0, iova: 0x7000_0800, length: 0x2000, page_shift: 12, pages: vec![top, 0x1000, 0x2000] };
        let mut segs = Vec::new();
        assert_eq!(mr.segments(0x7000_0800, 0x2000, &mut segs), Err(KeyError::Range), "page + offset + length wraps");
        let mr = Mr { pages: vec![0x1000], ..mr };
        assert_eq!(mr.segments(0x7000_0800, 0x2000, &mut Vec::new()), Err(KeyError::Range), "range beyond the page list");
        assert_eq!(mr.segments(0x6000_0000, 1, &mut Vec::new()), Err(KeyError::Range), "below the MR's first page");
        // `iova + length` of a corrupted MR does not wrap in the range check.
        let mut t = MrTable::new(4);
        t.insert(1, Mr { iova: u64::MAX - 4, length: 100, ..mr });
        assert_eq!(t.check(1 << 8 | 1, 3, 0, u64::MAX - 2, 1).err(), Some(KeyError::Range));
    }
}
