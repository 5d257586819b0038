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

#[test]
fn one_pass_moves_a_bounded_number_of_bytes_per_qp() {
    use super::engine::PASS_BYTES;
    use super::tests::{sge, DATA, VA};
    // QP 1 has 32 loopback WRITEs of 1 MiB queued, QP 2 one of 4 KiB: one pass (64 WQEs
    // per QP) gives QP 1 about PASS_BYTES of them, not all 32 MiB, and QP 2 its turn.
    let mut d = Dev::pair(RW);
    let (src, dst) = (DATA, DATA + (2 << 20));
    let lk = d.reg_mr(1, 7, RW, src, 1 << 20);
    let rk = d.reg_mr(2, 7, RW, dst, 1 << 20);
    for i in 0..32 {
        d.send(1, WQE_OP_RDMA_WRITE, i, &[sge(src, 1 << 20, lk)], VA + dst, rk);
    }
    d.send(2, WQE_OP_RDMA_WRITE, 99, &[sge(dst, 4096, rk)], VA + src, lk);
    d.e.run(&d.mem, 64);
    let (one, two) = (d.poll(1).len(), d.poll(2).len());
    assert_eq!(two, 1, "QP 2 had its turn in the pass");
    assert!(one >= 1 && (one as u64) < 32 && (one as u64) <= PASS_BYTES / (1 << 20) + 1, "QP 1 completed {one} WRITEs of 1 MiB in one pass");
    let rest = d.run_until(1, 32 - one);
    assert_eq!(rest.len(), 32 - one, "the rest in later passes");
    assert!(rest.iter().all(|c| c.status == WC_SUCCESS));

    // One WRITE of 16 MiB: no single pass copies all of it.
    let mut d = Dev::pair(RW);
    let (src, dst) = (DATA, DATA + (16 << 20));
    let lk = d.reg_mr(1, 7, RW, src, 16 << 20);
    let rk = d.reg_mr(2, 7, RW, dst, 16 << 20);
    let data = d.fill(src, 16 << 20, 3);
    d.send(1, WQE_OP_RDMA_WRITE, 7, &[sge(src, 16 << 20, lk)], VA + dst, rk);
    d.e.run(&d.mem, 64);
    assert!(d.poll(1).is_empty(), "16 MiB is more than one pass moves");
    let c = d.run_until(1, 1);
    assert_eq!(c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(), [(7, WC_SUCCESS)]);
    assert!(d.read(dst, 16 << 20) == data, "every byte placed");
}
