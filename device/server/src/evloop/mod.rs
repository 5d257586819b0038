//! A node's event loop: one thread per node server that owns every verbs engine of the
//! node and drives its fabric port. Built on rust-vmm's `event-manager` (epoll) with
//! `vmm-sys-util` `EventFd`s and a `TimerFd`. What wakes it:
//! - a doorbell, command or register event posted by a vfio-user socket thread (each
//!   engine's [`Mailbox`] kicks its `EventFd` when the loop sleeps);
//! - a fabric segment socket (or TAP device) becoming readable (datagrams, or frames, are
//!   then taken in batches);
//! - the `TimerFd`, armed to the earliest engine deadline (retransmission, RNR wait) or
//!   fabric port deadline (a frame the wire's `delay_us` fault holds);
//! - a GPU copy-engine launch (the GPU's mailbox kicks the same way); a launch runs in
//!   steps of `gpu::engine::STEP` bytes per pass and completes with its interrupt here;
//! - the stop `EventFd` ([`LoopHandle`] dropped).
//!
//! Every pass drains the mailboxes, receives what the sockets hold, runs each engine for a
//! budget, and flushes the queued datagrams (`sendmmsg`). After the last pass that did
//! anything, the loop keeps polling without sleeping for a bounded window (busy polling:
//! a doorbell or packet right after a completion is picked up without an epoll round
//! trip or a kick), then sleeps in epoll; before it sleeps it publishes the doorbell page's
//! event indices, so a driver rings the MMIO doorbell for its next post. The window is
//! `RNIC_EMU_BUSY_POLL_US` microseconds from the environment (0: never poll); by default
//! [`DEFAULT_BUSY_POLL`] (with the doorbell page on: [`POLL_WINDOW`], during which
//! the page's indices are taken without a doorbell) on hosts with at least
//! [`BUSY_POLL_MIN_CPUS`] CPUs, and none on smaller ones, where a polling loop takes the
//! CPU that the peer node, the guest's vCPUs or the application need
//! (`cargo bench --bench fabric` on 2 CPUs: polling 50 us cut WRITE bandwidth to a quarter
//! and raised the 64-byte P99 latency from about 0.1 ms to 8 ms; `cargo bench --bench
//! softroce` on 2 CPUs: polling the doorbell page for 200 us after each message made
//! perftest's `ib_write_lat` between two busy-polling guests take 2 ms instead of 40-60
//! us, because the polling loops and the two spinning vCPUs shared two CPUs:
//! docs/ibverbs.md).
//!
//! Not here: the vfio-user socket threads (rust-vmm's server blocks on its socket), the
//! control socket (its requests lock functions; the loop never does, so a socket thread
//! holding a function lock while it waits for a command's reply cannot deadlock with it).

mod wakeups;

use crate::fabric::batch::BATCH;
use crate::fabric::port::{FabricPort, Rx};
use event_manager::{EventManager, SubscriberOps};
use rnic_emu_core::gpu;
use rnic_emu_core::gpu::engine::{Launch, Runner};
use rnic_emu_core::mailbox::Mailbox;
use rnic_emu_core::platform::mem::router::Router;
use rnic_emu_core::rnic::verbs::runner::{EngineRunner, Event, POLL_WINDOW};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
use wakeups::Wakeups;

/// How long the loop keeps polling after its last activity before it sleeps in epoll.
pub const DEFAULT_BUSY_POLL: Duration = Duration::from_micros(50);
/// Environment variable overriding [`DEFAULT_BUSY_POLL`], in microseconds.
pub const BUSY_POLL_ENV: &str = "RNIC_EMU_BUSY_POLL_US";
/// Receive batches per port per pass before the engines get their turn.
const RX_BATCHES: usize = 4;
/// Shortest timer arming (a deadline already passed without progress must not spin).
const MIN_TIMER: Duration = Duration::from_micros(10);

/// Hosts with fewer CPUs than this do not busy-poll unless told to.
pub const BUSY_POLL_MIN_CPUS: usize = 8;

/// The default window on a host with `cpus` CPUs.
pub fn default_busy_poll(cpus: usize) -> Duration {
    if cpus >= BUSY_POLL_MIN_CPUS {
        DEFAULT_BUSY_POLL
    } else {
        Duration::ZERO
    }
}

/// The default window for the doorbell page on a host with `cpus` CPUs: the same rule
/// (polling only when a loop tried it on a busier host was no better: docs/ibverbs.md).
pub fn default_page_poll(cpus: usize) -> Duration {
    if cpus >= BUSY_POLL_MIN_CPUS {
        POLL_WINDOW
    } else {
        Duration::ZERO
    }
}

fn host_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The busy-poll window: `RNIC_EMU_BUSY_POLL_US` if set and valid (at most one second),
/// else the default for this host.
pub fn busy_poll_from_env() -> Duration {
    let default = default_busy_poll(host_cpus());
    match std::env::var(BUSY_POLL_ENV) {
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(us) => Duration::from_micros(us.min(1_000_000)),
            Err(_) => {
                log::warn!("{BUSY_POLL_ENV}={v:?} is not a number of microseconds; using {default:?}");
                default
            }
        },
        Err(_) => default,
    }
}

/// What the loop drives: one pass of work, the next deadline, and the sleep handshake.
pub trait LoopWork {
    /// Does whatever is pending; true when anything was done.
    fn pass(&mut self) -> bool;
    /// When the work wants a pass even if nothing wakes the loop.
    fn next_deadline(&self) -> Option<Instant>;
    /// About to sleep: false when work arrived meanwhile (see [`Mailbox::prepare_sleep`]).
    fn prepare_sleep(&mut self) -> bool;
    /// A polling window the work itself needs after activity (the doorbell page's).
    fn poll_window(&self) -> Duration {
        Duration::ZERO
    }
    /// `EventFd`s that wake the loop when work is posted.
    fn kick_fds(&self) -> Vec<&EventFd>;
    /// Sockets whose readability means work.
    fn socket_fds(&self) -> Vec<std::os::fd::RawFd>;
}

/// Fabric port work for an engine (receive, flush): a panic in it makes that engine fatal
/// as a panic in the engine itself does (docs/verbs.md §5.1); None then.
fn port_guarded<R>(runner: &mut EngineRunner, router: &Router, what: &str, f: impl FnOnce(&mut EngineRunner) -> R) -> Option<R> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut *runner))) {
        Ok(r) => Some(r),
        Err(payload) => {
            runner.fail(&router.view(), what, &*payload);
            None
        }
    }
}

/// One RNIC's engine as the loop owns it.
pub struct NodeEngine {
    pub runner: EngineRunner,
    pub router: Arc<Router>,
    pub mailbox: Arc<Mailbox<Event>>,
    /// The fabric port the engine's wire sends through (None: loopback only).
    pub port: Option<Arc<FabricPort>>,
}

/// One GPU's copy engine as the loop owns it.
pub struct NodeGpu {
    pub runner: Runner,
    pub mailbox: Arc<Mailbox<Launch>>,
}

/// Every engine of a node.
pub struct NodeEngines {
    engines: Vec<NodeEngine>,
    gpus: Vec<NodeGpu>,
    events: VecDeque<Event>,
    launches: VecDeque<Launch>,
    /// The polling window while an engine uses the doorbell page ([`default_page_poll`]).
    page_poll: Duration,
}

impl NodeEngines {
    pub fn new(engines: Vec<NodeEngine>, gpus: Vec<NodeGpu>) -> Self {
        let page_poll = default_page_poll(host_cpus());
        NodeEngines { engines, gpus, events: VecDeque::new(), launches: VecDeque::new(), page_poll }
    }
}

impl LoopWork for NodeEngines {
    fn pass(&mut self) -> bool {
        let mut active = false;
        for NodeEngine { runner, router, mailbox, port } in &mut self.engines {
            mailbox.drain(&mut self.events);
            active |= !self.events.is_empty();
            let view = router.view();
            for ev in self.events.drain(..) {
                runner.handle(&view, ev);
            }
            if let Some(port) = port {
                for _ in 0..RX_BATCHES {
                    let n = port_guarded(runner, router, "the fabric port's receive", |d| {
                        port.receive(&mut |rx| match rx {
                            Rx::Roce(from, pkt) => d.on_packet(&view, from, pkt),
                            Rx::Frame(frame) => d.on_frame(&view, frame),
                        })
                    });
                    active |= n.unwrap_or(0) > 0;
                    if n.is_none_or(|n| n < BATCH) {
                        break;
                    }
                }
                port_guarded(runner, router, "the fabric port's flush", |_| port.flush());
            }
            active |= runner.pass(&view);
            drop(view);
            if let Some(port) = port {
                port_guarded(runner, router, "the fabric port's flush", |_| port.flush());
            }
        }
        for NodeGpu { runner, mailbox } in &mut self.gpus {
            mailbox.drain(&mut self.launches);
            active |= !self.launches.is_empty();
            for l in self.launches.drain(..) {
                runner.start(l);
            }
            active |= runner.step(gpu::engine::STEP);
        }
        active
    }

    fn next_deadline(&self) -> Option<Instant> {
        let ports = self.engines.iter().filter_map(|e| e.port.as_ref().and_then(|p| p.next_deadline()));
        self.engines.iter().filter_map(|e| e.runner.next_deadline()).chain(ports).min()
    }

    fn prepare_sleep(&mut self) -> bool {
        // Stopping at a mailbox with work is fine: the loop then does not sleep. The
        // doorbell page's event indices are published last, after the mailbox's flag.
        self.engines.iter_mut().all(|e| e.mailbox.prepare_sleep() && e.runner.prepare_sleep(&e.router.view()))
            && self.gpus.iter().all(|g| g.mailbox.prepare_sleep())
    }

    fn poll_window(&self) -> Duration {
        if self.engines.iter().any(|e| e.runner.page_on()) {
            self.page_poll
        } else {
            Duration::ZERO
        }
    }

    fn kick_fds(&self) -> Vec<&EventFd> {
        self.engines.iter().map(|e| e.mailbox.kick_fd()).chain(self.gpus.iter().map(|g| g.mailbox.kick_fd())).collect()
    }

    fn socket_fds(&self) -> Vec<std::os::fd::RawFd> {
        self.engines.iter().filter_map(|e| e.port.as_ref()).flat_map(|p| p.raw_fds()).collect()
    }
}

/// A running loop; dropping it stops the loop and waits for its thread.
pub struct LoopHandle {
    stop: EventFd,
    stopping: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for LoopHandle {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        let _ = self.stop.write(1);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts the loop on its own thread (`<name>-evloop`).
pub fn spawn<W: LoopWork + Send + 'static>(name: &str, work: W, busy_poll: Duration) -> std::io::Result<LoopHandle> {
    let stop = EventFd::new(EFD_NONBLOCK)?;
    let stop_loop = stop.try_clone()?;
    let stopping = Arc::new(AtomicBool::new(false));
    let flag = stopping.clone();
    let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
    let thread = std::thread::Builder::new().name(format!("{name}-evloop")).spawn(move || match EventLoop::new(work, stop_loop, flag, busy_poll) {
        Ok(mut l) => {
            let _ = ready_tx.send(Ok(()));
            l.run();
        }
        Err(e) => {
            let _ = ready_tx.send(Err(e));
        }
    })?;
    let started = ready_rx.recv().map_err(|_| std::io::Error::other("the event loop thread died while starting"))?;
    let handle = LoopHandle { stop, stopping, thread: Some(thread) };
    started.map(|()| handle)
}

struct EventLoop<W: LoopWork> {
    work: W,
    wake: Rc<RefCell<Wakeups>>,
    epoll: EventManager<Rc<RefCell<Wakeups>>>,
    stopping: Arc<AtomicBool>,
    busy_poll: Duration,
    /// The deadline the timer is armed for.
    armed: Option<Instant>,
}

impl<W: LoopWork> EventLoop<W> {
    fn new(work: W, stop: EventFd, stopping: Arc<AtomicBool>, busy_poll: Duration) -> std::io::Result<Self> {
        let kicks = work.kick_fds().iter().map(|k| k.try_clone()).collect::<std::io::Result<Vec<_>>>()?;
        let wake = Rc::new(RefCell::new(Wakeups::new(kicks, work.socket_fds(), stop)?));
        let mut epoll = EventManager::new().map_err(|e| std::io::Error::other(format!("epoll: {e:?}")))?;
        epoll.add_subscriber(wake.clone());
        if let Some(e) = wake.borrow().init_error.as_ref() {
            return Err(std::io::Error::other(format!("registering the loop's event sources: {e}")));
        }
        Ok(EventLoop { work, wake, epoll, stopping, busy_poll, armed: None })
    }

    fn run(&mut self) {
        let mut last_active = Instant::now();
        while !self.stopping.load(Ordering::Relaxed) {
            if self.work.pass() {
                last_active = Instant::now();
                continue;
            }
            if last_active.elapsed() < self.busy_poll.max(self.work.poll_window()) {
                std::thread::yield_now();
                continue;
            }
            if !self.work.prepare_sleep() {
                continue;
            }
            self.arm_timer();
            if let Err(e) = self.epoll.run() {
                log::error!("event loop: epoll: {e:?}");
                std::thread::sleep(Duration::from_millis(10));
            }
            if std::mem::take(&mut self.wake.borrow_mut().timer_fired) {
                self.armed = None;
            }
            last_active = Instant::now();
        }
    }

    /// Arms the timer for the earliest deadline (unless already armed for it).
    fn arm_timer(&mut self) {
        let Some(deadline) = self.work.next_deadline() else { return };
        if self.armed == Some(deadline) {
            return;
        }
        let wait = deadline.saturating_duration_since(Instant::now()).max(MIN_TIMER);
        match self.wake.borrow_mut().timer.reset(wait, None) {
            Ok(()) => self.armed = Some(deadline),
            Err(e) => log::error!("event loop: arming the timer: {e}"),
        }
    }
}

#[cfg(test)]
mod tests;
