//! Rate-limited logging of events a guest (or a peer on the fabric, or a local client) can
//! trigger at will: bad register accesses, refused commands, malformed descriptors,
//! dropped packets.
//!
//! A guest must not be able to fill the host's disk through our log (QEMU logs guest
//! errors only under `-d guest_errors`; Linux uses `printk_ratelimited`). Each call site
//! of [`guest_warn!`] owns one limiter: a burst of [`BURST`] lines per [`INTERVAL`], then
//! silence. What was suppressed is always reported, as one line per call site: on the
//! site's next event after its interval ended, or, for a flood that stopped, by
//! [`report_expired`] (the server calls it about once a second) or [`report_all`] (at
//! shutdown). [`suppressed_total`] counts every suppressed line of the process for the
//! statistics. The events themselves are still counted by the caller in the device
//! statistics: only the text is limited. Nothing here depends on how fast events come:
//! a flood of any length inside one interval is reported once the interval is over.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Lines a call site may print per interval.
pub const BURST: u32 = 10;
/// Length of one interval.
pub const INTERVAL: Duration = Duration::from_secs(5);

/// Lines suppressed by every limiter of the process since it started.
static SUPPRESSED_TOTAL: AtomicU64 = AtomicU64::new(0);
/// Limiters that have suppressed a line at least once: the ones [`report_expired`] visits.
/// A call site registers itself once, so this holds at most one entry per call site.
static PENDING: Mutex<Vec<&'static RateLimit>> = Mutex::new(Vec::new());

struct Window {
    start: Option<Instant>,
    printed: u32,
    suppressed: u64,
}

/// One call site's limiter (a `static`, made by [`guest_warn!`]).
pub struct RateLimit {
    level: log::Level,
    /// Who triggers these lines, for the summary: "guest-triggered", ...
    origin: &'static str,
    window: Mutex<Window>,
    registered: AtomicBool,
}

impl RateLimit {
    pub const fn new(level: log::Level, origin: &'static str) -> Self {
        RateLimit { level, origin, window: Mutex::new(Window { start: None, printed: 0, suppressed: 0 }), registered: AtomicBool::new(false) }
    }

    /// Whether a line may be printed now. Before saying yes it reports the lines
    /// suppressed since the last printed one.
    pub fn check(&'static self) -> bool {
        self.check_at(Instant::now())
    }

    fn check_at(&'static self, now: Instant) -> bool {
        let mut w = self.lock();
        let expired = w.start.is_none_or(|s| now.saturating_duration_since(s) >= INTERVAL);
        if expired {
            w.start = Some(now);
            w.printed = 0;
        }
        if w.printed >= BURST {
            w.suppressed = w.suppressed.saturating_add(1);
            SUPPRESSED_TOTAL.fetch_add(1, Ordering::Relaxed);
            drop(w);
            self.register();
            return false;
        }
        w.printed += 1;
        self.summarize(&mut w);
        true
    }

    /// Reports what this site suppressed if its interval has ended by `now` (or always,
    /// with `now` = `None`), and starts a fresh interval for its next event.
    fn report(&self, now: Option<Instant>) {
        let mut w = self.lock();
        let over = match (now, w.start) {
            (Some(now), Some(s)) => now.saturating_duration_since(s) >= INTERVAL,
            _ => true,
        };
        if over && w.suppressed > 0 {
            self.summarize(&mut w);
            w.start = None;
        }
    }

    fn summarize(&self, w: &mut Window) {
        let n = std::mem::take(&mut w.suppressed);
        if n > 0 {
            log::log!(self.level, "({n} similar {} messages suppressed)", self.origin);
        }
    }

    fn register(&'static self) {
        if !self.registered.swap(true, Ordering::AcqRel) {
            PENDING.lock().unwrap_or_else(|p| p.into_inner()).push(self);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Window> {
        self.window.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn sites() -> Vec<&'static RateLimit> {
    PENDING.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Reports, for every call site whose interval has ended, the lines it suppressed (a
/// flood that stopped is not left unreported until the site's next event).
pub fn report_expired() {
    let now = Instant::now();
    sites().into_iter().for_each(|s| s.report(Some(now)));
}

/// Reports every call site's suppressed lines now, interval over or not (at shutdown).
pub fn report_all() {
    sites().into_iter().for_each(|s| s.report(None));
}

/// Lines suppressed by every limiter of this process (for the statistics).
pub fn suppressed_total() -> u64 {
    SUPPRESSED_TOTAL.load(Ordering::Relaxed)
}

/// `log::warn!` for guest-triggered events, limited per call site (see the module header).
#[macro_export]
macro_rules! guest_warn {
    ($($arg:tt)+) => { $crate::guest_log!(log::Level::Warn, $($arg)+) };
}

/// `log::info!` for guest- or client-triggered events (resets, connections), limited per
/// call site like [`guest_warn!`].
#[macro_export]
macro_rules! guest_info {
    ($($arg:tt)+) => { $crate::guest_log!(log::Level::Info, $($arg)+) };
}

/// The rate-limited log line behind [`guest_warn!`] and [`guest_info!`].
#[macro_export]
macro_rules! guest_log {
    ($level:expr, $($arg:tt)+) => {{
        static LIMIT: $crate::ratelimit::RateLimit = $crate::ratelimit::RateLimit::new($level, "guest-triggered");
        if LIMIT.check() {
            log::log!($level, $($arg)+);
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    fn suppressed(rl: &RateLimit) -> u64 {
        rl.lock().suppressed
    }

    #[test]
    fn burst_then_silence_then_the_next_event_reports() {
        static RL: RateLimit = RateLimit::new(log::Level::Warn, "test");
        let t0 = Instant::now();
        let total_before = suppressed_total();
        let printed = (0..1000).filter(|_| RL.check_at(t0)).count();
        assert_eq!(printed, BURST as usize, "one burst per interval");
        assert!(!RL.check_at(t0 + INTERVAL / 2), "still the same interval");
        assert_eq!(suppressed(&RL), 1000 - u64::from(BURST) + 1);
        assert!(suppressed_total() - total_before > 1000 - u64::from(BURST));
        assert!(RL.check_at(t0 + INTERVAL), "the next interval prints");
        assert_eq!(suppressed(&RL), 0, "and reported what was dropped");
    }

    #[test]
    fn a_flood_that_stops_is_reported_once_its_interval_ends() {
        static RL: RateLimit = RateLimit::new(log::Level::Warn, "test");
        let t0 = Instant::now();
        (0..100).for_each(|_| {
            RL.check_at(t0);
        });
        assert!(sites().iter().any(|s| std::ptr::eq(*s, &RL)), "a suppressing site registers");
        RL.report(Some(t0 + INTERVAL / 2));
        assert_eq!(suppressed(&RL), 90, "not before the interval ends");
        RL.report(Some(t0 + INTERVAL));
        assert_eq!(suppressed(&RL), 0, "reported when it ends, with no further event");
        assert!(RL.check_at(t0 + INTERVAL), "a fresh interval starts with the next event");
    }

    #[test]
    fn shutdown_reports_whatever_is_pending() {
        static RL: RateLimit = RateLimit::new(log::Level::Info, "test");
        let t0 = Instant::now();
        (0..BURST + 5).for_each(|_| {
            RL.check_at(t0);
        });
        assert_eq!(suppressed(&RL), 5);
        // (report_all() does this for every site; called here it would race the other
        // tests' limiters.)
        RL.report(None);
        assert_eq!(suppressed(&RL), 0);
    }
}
