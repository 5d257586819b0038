//! How work reaches a verbs engine, and what runs it. Engine work stays off the MMIO
//! path: a vCPU's register access waits for the socket thread's reply, so that thread
//! only records a doorbell and posts it as an [`Event`] to the engine's [`Mailbox`]
//! (`crate::mailbox`), which wakes the node's event loop (`evloop` in `rnic-emu-server`);
//! the loop owns the engine inside an [`EngineRunner`]. Commands, RESET, DMA_CTRL and
//! ETH_CTRL wait for the engine's answer ([`Remote`]), so a register read after
//! RNIC_REG_CMD sees its status; one the engine does not take within [`COMMAND_TIMEOUT`]
//! is abandoned and never runs (`super::call`), and the device is quarantined
//! (docs/programming.md R-CMD-6).
//!
//! With the doorbell page on (docs/verbs.md §3.1) the runner also takes indices from the
//! page: the loop polls it within [`POLL_WINDOW`] after activity (on hosts with enough
//! CPUs; `evloop` in `rnic-emu-server`) and publishes event indices before it sleeps, so
//! the driver rings MMIO only when asked.
//!
//! An RNIC not (yet) attached to an event loop runs its engine itself, on the caller's
//! thread ([`EngineSlot::Inline`]): register-level unit tests and fuzzing need no threads.
//! Memory is reached through the DMA router, whose view is taken once per pass.

use super::call::{self, Outcome, Reply};
use super::engine::{Engine, Tables};
use crate::contract::abi::{ASYNC_ERR_FATAL, CMD_ERR_DISABLED, CMD_ERR_FATAL, CMD_ERR_TIMEOUT, CMD_OK};
use crate::contract::counters::Counter;
use crate::mailbox::Mailbox;
use crate::platform::mem::access::GuestMem;
use crate::platform::mem::gate::DmaGate;
use crate::platform::mem::router::Router;
use crate::rnic::doorbell::DoorbellPage;
use crate::rnic::eth::{EthPort, EthShared, RingCfg, TX_BUDGET};
use crate::rnic::fabric::packet::Packet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

pub enum Event {
    SqDoorbell {
        qpn: u32,
        pi: u16,
    },
    RqDoorbell {
        qpn: u32,
        pi: u16,
    },
    CqConsumed {
        cqn: u32,
        ci: u16,
    },
    CqArm {
        cqn: u32,
    },
    /// `EQ_CI`: the driver's consumer index of the event queue.
    EqConsumed {
        ci: u32,
    },
    /// `ETH_TXQ_PI` / `ETH_RXQ_PI`: the driver's producer index of an Ethernet ring.
    EthTxDoorbell {
        pi: u16,
    },
    EthRxDoorbell {
        pi: u16,
    },
    /// `ETH_ARM`, with `ETH_VECTOR` as it was when the arm was written.
    EthArm {
        tx_ci: u16,
        rx_ci: u16,
        vector: u16,
    },
    /// Synchronous, like DMA_CTRL: an enabled ring runs when the `ETH_CTRL` write
    /// completes (`crate::rnic::eth::EthPort::ctrl`).
    EthCtrl {
        ctrl: u64,
        tx: RingCfg,
        rx: RingCfg,
        reply: Reply<()>,
    },
    /// Synchronous, like commands: turning the doorbell page on copies the device's
    /// indices into it before the register write completes.
    DmaCtrl {
        enabled: bool,
        int_enabled: bool,
        db_page: bool,
        reply: Reply<()>,
    },
    Command {
        op: u32,
        index: u32,
        tables: Tables,
        reply: Reply<u32>,
    },
    Reset {
        reply: Reply<()>,
    },
    /// Fault injection (docs/faults.md): the engine fails as after an internal error.
    InjectFatal {
        reply: Reply<()>,
    },
}

/// How long a call into an engine run by a loop (a command, RESET, DMA_CTRL, ETH_CTRL)
/// waits for the engine to take it before it is abandoned ([`Remote`]).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// Work requests per QP per pass before other QPs and events get their turn.
pub const BUDGET: usize = 64;
/// Passes an inline engine runs after one event at most (the loop interleaves instead).
const INLINE_PASSES: usize = 1024;
/// With the doorbell page on: how long the loop keeps polling the page after the last
/// activity before it publishes event indices and sleeps (docs/verbs.md §3.1), on hosts
/// with enough CPUs to spare one for polling (docs/architecture.md).
pub const POLL_WINDOW: Duration = Duration::from_micros(200);

/// An engine an event loop owns, as the register side reaches it: through its mailbox,
/// each synchronous call waiting at most `timeout` for the engine to take it
/// ([`call`]). A call the engine did not take in time is abandoned and never runs; the
/// device is then unresponsive (docs/programming.md R-CMD-6): the function's DMA gate is
/// quarantined (no DMA of the function reaches memory, STATUS_FATAL) until a device reset
/// the engine confirms, and the engine forgets every object the moment it runs again.
pub struct Remote {
    mailbox: Arc<Mailbox<Event>>,
    timeout: Duration,
    gate: Option<Arc<DmaGate>>,
    stats: Arc<crate::contract::counters::Stats>,
}

impl Remote {
    /// Posts the event `make` builds around a reply and waits for the engine's answer.
    /// Err: abandoned (the device is quarantined) or dropped unanswered.
    fn call<T>(&self, what: &str, make: impl FnOnce(Reply<T>) -> Event) -> Result<T, Outcome<T>> {
        let (reply, waiter) = call::channel();
        self.mailbox.post(make(reply));
        match waiter.wait(self.timeout, what) {
            Outcome::Done(v) => Ok(v),
            Outcome::Gone => {
                log::error!("the verbs engine dropped {what} unanswered (its event loop stopped)");
                Err(Outcome::Gone)
            }
            Outcome::Abandoned => {
                self.stats.inc(Counter::EngineTimeouts);
                log::error!(
                    "the verbs engine did not take {what} within {:?}: abandoned, it never runs; the device is FATAL and does no DMA until a reset",
                    self.timeout
                );
                if let Some(g) = &self.gate {
                    if !g.quarantine() {
                        log::error!("DMA under way did not end within {:?} of the quarantine", crate::platform::mem::gate::GATE_WAIT);
                    }
                }
                Err(Outcome::Abandoned)
            }
        }
    }

    /// Runs a command on the engine and waits for its status: CMD_ERR_TIMEOUT when it was
    /// abandoned, CMD_ERR_DISABLED when the engine is gone.
    pub fn command(&self, op: u32, index: u32, tables: Tables) -> u32 {
        match self.call("a command", |reply| Event::Command { op, index, tables, reply }) {
            Ok(status) => status,
            Err(Outcome::Abandoned) => CMD_ERR_TIMEOUT,
            Err(_) => CMD_ERR_DISABLED,
        }
    }

    /// Resets the engine and waits until it has forgotten every object. False: it did not
    /// confirm (abandoned: the device stays quarantined, FATAL).
    pub fn reset(&self) -> bool {
        self.call("a reset", |reply| Event::Reset { reply }).is_ok()
    }

    /// Makes the engine fatal (fault injection) and waits until it is.
    pub fn inject_fatal(&self) -> bool {
        self.call("an injected fatal error", |reply| Event::InjectFatal { reply }).is_ok()
    }

    /// Applies a DMA_CTRL write and waits until the engine has.
    pub fn dma_ctrl(&self, enabled: bool, int_enabled: bool, db_page: bool) -> bool {
        self.call("a DMA_CTRL write", |reply| Event::DmaCtrl { enabled, int_enabled, db_page, reply }).is_ok()
    }

    /// Applies an `ETH_CTRL` write and waits until the rings have.
    pub fn eth_ctrl(&self, ctrl: u64, tx: RingCfg, rx: RingCfg) -> bool {
        self.call("an ETH_CTRL write", |reply| Event::EthCtrl { ctrl, tx, rx, reply }).is_ok()
    }
}

/// Environment variable that turns on the engine's test hooks ([`CMD_TEST_PANIC`]); off
/// unless set to `1`. Only tests set it: with it, a guest can make the engine fail.
pub const TEST_HOOKS_ENV: &str = "RNIC_EMU_TEST_HOOKS";
/// Test hook command (only with [`TEST_HOOKS_ENV`]): index 0 panics inside the command,
/// index 2 in the next [`EngineRunner::prepare_sleep`], index 3 stalls the next pass for
/// [`TEST_STALL`] (an engine that takes no call meanwhile), any other index panics at the
/// start of the next pass. Not part of the register contract.
#[doc(hidden)]
pub const CMD_TEST_PANIC: u32 = 0xfe;
/// How long the stall of [`CMD_TEST_PANIC`] index 3 holds the engine: well past
/// [`COMMAND_TIMEOUT`].
#[doc(hidden)]
pub const TEST_STALL: Duration = Duration::from_secs(20);

/// An engine with what drives it besides events: the doorbell page, once the driver has
/// turned it on; and the Ethernet port's rings (`crate::rnic::eth`), which share the
/// engine's passes, DMA_CTRL, reset and failure containment.
///
/// Failure containment (docs/verbs.md §5.1): every operation the engine is handed (an
/// event, a pass, a packet, the publication of event indices before the loop sleeps) runs
/// under `catch_unwind`; the event loop contains its fabric port's work the same way
/// ([`EngineRunner::fail`]). A panic makes the device fatal:
/// STATUS_FATAL, ASYNC_ERR_FATAL in RNIC_REG_LAST_ERROR with the async vector, error
/// completions for what was queued ([`Engine::fail_all`]), one log line; until a device
/// reset, commands answer CMD_ERR_FATAL and doorbells, passes and packets are dropped.
/// Other engines of the node (the event loop's) keep running.
pub struct EngineRunner {
    pub engine: Engine,
    /// The Ethernet port's rings; its frames go out through the engine's wire.
    pub eth: EthPort,
    page: Option<DoorbellPage>,
    db_on: bool,
    /// The engine panicked; nothing runs on it until a reset.
    fatal: bool,
    /// [`TEST_HOOKS_ENV`] was set when the runner was made.
    hooks: bool,
    /// Test hook: panic at the start of the next pass.
    panic_next_pass: bool,
    /// Test hook: panic in the next [`EngineRunner::prepare_sleep`].
    panic_next_sleep: bool,
    /// The next pass sleeps [`TEST_STALL`] first (test hook).
    stall_next_pass: bool,
    /// The function's DMA gate ([`Remote`]): quarantined, the engine stops at once.
    gate: Option<Arc<DmaGate>>,
}

impl EngineRunner {
    pub fn new(engine: Engine, page: Option<DoorbellPage>) -> EngineRunner {
        let hooks = std::env::var(TEST_HOOKS_ENV).is_ok_and(|v| v == "1");
        let shared = &engine.shared;
        let eth = EthPort::new(engine.name.clone(), std::sync::Arc::default(), shared.irqs.clone(), shared.stats.clone());
        let mut engine = engine;
        engine.port = Some(eth.shared().clone());
        EngineRunner {
            engine,
            eth,
            page,
            db_on: false,
            fatal: false,
            hooks,
            panic_next_pass: false,
            panic_next_sleep: false,
            stall_next_pass: false,
            gate: None,
        }
    }

    /// The function's DMA gate: a call abandoned by its waiter quarantines it, and the
    /// engine then stops (see [`EngineRunner::stop_quarantined`]).
    pub fn set_gate(&mut self, gate: Arc<DmaGate>) {
        self.gate = Some(gate);
    }

    /// Turns the test hooks on or off (unit tests, which share one environment).
    #[doc(hidden)]
    pub fn set_test_hooks(&mut self, on: bool) {
        self.hooks = on;
    }

    /// The Ethernet port's shared state (the register model and the fabric port hold it).
    pub fn eth_shared(&self) -> &std::sync::Arc<EthShared> {
        self.eth.shared()
    }

    /// Whether the engine failed and waits for a reset.
    pub fn is_fatal(&self) -> bool {
        self.fatal
    }

    /// Whether the driver uses the doorbell page (the loop then polls it for a while).
    pub fn page_on(&self) -> bool {
        self.db_on && self.page.is_some() && !self.fatal
    }

    /// Runs `f` unless the engine is fatal; a panic in it makes the engine fatal. None:
    /// `f` did not run or did not finish.
    fn guarded<R>(&mut self, mem: &dyn GuestMem, what: &str, f: impl FnOnce(&mut EngineRunner) -> R) -> Option<R> {
        if !self.fatal && self.gate.as_ref().is_some_and(|g| g.quarantined()) {
            self.stop_quarantined();
        }
        if self.fatal {
            return None;
        }
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut *self))) {
            Ok(r) => Some(r),
            Err(payload) => {
                self.fail(mem, what, &*payload);
                None
            }
        }
    }

    /// The engine, or work done for it (the event loop's fabric port), panicked in `what`:
    /// latch the fatal error, fail what was queued, log once. Nothing more while fatal.
    pub fn fail(&mut self, mem: &dyn GuestMem, what: &str, payload: &(dyn std::any::Any + Send)) {
        if self.fatal {
            return;
        }
        self.fatal = true;
        let shared = self.engine.shared.clone();
        shared.fatal.store(true, Ordering::SeqCst);
        let msg = payload.downcast_ref::<&str>().copied().or_else(|| payload.downcast_ref::<String>().map(String::as_str)).unwrap_or("?");
        crate::guest_warn!("{}: the verbs engine failed in {what} ({msg}): device fatal until reset", self.engine.name);
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.engine.fail_all(mem))).is_err() {
            crate::guest_warn!("{}: failing the queued work after the engine's failure failed too", self.engine.name);
        }
        shared.last_error.store(u64::from(ASYNC_ERR_FATAL) << 24, Ordering::SeqCst);
        self.engine.cqs.raise_async();
    }

    /// A call was abandoned while the engine was held up (the gate is quarantined): the
    /// driver may already have freed what any object referenced, so the engine forgets
    /// every object without a DMA (no completions, no write-backs) and stays fatal until
    /// a reset it takes.
    fn stop_quarantined(&mut self) {
        self.fatal = true;
        self.engine.shared.fatal.store(true, Ordering::SeqCst);
        (self.panic_next_pass, self.panic_next_sleep, self.stall_next_pass) = (false, false, false);
        self.eth.reset();
        self.engine.reset();
        self.db_on = false;
        log::error!("{}: the verbs engine resumes after a call was abandoned: every object dropped, fatal until reset", self.engine.name);
    }

    /// An event whose waiter gave up before the engine reached it: it does not run.
    fn abandoned(&self, what: &str) {
        log::warn!("{}: {what} reached the verbs engine after its waiter gave up: not run", self.engine.name);
    }

    /// Applies one event to the engine. A command, RESET, DMA_CTRL or ETH_CTRL runs only
    /// when the engine claims it from its waiter ([`super::call`]).
    pub fn handle(&mut self, mem: &dyn GuestMem, ev: Event) {
        let claimed = match &ev {
            Event::Command { reply, .. } => reply.claim(),
            Event::DmaCtrl { reply, .. } | Event::EthCtrl { reply, .. } | Event::Reset { reply } | Event::InjectFatal { reply } => reply.claim(),
            _ => true,
        };
        if !claimed {
            self.abandoned(if matches!(ev, Event::Command { .. }) { "a command" } else { "a register write" });
            return;
        }
        match ev {
            Event::Command { op, index, tables, reply } => {
                let status = self.guarded(mem, "a command", |d| d.command(mem, op, index, tables));
                reply.send(status.unwrap_or(CMD_ERR_FATAL));
            }
            Event::DmaCtrl { enabled, int_enabled, db_page, reply } => {
                self.guarded(mem, "DMA_CTRL", |d| d.dma_ctrl(enabled, int_enabled, db_page));
                reply.send(());
            }
            Event::EthCtrl { ctrl, tx, rx, reply } => {
                self.guarded(mem, "ETH_CTRL", |d| d.eth.ctrl(ctrl, tx, rx));
                reply.send(());
            }
            Event::Reset { reply } => {
                if let Some(g) = &self.gate {
                    g.release();
                }
                self.fatal = false;
                (self.panic_next_pass, self.panic_next_sleep, self.stall_next_pass) = (false, false, false);
                self.engine.shared.fatal.store(false, Ordering::SeqCst);
                self.guarded(mem, "a reset", |d| {
                    d.eth.reset();
                    d.engine.reset();
                    d.db_on = false;
                });
                reply.send(());
            }
            Event::InjectFatal { reply } => {
                if !self.fatal {
                    self.fail(mem, "an injected fault", &"fault injection");
                }
                reply.send(());
            }
            ev => {
                self.guarded(mem, "a doorbell", |d| d.doorbell(ev));
            }
        }
    }

    fn doorbell(&mut self, ev: Event) {
        let engine = &mut self.engine;
        match ev {
            Event::SqDoorbell { qpn, pi } => engine.sq_doorbell(qpn, pi),
            Event::RqDoorbell { qpn, pi } => engine.rq_doorbell(qpn, pi),
            Event::CqConsumed { cqn, ci } => engine.cq_consumed(cqn, ci),
            Event::EqConsumed { ci } => engine.eq_consumed(ci),
            Event::CqArm { cqn } => {
                if let Some(p) = self.page.as_ref().filter(|_| self.db_on) {
                    engine.poll_doorbell_page(p); // the consumer index the driver left there
                }
                engine.cq_arm(cqn)
            }
            Event::EthTxDoorbell { pi } => self.eth.tx_doorbell(pi),
            Event::EthRxDoorbell { pi } => self.eth.rx_doorbell(pi),
            Event::EthArm { tx_ci, rx_ci, vector } => self.eth.arm(tx_ci, rx_ci, vector),
            Event::DmaCtrl { .. } | Event::EthCtrl { .. } | Event::Command { .. } | Event::Reset { .. } | Event::InjectFatal { .. } => {}
        }
    }

    fn dma_ctrl(&mut self, enabled: bool, int_enabled: bool, db_page: bool) {
        self.engine.set_dma_ctrl(enabled, int_enabled);
        self.eth.set_dma_ctrl(enabled, int_enabled);
        let on = db_page && self.page.is_some();
        if let (Some(p), true, false) = (&self.page, on, self.db_on) {
            self.engine.init_doorbell_page(p);
        }
        self.db_on = on;
    }

    fn command(&mut self, mem: &dyn GuestMem, op: u32, index: u32, tables: Tables) -> u32 {
        if self.hooks && op == CMD_TEST_PANIC {
            match index {
                0 => panic!("test hook: panic in a command"),
                2 => self.panic_next_sleep = true,
                3 => self.stall_next_pass = true,
                _ => self.panic_next_pass = true,
            }
            return CMD_OK;
        }
        let status = self.engine.command(mem, op, index, tables);
        if let Some(p) = &self.page {
            self.engine.sync_doorbell_page(p, op, index);
        }
        status
    }

    /// A packet from the fabric (dropped while the engine is fatal).
    pub fn on_packet(&mut self, mem: &dyn GuestMem, from: std::net::IpAddr, pkt: &Packet) {
        self.guarded(mem, "a packet", |d| d.engine.on_packet(mem, from, pkt));
    }

    /// A frame for the netdev from the fabric port (already filtered): into the receive
    /// ring (`crate::rnic::eth::EthPort::receive`); dropped while the engine is fatal.
    pub fn on_frame(&mut self, mem: &dyn GuestMem, frame: &[u8]) {
        self.guarded(mem, "a frame", |d| d.eth.receive(mem, frame));
    }

    /// One pass of work: indices from the page (when on), then the engine's budget, then
    /// up to [`TX_BUDGET`] frames of the Ethernet transmit ring. True when anything moved.
    pub fn pass(&mut self, mem: &dyn GuestMem) -> bool {
        self.guarded(mem, "a pass", |d| {
            if std::mem::take(&mut d.panic_next_pass) {
                panic!("test hook: panic in a pass");
            }
            if std::mem::take(&mut d.stall_next_pass) {
                log::warn!("test hook: the engine stalls for {TEST_STALL:?}");
                std::thread::sleep(TEST_STALL);
            }
            let polled = match d.page.as_ref().filter(|_| d.db_on) {
                Some(p) => d.engine.poll_doorbell_page(p),
                None => false,
            };
            let ran = d.engine.run(mem, BUDGET);
            let sent = d.eth.transmit(mem, d.engine.wire.as_deref(), TX_BUDGET);
            ran || sent || polled
        })
        .unwrap_or(false)
    }

    /// When the engine wants a pass (None while fatal).
    pub fn next_deadline(&self) -> Option<std::time::Instant> {
        if self.fatal {
            return None;
        }
        self.engine.next_deadline()
    }

    /// Before the loop sleeps: publishes the page's event indices. False when the page
    /// moved meanwhile (the loop must not sleep).
    /// True (sleep) while fatal or when it failed.
    pub fn prepare_sleep(&mut self, mem: &dyn GuestMem) -> bool {
        self.guarded(mem, "going to sleep", |d| {
            if std::mem::take(&mut d.panic_next_sleep) {
                panic!("test hook: panic before sleeping");
            }
            match d.page.as_ref().filter(|_| d.db_on) {
                Some(p) => !d.engine.publish_doorbell_events(p),
                None => true,
            }
        })
        .unwrap_or(true)
    }
}

/// Where an RNIC's engine runs.
pub enum EngineSlot {
    /// Not attached to an event loop: events run on the caller's thread.
    Inline(Box<EngineRunner>),
    /// Owned by the node's event loop; events go through the mailbox.
    Loop(Remote),
}

impl EngineSlot {
    pub fn post(&mut self, router: &Router, ev: Event) {
        match self {
            EngineSlot::Inline(d) => {
                let view = router.view();
                d.handle(&view, ev);
                for _ in 0..INLINE_PASSES {
                    if !d.pass(&view) {
                        break;
                    }
                }
            }
            EngineSlot::Loop(Remote { mailbox: m, .. }) => {
                // A consumer index only matters to the next CQE the engine writes, and
                // every pass drains the mailbox first: no need to wake the loop for it.
                let wake = !matches!(ev, Event::CqConsumed { .. });
                m.post_with(ev, wake);
            }
        }
    }

    pub fn command(&mut self, router: &Router, op: u32, index: u32, tables: Tables) -> u32 {
        match self {
            EngineSlot::Inline(d) => {
                let (reply, rx) = call::channel();
                d.handle(&router.view(), Event::Command { op, index, tables, reply });
                rx.try_recv().unwrap_or(CMD_ERR_DISABLED)
            }
            EngineSlot::Loop(m) => m.command(op, index, tables),
        }
    }

    /// Applies a DMA_CTRL write; returns once the engine has (false: abandoned, see
    /// [`Remote`]).
    pub fn dma_ctrl(&mut self, router: &Router, enabled: bool, int_enabled: bool, db_page: bool) -> bool {
        match self {
            EngineSlot::Inline(d) => {
                let (reply, _rx) = call::channel();
                d.handle(&router.view(), Event::DmaCtrl { enabled, int_enabled, db_page, reply });
                true
            }
            EngineSlot::Loop(m) => m.dma_ctrl(enabled, int_enabled, db_page),
        }
    }

    /// Applies an `ETH_CTRL` write; returns once the rings have (false: abandoned).
    pub fn eth_ctrl(&mut self, router: &Router, ctrl: u64, tx: RingCfg, rx: RingCfg) -> bool {
        match self {
            EngineSlot::Inline(d) => {
                let (reply, _rx) = call::channel();
                d.handle(&router.view(), Event::EthCtrl { ctrl, tx, rx, reply });
                true
            }
            EngineSlot::Loop(m) => m.eth_ctrl(ctrl, tx, rx),
        }
    }

    /// Makes the engine fatal (fault injection); returns once it is.
    pub fn inject_fatal(&mut self, router: &Router) {
        match self {
            EngineSlot::Inline(d) => d.handle(&router.view(), Event::InjectFatal { reply: call::channel().0 }),
            EngineSlot::Loop(m) => {
                m.inject_fatal();
            }
        }
    }

    /// Resets the engine; false: it did not confirm (abandoned, see [`Remote`]).
    pub fn reset(&mut self, router: &Router) -> bool {
        match self {
            EngineSlot::Inline(d) => {
                d.handle(&router.view(), Event::Reset { reply: call::channel().0 });
                true
            }
            EngineSlot::Loop(m) => m.reset(),
        }
    }

    /// How long calls wait for an engine run by a loop ([`COMMAND_TIMEOUT`] unless
    /// changed; tests shorten it). False: the engine runs inline (calls never wait).
    #[doc(hidden)]
    pub fn set_call_timeout(&mut self, timeout: Duration) -> bool {
        match self {
            EngineSlot::Inline(_) => false,
            EngineSlot::Loop(m) => {
                m.timeout = timeout;
                true
            }
        }
    }

    /// Hands the engine to an event loop; later events go to `mailbox`. None: already
    /// attached.
    pub fn attach(&mut self, mailbox: Arc<Mailbox<Event>>) -> Option<EngineRunner> {
        let EngineSlot::Inline(d) = self else { return None };
        let remote = Remote { mailbox, timeout: COMMAND_TIMEOUT, gate: d.gate.clone(), stats: d.engine.shared.stats.clone() };
        match std::mem::replace(self, EngineSlot::Loop(remote)) {
            EngineSlot::Inline(d) => Some(*d),
            EngineSlot::Loop(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    fn arm() -> Event {
        Event::CqArm { cqn: 1 }
    }

    #[test]
    fn posts_kick_only_a_sleeping_loop() {
        let m = Mailbox::new().unwrap();
        let mut out = VecDeque::new();
        m.post(arm());
        assert!(m.kick_fd().read().is_err(), "awake loop: no kick (EAGAIN)");
        assert!(!m.prepare_sleep(), "an event is queued: do not sleep");
        m.drain(&mut out);
        assert_eq!(out.len(), 1);
        assert!(m.prepare_sleep());
        m.post(arm());
        m.post(arm());
        assert_eq!(m.kick_fd().read().unwrap(), 1, "one kick for the first post after prepare_sleep");
        m.drain(&mut out);
        assert_eq!(out.len(), 3);
        assert!(m.prepare_sleep());
        m.post_with(Event::CqConsumed { cqn: 1, ci: 1 }, false);
        assert!(m.kick_fd().read().is_err(), "a quiet post leaves the loop asleep");
        m.post(arm());
        assert_eq!(m.kick_fd().read().unwrap(), 1, "the next loud post wakes it");
        out.clear();
        m.drain(&mut out);
        assert!(matches!((&out[0], &out[1]), (Event::CqConsumed { .. }, Event::CqArm { .. })), "in posting order");
    }
}
