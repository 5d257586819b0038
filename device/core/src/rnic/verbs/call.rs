//! A synchronous call into the verbs engine (a command, RESET, DMA_CTRL, ETH_CTRL) whose
//! waiter may give up: [`channel`] pairs the engine's [`Reply`] with the register side's
//! [`Waiter`] around one shared state, Pending -> Running (the engine claims it) or
//! Pending -> Abandoned (the waiter gives up), each move a compare-and-swap, so exactly
//! one side wins. The engine runs a call only when it claimed it: a call its waiter
//! abandoned never runs, however late the engine reaches it (docs/programming.md
//! R-CMD-6). A waiter whose timeout passes while the engine already runs the call waits
//! for its result (what the engine does in one call is bounded).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::sync::Arc;
use std::time::Duration;

const PENDING: u8 = 0;
const RUNNING: u8 = 1;
const ABANDONED: u8 = 2;

/// The engine's end of a call: claim it, then send the result.
pub struct Reply<T> {
    tx: SyncSender<T>,
    state: Arc<AtomicU8>,
}

/// The register side's end of a call.
pub struct Waiter<T> {
    rx: Receiver<T>,
    state: Arc<AtomicU8>,
}

/// How a call ended for its waiter.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome<T> {
    /// The engine ran it and answered.
    Done(T),
    /// The engine had not started it within the timeout: it never runs.
    Abandoned,
    /// The engine dropped it unanswered (its loop stopped).
    Gone,
}

/// A new call: the engine's reply and the waiter's end.
pub fn channel<T>() -> (Reply<T>, Waiter<T>) {
    let (tx, rx) = mpsc::sync_channel(1);
    let state = Arc::new(AtomicU8::new(PENDING));
    (Reply { tx, state: state.clone() }, Waiter { rx, state })
}

impl<T> Reply<T> {
    /// Engine side: takes the call for running. False: its waiter abandoned it, and the
    /// engine must not run it.
    pub fn claim(&self) -> bool {
        self.state.compare_exchange(PENDING, RUNNING, Ordering::SeqCst, Ordering::SeqCst).is_ok()
    }

    /// Engine side: the result of a claimed call (nobody may be listening any more).
    pub fn send(self, value: T) {
        let _ = self.tx.send(value);
    }
}

impl<T> Waiter<T> {
    /// Waits up to `timeout` for the engine to take the call; once it has, for its result.
    pub fn wait(self, timeout: Duration, what: &str) -> Outcome<T> {
        match self.rx.recv_timeout(timeout) {
            Ok(v) => return Outcome::Done(v),
            Err(RecvTimeoutError::Disconnected) => return Outcome::Gone,
            Err(RecvTimeoutError::Timeout) => {}
        }
        if self.state.compare_exchange(PENDING, ABANDONED, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            return Outcome::Abandoned;
        }
        // The engine runs it: its result comes (one call's work is bounded).
        log::warn!("the verbs engine is still running {what} after {timeout:?}; waiting for its result");
        match self.rx.recv() {
            Ok(v) => Outcome::Done(v),
            Err(_) => Outcome::Gone,
        }
    }

    /// The result, if the engine already answered (an engine run inline answers at once).
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        self.rx.try_recv()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactly_one_side_wins_a_call() {
        let (reply, waiter) = channel::<u32>();
        assert_eq!(waiter.wait(Duration::from_millis(1), "a test call"), Outcome::Abandoned);
        assert!(!reply.claim(), "an abandoned call cannot be claimed");

        let (reply, waiter) = channel::<u32>();
        assert!(reply.claim());
        let engine = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            reply.send(7);
        });
        assert_eq!(waiter.wait(Duration::from_millis(1), "a test call"), Outcome::Done(7), "a running call is waited for");
        engine.join().unwrap();

        let (reply, waiter) = channel::<u32>();
        drop(reply);
        assert_eq!(waiter.wait(Duration::from_secs(5), "a test call"), Outcome::Gone);
    }
}
