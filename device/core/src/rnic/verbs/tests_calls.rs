//! Calls into an engine held up by its loop (docs/programming.md R-CMD-6): a command,
//! RESET or DMA_CTRL whose waiter gave up never runs, however late the engine reaches it;
//! the device is FATAL and reaches no memory until a reset the engine takes. The engine
//! is "held" simply by not draining its mailbox; the call timeout is shortened, so no
//! test waits for the real one (and none asserts how long anything took).

use super::engine::Engine;
use super::runner::{EngineRunner, EngineSlot, Event};
use super::tests::*;
use crate::contract::abi::*;
use crate::contract::counters::Counter;
use crate::mailbox::Mailbox;
use crate::platform::mem::access::GuestMem;
use crate::platform::mem::dma::DmaMaps;
use crate::platform::mem::router::Router;
use std::collections::VecDeque;
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// A short call timeout: the held engine never answers, so every call ends by it.
const SHORT: Duration = Duration::from_millis(5);

/// A loopback pair's engine handed to a "loop" that does not run yet, reached through a
/// router over the same RAM (so the DMA gate applies), with the call timeout shortened.
fn held() -> (Dev, EngineSlot, EngineRunner, Arc<Mailbox<Event>>, Router) {
    let mut d = Dev::pair(RW);
    let spare = Engine::new("spare".into(), d.e.shared.clone());
    let mut runner = EngineRunner::new(std::mem::replace(&mut d.e, spare), None);
    let fd = {
        use std::os::fd::{AsRawFd, BorrowedFd};
        // SAFETY: the RAM's descriptor stays open for the whole test (Dev owns it).
        unsafe { BorrowedFd::borrow_raw(d.ram.raw_fd().as_raw_fd()) }.try_clone_to_owned().unwrap()
    };
    let mut maps = DmaMaps::default();
    maps.map(0, RAM, Some(std::fs::File::from(fd)), 0).unwrap();
    let router = Router::new(Arc::new(RwLock::new(maps)), Vec::new(), d.stats.clone());
    runner.set_gate(router.gate.clone());
    let mut slot = EngineSlot::Inline(Box::new(runner));
    let mailbox = Arc::new(Mailbox::new().unwrap());
    let runner = slot.attach(mailbox.clone()).unwrap();
    assert!(slot.set_call_timeout(SHORT));
    (d, slot, runner, mailbox, router)
}

/// The loop finally runs: every queued event, then a pass.
fn release(runner: &mut EngineRunner, mailbox: &Mailbox<Event>, router: &Router) {
    let mut q = VecDeque::new();
    mailbox.drain(&mut q);
    let view = router.view();
    for ev in q {
        runner.handle(&view, ev);
    }
    runner.pass(&view);
}

const MARK: [u8; 64] = [0xa5; 64];

#[test]
fn a_command_the_engine_took_too_long_for_never_runs() {
    let (d, mut slot, mut runner, mailbox, router) = held();
    // CQ 5 would be created from this context, QUERY_QP 1 would write back into its slot.
    let cq = CqCtx { ring_addr: RINGS + 0x40_0000, log_size: 6, msix_vector: 1, ..Default::default() };
    d.put(CQ_TABLE + 5 * 32, &cq);
    assert_eq!(slot.command(&router, CMD_CREATE_CQ, 5, tables()), CMD_ERR_TIMEOUT);
    assert_eq!(slot.command(&router, CMD_QUERY_QP, 1, tables()), CMD_ERR_TIMEOUT);
    assert_eq!(d.stats.get(Counter::EngineTimeouts), 2);
    assert!(router.gate.quarantined(), "the device is FATAL and reaches no memory");
    // The driver frees what the commands referenced: the QP's context slot gets reused.
    let slot1 = QP_TABLE + QpCtx::ABI.size as u64;
    d.ram.write(slot1, &MARK).unwrap();
    release(&mut runner, &mailbox, &router);
    let mut back = [0u8; 64];
    d.ram.read(slot1, &mut back).unwrap();
    assert_eq!(back, MARK, "the late QUERY_QP wrote nothing back");
    assert!(runner.engine.cq(5).is_none(), "the late CREATE_CQ created nothing");
    assert!(runner.is_fatal(), "the engine stopped when it resumed");
    assert!(runner.engine.qp(1).is_none_or(|q| q.state == super::qp::QpState::Reset), "and forgot its objects without DMA");
}

#[test]
fn an_abandoned_reset_leaves_the_device_fatal_until_a_reset_the_engine_takes() {
    let (d, mut slot, mut runner, mailbox, router) = held();
    assert!(!slot.reset(&router), "the held engine does not confirm the reset");
    assert!(!slot.dma_ctrl(&router, false, false, false), "nor a DMA_CTRL write");
    assert!(router.gate.quarantined());
    assert!(router.view().write(RINGS, b"x").is_err(), "no DMA of the function after the abandoned reset");
    release(&mut runner, &mailbox, &router);
    assert!(runner.is_fatal(), "the engine stops when it resumes");
    assert_eq!(d.stats.get(Counter::EngineTimeouts), 2);
    let command = |runner: &mut EngineRunner, op, index| {
        let (reply, rx) = super::call::channel();
        runner.handle(&router.view(), Event::Command { op, index, tables: tables(), reply });
        rx.try_recv().unwrap()
    };
    assert_eq!(command(&mut runner, CMD_DESTROY_CQ, 1), CMD_ERR_FATAL, "commands refused until a reset");
    // The loop runs again: a reset it takes lifts the quarantine.
    let (reply, rx) = super::call::channel();
    runner.handle(&router.view(), Event::Reset { reply });
    rx.try_recv().unwrap();
    assert!(!router.gate.quarantined() && !runner.is_fatal());
    let cq = CqCtx { ring_addr: RINGS + 0x40_0000, log_size: 6, msix_vector: 1, ..Default::default() };
    d.put(CQ_TABLE + 5 * 32, &cq);
    assert_eq!(command(&mut runner, CMD_CREATE_CQ, 5), CMD_OK, "the engine works again");
}

#[test]
fn the_registers_say_timeout_and_fatal() {
    let mut r = crate::rnic::tests::test_rnic("t", None);
    let mailbox = Arc::new(Mailbox::new().unwrap());
    let (_runner, _router) = r.attach(mailbox).unwrap();
    assert!(r.set_call_timeout(SHORT));
    let rd = |r: &mut crate::rnic::Rnic, off| {
        let mut b = [0u8; 4];
        crate::function::PciFunction::bar_read(r, 0, off, &mut b);
        u64::from(u32::from_le_bytes(b))
    };
    use crate::regs::rnic::*;
    assert_eq!(rd(&mut r, RNIC_REG_STATUS) & STATUS_FATAL, 0);
    let cmd = u64::from(CMD_CREATE_CQ) << CMD_OP_SHIFT | 3;
    crate::function::PciFunction::bar_write(&mut r, 0, RNIC_REG_CMD, &(cmd as u32).to_le_bytes());
    assert_eq!(rd(&mut r, RNIC_REG_CMD_STATUS), u64::from(CMD_ERR_TIMEOUT));
    assert_ne!(rd(&mut r, RNIC_REG_STATUS) & STATUS_FATAL, 0, "STATUS_FATAL after an abandoned command");
    assert_eq!(rd(&mut r, STATS_BASE + 8 * Counter::EngineTimeouts as u64), 1);
}
