//! What a guest can make the engine hold or do in one go: the page lists of its MRs
//! (bounded by `MAX_MR_PAGES` in all) and the work of one pass (bounded in WQEs and in
//! bytes per QP).

use super::tests::{Dev, MR_TABLE, MTT_ENTRIES, RW};
use crate::contract::abi::*;

#[test]
fn mr_page_lists_are_bounded_in_all_and_the_bound_is_given_back() {
    // MRs may share one MTT range: each registration still copies its page list, so
    // without a bound 4096 MRs of 2^27 entries would make the host hold 4 TiB. Here every
    // MR names the whole MTT (MTT_ENTRIES pages of 4 KiB, all page 0).
    let mut d = Dev::new();
    let per_mr = MTT_ENTRIES;
    let fit = MAX_MR_PAGES / per_mr;
    let ctx = MrCtx { iova: 0, length: per_mr << 12, pd: 1, mtt_offset: 0, npages: per_mr as u32, access: RW, key: 1, page_shift: 12, rsvd0: 0 };
    for i in 0..=fit as u32 {
        d.put(MR_TABLE + u64::from(i) * 32, &ctx);
    }
    for i in 0..fit as u32 {
        assert_eq!(d.cmd(CMD_REG_MR, i), CMD_OK, "MR {i}");
    }
    assert_eq!(d.cmd(CMD_REG_MR, fit as u32), CMD_ERR_NO_RESOURCES, "one MR beyond {MAX_MR_PAGES} pages");
    assert_eq!(d.cmd(CMD_DEREG_MR, 0), CMD_OK);
    assert_eq!(d.cmd(CMD_REG_MR, fit as u32), CMD_OK, "deregistration gave its pages back");
    assert_eq!(d.cmd(CMD_REG_MR, 0), CMD_ERR_NO_RESOURCES);
    d.e.reset();
    d.e.set_dma_ctrl(true, true);
    assert_eq!(d.cmd(CMD_REG_MR, 0), CMD_OK, "a reset forgets every MR");
}
