//! The engine's failure containment ([`super::runner::EngineRunner`], docs/verbs.md
//! §5.1): a panic forced through the test hook in a command or in a pass makes the device
//! fatal (flag, async error, error completions for what was queued, commands refused,
//! doorbells dropped), and a reset brings it back to a working engine.

use super::engine::Engine;
use super::runner::{EngineRunner, Event, CMD_TEST_PANIC};
use super::tests::*;
use crate::contract::abi::*;
use std::sync::atomic::Ordering;

fn command(drv: &mut EngineRunner, d: &Dev, op: u32, index: u32) -> u32 {
    let (reply, rx) = super::call::channel();
    drv.handle(&d.mem, Event::Command { op, index, tables: tables(), reply });
    rx.try_recv().expect("every command is answered, even one that panicked")
}

/// A loopback pair with two WRITEs and a RECV queued, its engine in an [`EngineRunner`]
/// with the test hooks on (the Dev keeps a spare engine; swap to use its helpers).
fn queued() -> (Dev, EngineRunner, Vec<u8>) {
    let mut d = Dev::pair(RW);
    let lk = d.reg_mr(1, 7, RW, SRC, 4096);
    let rk = d.reg_mr(2, 7, RW, DST, 4096);
    let data = d.fill(SRC, 64, 3);
    d.recv(2, 30, &[sge(DST + 1024, 64, rk)]);
    d.send(1, WQE_OP_RDMA_WRITE, 1, &[sge(SRC, 64, lk)], VA + DST, rk);
    d.send(1, WQE_OP_RDMA_WRITE, 2, &[sge(SRC, 64, lk)], VA + DST, rk);
    let spare = Engine::new("spare".into(), d.e.shared.clone());
    let mut drv = EngineRunner::new(std::mem::replace(&mut d.e, spare), None);
    drv.set_test_hooks(true);
    (d, drv, data)
}

fn expect_fatal_then_recover(mut d: Dev, mut drv: EngineRunner) {
    let shared = drv.engine.shared.clone();
    assert!(drv.is_fatal() && shared.fatal.load(Ordering::SeqCst), "fatal latched");
    assert_eq!(d.last_error.load(Ordering::SeqCst), u64::from(ASYNC_ERR_FATAL) << 24);
    // What was queued completed in error: the head send WQE fatal, the rest flushed.
    std::mem::swap(&mut d.e, &mut drv.engine);
    let sends = d.poll(1);
    let st: Vec<_> = sends.iter().map(|c| (c.wr_id, c.status, c.syndrome)).collect();
    assert_eq!(st, [(1, WC_FATAL_ERR, u32::from(QP_ERR_FATAL)), (2, WC_WR_FLUSH_ERR, 0)]);
    let recvs = d.poll(2);
    assert_eq!(recvs.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(), [(30, WC_WR_FLUSH_ERR)]);
    assert_eq!(d.read(DST, 64), vec![0; 64], "nothing was written after the failure");
    std::mem::swap(&mut d.e, &mut drv.engine);
    // Until a reset: commands refused, doorbells and passes do nothing.
    assert_eq!(command(&mut drv, &d, CMD_QUERY_QP, 1), CMD_ERR_FATAL);
    assert_eq!(command(&mut drv, &d, CMD_CREATE_CQ, 3), CMD_ERR_FATAL);
    drv.handle(&d.mem, Event::SqDoorbell { qpn: 1, pi: 9 });
    assert!(!drv.pass(&d.mem) && drv.next_deadline().is_none());
    assert!(drv.engine.cq(3).is_none());
    // A device reset brings back a working engine.
    let (reply, rx) = super::call::channel();
    drv.handle(&d.mem, Event::Reset { reply });
    rx.try_recv().unwrap();
    assert!(!drv.is_fatal() && !shared.fatal.load(Ordering::SeqCst));
    assert_eq!(d.last_error.load(Ordering::SeqCst), 0);
    drv.engine.set_dma_ctrl(true, true);
    std::mem::swap(&mut d.e, &mut drv.engine);
    (d.sq_pi, d.rq_pi, d.cq_ci, d.mtt_next) = (vec![0; 8], vec![0; 8], vec![0; 8], 0);
    d.load_pair(RW);
    let lk = d.reg_mr(1, 7, RW, SRC, 4096);
    let rk = d.reg_mr(2, 7, RW, DST, 4096);
    d.send(1, WQE_OP_RDMA_WRITE, 5, &[sge(SRC, 64, lk)], VA + DST, rk);
    let c = d.run_until(1, 1);
    assert_eq!((c[0].wr_id, c[0].status), (5, WC_SUCCESS));
    assert_eq!(d.read(DST, 64), d.read(SRC, 64));
}

#[test]
fn a_panic_in_a_command_makes_the_device_fatal_until_reset() {
    let (d, mut drv, _) = queued();
    assert_eq!(command(&mut drv, &d, CMD_TEST_PANIC, 0), CMD_ERR_FATAL, "the command that failed answers FATAL");
    expect_fatal_then_recover(d, drv);
}

#[test]
fn a_panic_in_a_pass_makes_the_device_fatal_until_reset() {
    let (d, mut drv, data) = queued();
    assert_eq!(command(&mut drv, &d, CMD_TEST_PANIC, 1), CMD_OK, "armed for the next pass");
    assert!(!drv.pass(&d.mem), "the pass failed before any work");
    assert_eq!(d.read(SRC, 64), data);
    expect_fatal_then_recover(d, drv);
}

#[test]
fn without_the_test_hooks_the_hook_command_is_unknown() {
    let (d, mut drv, _) = queued();
    drv.set_test_hooks(false);
    assert_eq!(command(&mut drv, &d, CMD_TEST_PANIC, 0), CMD_ERR_BAD_OP);
    assert!(!drv.is_fatal());
}

#[test]
fn a_panic_before_sleeping_makes_the_device_fatal_until_reset() {
    let (d, mut drv, data) = queued();
    assert_eq!(command(&mut drv, &d, CMD_TEST_PANIC, 2), CMD_OK, "armed for the next sleep");
    assert!(drv.prepare_sleep(&d.mem), "a failed publication lets the loop sleep");
    assert_eq!(d.read(SRC, 64), data);
    expect_fatal_then_recover(d, drv);
}
