//! The engine thread (STYLE §3: work off the MMIO path). The socket thread only records
//! doorbells and forwards them here as events; commands wait for the engine's answer, so a
//! register read after RNIC_REG_CMD sees its status. Memory is reached through the DMA
//! router, whose view holds the DMA maps' read lock per pass, never across waiting.

use super::copy::GuestMem;
use super::engine::{Engine, Shared, Tables};
use crate::doorbell::DoorbellPage;
use crate::router::Router;
use std::sync::mpsc::TryRecvError;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub enum Event {
    SqDoorbell { qpn: u32, pi: u16 },
    RqDoorbell { qpn: u32, pi: u16 },
    CqConsumed { cqn: u32, ci: u16 },
    CqArm { cqn: u32 },
    /// Synchronous, like commands: turning the doorbell page on copies the device's
    /// indices into it before the register write completes.
    DmaCtrl { enabled: bool, int_enabled: bool, db_page: bool, reply: SyncSender<()> },
    Command { op: u32, index: u32, tables: Tables, reply: SyncSender<u32> },
    Reset { reply: SyncSender<()> },
    /// A checked packet from the fabric.
    Packet { from: std::net::Ipv4Addr, pkt: crate::fabric::packet::Packet },
}

/// How long a command may take before the register reports the engine as unresponsive.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// Work requests per QP per pass before other QPs and events get their turn.
const BUDGET: usize = 64;
/// With the doorbell page on: how long the engine keeps polling the page after the last
/// activity before it publishes event indices and sleeps (docs/verbs.md §3.1).
const POLL_WINDOW: Duration = Duration::from_micros(200);

pub struct EngineHandle {
    tx: Sender<Event>,
}

impl Clone for EngineHandle {
    fn clone(&self) -> Self {
        EngineHandle { tx: self.tx.clone() }
    }
}

impl EngineHandle {
    pub fn spawn(
        name: String,
        router: Arc<Router>,
        shared: Shared,
        wire: Option<Arc<dyn super::rc::Wire>>,
        page: Option<DoorbellPage>,
    ) -> std::io::Result<EngineHandle> {
        let (tx, rx) = mpsc::channel();
        let mut engine = Engine::new(name.clone(), shared);
        if let Some(w) = wire {
            engine.set_wire(w);
        }
        std::thread::Builder::new().name(format!("{name}-engine")).spawn(move || run(engine, &router, &rx, page.as_ref()))?;
        Ok(EngineHandle { tx })
    }

    pub fn send(&self, ev: Event) {
        if self.tx.send(ev).is_err() {
            log::error!("verbs engine thread is gone; event dropped");
        }
    }

    /// Runs a command on the engine and waits for its status.
    pub fn command(&self, op: u32, index: u32, tables: Tables) -> u32 {
        let (reply, rx) = mpsc::sync_channel(1);
        self.send(Event::Command { op, index, tables, reply });
        rx.recv_timeout(COMMAND_TIMEOUT).unwrap_or(super::abi::CMD_ERR_DISABLED)
    }

    /// Applies a DMA_CTRL write and waits until the engine has.
    pub fn dma_ctrl(&self, enabled: bool, int_enabled: bool, db_page: bool) {
        let (reply, rx) = mpsc::sync_channel(1);
        self.send(Event::DmaCtrl { enabled, int_enabled, db_page, reply });
        let _ = rx.recv_timeout(COMMAND_TIMEOUT);
    }

    /// Resets the engine and waits until it has forgotten every object.
    pub fn reset(&self) {
        let (reply, rx) = mpsc::sync_channel(1);
        self.send(Event::Reset { reply });
        let _ = rx.recv_timeout(COMMAND_TIMEOUT);
    }
}

/// The engine's state around it: whether the doorbell page is in use.
struct Loop<'a> {
    page: Option<&'a DoorbellPage>,
    db_on: bool,
}

impl Loop<'_> {
    fn page(&self) -> Option<&DoorbellPage> {
        self.page.filter(|_| self.db_on)
    }

    fn handle(&mut self, engine: &mut Engine, mem: &dyn GuestMem, ev: Event) {
        match ev {
            Event::SqDoorbell { qpn, pi } => engine.sq_doorbell(qpn, pi),
            Event::RqDoorbell { qpn, pi } => engine.rq_doorbell(qpn, pi),
            Event::CqConsumed { cqn, ci } => engine.cq_consumed(cqn, ci),
            Event::CqArm { cqn } => {
                if let Some(p) = self.page() {
                    engine.poll_doorbell_page(p); // the consumer index the driver left there
                }
                engine.cq_arm(cqn)
            }
            Event::DmaCtrl { enabled, int_enabled, db_page, reply } => {
                engine.set_dma_ctrl(enabled, int_enabled);
                let on = db_page && self.page.is_some();
                if let (Some(p), true, false) = (self.page, on, self.db_on) {
                    engine.init_doorbell_page(p);
                }
                self.db_on = on;
                let _ = reply.send(());
            }
            Event::Command { op, index, tables, reply } => {
                let status = engine.command(mem, op, index, tables);
                if let Some(p) = self.page {
                    engine.sync_doorbell_page(p, op, index);
                }
                let _ = reply.send(status);
            }
            Event::Packet { from, pkt } => engine.on_packet(mem, from, &pkt),
            Event::Reset { reply } => {
                engine.reset();
                self.db_on = false;
                let _ = reply.send(());
            }
        }
    }

    /// Waits for the next event. With the doorbell page on, polls (the page, the queue)
    /// within the window after the last activity; then publishes event indices and
    /// sleeps unless the page moved meanwhile. None: a timer or the page is due.
    fn wait(&mut self, engine: &mut Engine, rx: &Receiver<Event>, last_activity: Instant) -> Result<Option<Event>, ()> {
        if let Some(page) = self.page() {
            if last_activity.elapsed() < POLL_WINDOW {
                return match rx.try_recv() {
                    Ok(ev) => Ok(Some(ev)),
                    Err(TryRecvError::Empty) => {
                        std::thread::yield_now();
                        Ok(None)
                    }
                    Err(TryRecvError::Disconnected) => Err(()),
                };
            }
            if engine.publish_doorbell_events(page) {
                return Ok(None);
            }
        }
        match engine.next_deadline() {
            Some(d) => match rx.recv_timeout(d.saturating_duration_since(Instant::now())) {
                Ok(ev) => Ok(Some(ev)),
                Err(RecvTimeoutError::Timeout) => Ok(None),
                Err(RecvTimeoutError::Disconnected) => Err(()),
            },
            None => rx.recv().map(Some).map_err(|_| ()),
        }
    }
}

fn run(mut engine: Engine, router: &Router, rx: &Receiver<Event>, page: Option<&DoorbellPage>) {
    let mut state = Loop { page, db_on: false };
    let mut last_activity = Instant::now();
    loop {
        let Ok(mut pending) = state.wait(&mut engine, rx, last_activity) else { return };
        loop {
            let view = router.view();
            let mut busy = false;
            if let Some(ev) = pending.take() {
                state.handle(&mut engine, &view, ev);
                busy = true;
            }
            while let Ok(ev) = rx.try_recv() {
                state.handle(&mut engine, &view, ev);
                busy = true;
            }
            let polled = state.page().is_some_and(|p| engine.poll_doorbell_page(p));
            let progress = engine.run(&view, BUDGET);
            drop(view);
            if busy || polled || progress {
                last_activity = Instant::now();
            }
            if !progress && !polled {
                break;
            }
        }
    }
}
