//! The event loop's epoll subscriber: the file descriptors that wake the loop, and what a
//! wake-up consumes (an `EventFd`'s count, the `TimerFd`'s expirations). The work itself
//! happens in the loop's next pass, not here.

use event_manager::{EventOps, EventSet, Events, MutEventSubscriber};
use std::os::fd::RawFd;
use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::timerfd::TimerFd;

const STOP: u32 = u32::MAX;
const TIMER: u32 = u32::MAX - 1;
/// Sockets are tagged from here; kicks are tagged with their index.
const SOCKET_BASE: u32 = 1 << 16;

pub struct Wakeups {
    kicks: Vec<EventFd>,
    sockets: Vec<RawFd>,
    stop: EventFd,
    pub timer: TimerFd,
    pub timer_fired: bool,
    /// Registering a source failed (reported by the loop's constructor).
    pub init_error: Option<String>,
}

impl Wakeups {
    pub fn new(kicks: Vec<EventFd>, sockets: Vec<RawFd>, stop: EventFd) -> std::io::Result<Wakeups> {
        Ok(Wakeups { kicks, sockets, stop, timer: TimerFd::new()?, timer_fired: false, init_error: None })
    }
}

impl MutEventSubscriber for Wakeups {
    fn init(&mut self, ops: &mut EventOps) {
        let mut sources = vec![Events::with_data(&self.stop, STOP, EventSet::IN), Events::with_data(&self.timer, TIMER, EventSet::IN)];
        sources.extend(self.kicks.iter().enumerate().map(|(i, k)| Events::with_data(k, i as u32, EventSet::IN)));
        sources.extend(self.sockets.iter().enumerate().map(|(i, &fd)| Events::with_data_raw(fd, SOCKET_BASE + i as u32, EventSet::IN)));
        for s in sources {
            if let Err(e) = ops.add(s) {
                self.init_error = Some(format!("{e:?}"));
            }
        }
    }

    fn process(&mut self, events: Events, _ops: &mut EventOps) {
        match events.data() {
            STOP => {
                let _ = self.stop.read();
            }
            TIMER => {
                // Readable: the timer expired, so this read does not block.
                let _ = self.timer.wait();
                self.timer_fired = true;
            }
            i if (i as usize) < self.kicks.len() => {
                let _ = self.kicks[i as usize].read();
            }
            // A readable socket: the next pass receives from it.
            _ => {}
        }
    }
}
