//! Rate-limited logging of events a guest (or a peer on the fabric) can trigger at will:
//! bad register accesses, refused commands, malformed descriptors, dropped packets.
//!
//! A guest must not be able to fill the host's disk through our log (QEMU logs guest
//! errors only under `-d guest_errors`; Linux uses `printk_ratelimited`). Each call site
//! of [`guest_warn!`] owns one limiter: a burst of [`BURST`] lines per [`INTERVAL`], then
//! silence, and the first line of the next interval says how many were suppressed. The
//! events themselves are still counted by the caller in the device statistics: only the
//! text is limited.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Lines a call site may print per interval.
pub const BURST: u32 = 10;
/// Length of one interval.
pub const INTERVAL: Duration = Duration::from_secs(5);

struct Window {
    start: Option<Instant>,
    printed: u32,
    suppressed: u64,
}

/// One call site's limiter (a `static`, made by [`guest_warn!`]).
pub struct RateLimit {
    window: Mutex<Window>,
}

impl RateLimit {
    pub const fn new() -> Self {
        RateLimit { window: Mutex::new(Window { start: None, printed: 0, suppressed: 0 }) }
    }

    /// Whether a line may be printed now; `Some(n)` with the number of lines suppressed
    /// since the last printed one.
    pub fn check(&self) -> Option<u64> {
        self.check_at(Instant::now())
    }

    fn check_at(&self, now: Instant) -> Option<u64> {
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        let expired = w.start.is_none_or(|s| now.saturating_duration_since(s) >= INTERVAL);
        if expired {
            w.start = Some(now);
            w.printed = 0;
        }
        if w.printed >= BURST {
            w.suppressed = w.suppressed.saturating_add(1);
            return None;
        }
        w.printed += 1;
        Some(std::mem::take(&mut w.suppressed))
    }
}

impl Default for RateLimit {
    fn default() -> Self {
        RateLimit::new()
    }
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
        static LIMIT: $crate::ratelimit::RateLimit = $crate::ratelimit::RateLimit::new();
        if let Some(suppressed) = LIMIT.check() {
            if suppressed > 0 {
                log::log!($level, "({suppressed} similar guest-triggered messages suppressed)");
            }
            log::log!($level, $($arg)+);
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_silence_then_a_suppressed_count() {
        let rl = RateLimit::new();
        let t0 = Instant::now();
        let printed = (0..1000).filter(|_| rl.check_at(t0).is_some()).count();
        assert_eq!(printed, BURST as usize, "one burst per interval");
        assert_eq!(rl.check_at(t0 + INTERVAL / 2), None, "still the same interval");
        assert_eq!(rl.check_at(t0 + INTERVAL), Some(1000 - u64::from(BURST) + 1), "the next interval reports what was dropped");
        assert_eq!(rl.check_at(t0 + INTERVAL), Some(0));
    }
}
