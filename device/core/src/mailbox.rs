//! A mailbox: how work posted on one thread (a vfio-user socket thread) reaches an engine
//! that another thread runs (the node's event loop, `evloop` in `rnic-emu-server`): a
//! queue and an `EventFd` that wakes the loop when it sleeps. Generic over what is posted:
//! the verbs engine's events (`crate::rnic::verbs::runner`) and the GPU engine's launches
//! (`crate::gpu::engine`) go through one each.

use std::collections::VecDeque;
use std::sync::Mutex;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

struct Queue<E> {
    events: VecDeque<E>,
    /// The loop is (about to be) asleep in epoll: the next post must kick it.
    sleeping: bool,
}

/// Events for one engine (a verbs engine's doorbells and commands, or a GPU engine's
/// launches), posted by socket threads and taken by the event loop.
///
/// Wake-up rule: a post kicks the `EventFd` only when the loop has declared, under the
/// same lock, that it is going to sleep ([`Mailbox::prepare_sleep`]); while the loop runs
/// or busy-polls, posting costs no system call. Because the flag and the queue share one
/// lock, a post either lands before the loop's last look (it sees the event and does not
/// sleep) or after it (it sees `sleeping` and kicks).
pub struct Mailbox<E> {
    queue: Mutex<Queue<E>>,
    kick: EventFd,
}

impl<E> Mailbox<E> {
    pub fn new() -> std::io::Result<Mailbox<E>> {
        Ok(Mailbox { queue: Mutex::new(Queue { events: VecDeque::new(), sleeping: false }), kick: EventFd::new(EFD_NONBLOCK)? })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue<E>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn post(&self, ev: E) {
        self.post_with(ev, true);
    }

    /// Posts an event; `wake: false` leaves a sleeping loop asleep (the event waits for
    /// the next pass, which drains the mailbox before it does anything else).
    pub fn post_with(&self, ev: E, wake: bool) {
        let wake = {
            let mut q = self.lock();
            q.events.push_back(ev);
            wake && std::mem::take(&mut q.sleeping)
        };
        if wake {
            if let Err(e) = self.kick.write(1) {
                log::error!("waking the event loop: {e}");
            }
        }
    }

    /// The `EventFd` a sleeping loop waits on.
    pub fn kick_fd(&self) -> &EventFd {
        &self.kick
    }

    /// Loop side: moves every queued event to `out`; the loop is awake.
    pub fn drain(&self, out: &mut VecDeque<E>) {
        let mut q = self.lock();
        q.sleeping = false;
        out.append(&mut q.events);
    }

    /// Loop side: declares the loop is going to sleep. False (and not sleeping) when an
    /// event is already queued.
    pub fn prepare_sleep(&self) -> bool {
        let mut q = self.lock();
        q.sleeping = q.events.is_empty();
        q.sleeping
    }
}
