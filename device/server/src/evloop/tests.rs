//! The loop against a fake piece of work: it wakes on a kick, sleeps when idle, fires the
//! timer at the deadline, and busy-polls only within its window.

use super::*;
use std::sync::atomic::AtomicUsize;
use std::sync::Mutex;

#[derive(Clone, Default)]
struct Probe {
    passes: Arc<AtomicUsize>,
    /// When a pass found work (events, or the deadline reached).
    done: Arc<Mutex<Vec<Instant>>>,
    deadline: Arc<Mutex<Option<Instant>>>,
}

struct Fake {
    mailbox: Arc<Mailbox<Event>>,
    probe: Probe,
    events: VecDeque<Event>,
}

impl LoopWork for Fake {
    fn pass(&mut self) -> bool {
        self.probe.passes.fetch_add(1, Ordering::SeqCst);
        self.mailbox.drain(&mut self.events);
        let mut deadline = self.probe.deadline.lock().unwrap();
        let due = deadline.is_some_and(|d| Instant::now() >= d);
        if self.events.is_empty() && !due {
            return false;
        }
        if due {
            *deadline = None;
        }
        self.events.clear();
        self.probe.done.lock().unwrap().push(Instant::now());
        true
    }

    fn next_deadline(&self) -> Option<Instant> {
        *self.probe.deadline.lock().unwrap()
    }

    fn prepare_sleep(&mut self) -> bool {
        self.mailbox.prepare_sleep()
    }

    fn kick_fds(&self) -> Vec<&EventFd> {
        vec![self.mailbox.kick_fd()]
    }

    fn socket_fds(&self) -> Vec<std::os::fd::RawFd> {
        Vec::new()
    }
}

fn start(busy_poll: Duration, deadline: Option<Instant>) -> (LoopHandle, Arc<Mailbox<Event>>, Probe) {
    let mailbox = Arc::new(Mailbox::new().unwrap());
    let probe = Probe::default();
    *probe.deadline.lock().unwrap() = deadline;
    let fake = Fake { mailbox: mailbox.clone(), probe: probe.clone(), events: VecDeque::new() };
    (spawn("test", fake, busy_poll).unwrap(), mailbox, probe)
}

fn wait_done(probe: &Probe, n: usize) -> Vec<Instant> {
    let t = Instant::now();
    while probe.done.lock().unwrap().len() < n && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
    }
    probe.done.lock().unwrap().clone()
}

#[test]
fn wakes_on_a_kick_and_sleeps_when_idle() {
    let (_h, mailbox, probe) = start(Duration::ZERO, None);
    std::thread::sleep(Duration::from_millis(50));
    let before = probe.passes.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(200));
    let idle = probe.passes.load(Ordering::SeqCst) - before;
    assert!(idle <= 1, "asleep in epoll while idle: {idle} passes in 200 ms");
    let posted = Instant::now();
    mailbox.post(Event::CqArm { cqn: 1 });
    let done = wait_done(&probe, 1);
    assert_eq!(done.len(), 1, "the kick woke the loop");
    assert!(done[0] - posted < Duration::from_secs(2));
}

#[test]
fn timer_fires_at_the_engine_deadline() {
    let deadline = Instant::now() + Duration::from_millis(80);
    let (_h, _mailbox, probe) = start(Duration::ZERO, Some(deadline));
    let done = wait_done(&probe, 1);
    assert_eq!(done.len(), 1, "the timer woke the loop");
    assert!(done[0] >= deadline, "not before the deadline");
    assert!(done[0] - deadline < Duration::from_secs(2), "soon after it: {:?}", done[0] - deadline);
    assert!(probe.passes.load(Ordering::SeqCst) < 20, "slept until the deadline instead of spinning");
}

#[test]
fn busy_polls_only_within_the_window() {
    let window = Duration::from_millis(150);
    let (_h, mailbox, probe) = start(window, None);
    // The loop polls for one window after it starts, then sleeps.
    std::thread::sleep(window * 3);
    let asleep = probe.passes.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(200));
    assert!(probe.passes.load(Ordering::SeqCst) - asleep <= 1, "asleep after the window");
    mailbox.post(Event::CqArm { cqn: 1 });
    wait_done(&probe, 1);
    std::thread::sleep(window / 3);
    let polling = probe.passes.load(Ordering::SeqCst) - asleep;
    assert!(polling > 10, "polling inside the window after activity: {polling} passes");
    std::thread::sleep(window * 3);
    let settled = probe.passes.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(200));
    assert!(probe.passes.load(Ordering::SeqCst) - settled <= 1, "asleep again");
}

#[test]
fn busy_poll_default_depends_on_the_host() {
    assert_eq!(default_busy_poll(2), Duration::ZERO, "small hosts sleep right away");
    assert_eq!(default_page_poll(2), Duration::ZERO, "small hosts do not poll the doorbell page either");
    assert_eq!(default_page_poll(BUSY_POLL_MIN_CPUS), POLL_WINDOW);
    assert_eq!(default_busy_poll(BUSY_POLL_MIN_CPUS), DEFAULT_BUSY_POLL);
}

/// A panic in the fabric port's work for an engine (receive, flush) makes that engine
/// fatal as its own panic would (flag, async error, log once), and a reset recovers it.
#[test]
fn a_panic_in_fabric_port_work_makes_the_engine_fatal_until_reset() {
    use rnic_emu_core::contract::abi::ASYNC_ERR_FATAL;
    use rnic_emu_core::contract::counters::Stats;
    use rnic_emu_core::platform::mem::dma::DmaMaps;
    use rnic_emu_core::platform::msix::Interrupts;
    use rnic_emu_core::rnic::verbs::engine::{Engine, Shared};
    let stats = Arc::new(Stats::default());
    let shared = Shared {
        irqs: Arc::new(Interrupts::new(2)),
        stats: stats.clone(),
        last_error: Default::default(),
        fatal: Default::default(),
        clock: Default::default(),
    };
    let mut runner = EngineRunner::new(Engine::new("port".into(), shared.clone()), None);
    let router = Router::new(Arc::new(std::sync::RwLock::new(DmaMaps::default())), Vec::new(), stats);
    assert_eq!(port_guarded(&mut runner, &router, "the fabric port's flush", |_| 7), Some(7));
    assert!(!runner.is_fatal());
    let failed: Option<()> = port_guarded(&mut runner, &router, "the fabric port's flush", |_| panic!("flush failed"));
    assert!(failed.is_none() && runner.is_fatal() && shared.fatal.load(Ordering::SeqCst));
    assert_eq!(shared.last_error.load(Ordering::SeqCst), u64::from(ASYNC_ERR_FATAL) << 24);
    assert!(!runner.pass(&router.view()) && runner.next_deadline().is_none(), "nothing runs while fatal");
    let (reply, rx) = rnic_emu_core::rnic::verbs::call::channel();
    runner.handle(&router.view(), Event::Reset { reply });
    rx.try_recv().unwrap();
    assert!(!runner.is_fatal() && !shared.fatal.load(Ordering::SeqCst));
}
