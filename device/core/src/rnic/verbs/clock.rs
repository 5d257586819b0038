//! The time the verbs engine's timers read (retransmission timeout, RNR wait): the
//! monotonic clock in the product, or a manual clock its owner advances (the fuzz
//! harnesses and tests drive retransmission and RNR paths deterministically with it).
//! Only the protocol timers read it; the WQE log's timestamps and the event loop's sleep
//! use the real clock (a manual clock is only used by harnesses that run the engine
//! themselves).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A time source: real (the default) or manual.
#[derive(Clone, Debug, Default)]
pub struct Clock {
    manual: Option<Arc<Mutex<Instant>>>,
}

impl Clock {
    /// A clock that stands still until [`Clock::advance`] moves it.
    pub fn manual() -> Clock {
        Clock { manual: Some(Arc::new(Mutex::new(Instant::now()))) }
    }

    pub fn now(&self) -> Instant {
        match &self.manual {
            None => Instant::now(),
            Some(t) => *t.lock().unwrap_or_else(|p| p.into_inner()),
        }
    }

    /// Moves a manual clock forward (a real clock ignores it).
    pub fn advance(&self, by: Duration) {
        if let Some(t) = &self.manual {
            let mut t = t.lock().unwrap_or_else(|p| p.into_inner());
            *t = t.checked_add(by).unwrap_or(*t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_advanced() {
        let c = Clock::manual();
        let t0 = c.now();
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(c.now(), t0);
        c.advance(Duration::from_millis(5));
        assert_eq!(c.now(), t0 + Duration::from_millis(5));
        let real = Clock::default();
        let r0 = real.now();
        real.advance(Duration::from_secs(10));
        assert!(real.now() < r0 + Duration::from_secs(10));
    }
}
