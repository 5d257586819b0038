//! The process logger: `env_logger` (RUST_LOG) with one addition. The vfio-user library
//! logs every request it refuses ("Error handling command") at error level, which a
//! hostile client can trigger at will; those lines go through the same per-site limiter
//! as [`rnic_emu_core::guest_warn!`] (a burst per interval, then a suppressed count). The refusals
//! themselves are counted by [`crate::vfio`] in the function's statistics.
//!
//! Panics raised inside that library by a hostile message (serve.rs catches them and
//! drops only that connection) are reported the same way, through a panic hook: one
//! rate-limited error line instead of the default panic message per connection.

use crate::ratelimit::RateLimit;
use log::{Level, Log, Metadata, Record};

/// Log target of the rust-vmm vfio-user library.
const VFIO_USER_TARGET: &str = "vfio_user";

struct Limited {
    inner: env_logger::Logger,
}

/// The one limiter of the library's lines (they come from many call sites inside it).
static LIBRARY_ERRORS: RateLimit = RateLimit::new(Level::Warn, "client-triggered vfio-user");

impl Log for Limited {
    fn enabled(&self, metadata: &Metadata) -> bool {
        self.inner.enabled(metadata)
    }

    fn log(&self, record: &Record) {
        if !self.inner.matches(record) {
            return;
        }
        if !(record.target().starts_with(VFIO_USER_TARGET) && record.level() <= Level::Warn) {
            return self.inner.log(record);
        }
        if LIBRARY_ERRORS.check() {
            self.inner.log(record);
        }
    }

    fn flush(&self) {
        self.inner.flush();
    }
}

/// Installs the logger and the panic hook; RUST_LOG overrides `default_filter`.
pub fn init(default_filter: &str) {
    let inner = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default_filter)).build();
    let max = inner.filter();
    if log::set_boxed_logger(Box::new(Limited { inner })).is_ok() {
        log::set_max_level(max);
    }
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if raised_by_the_library() {
            rnic_emu_core::guest_warn!("the vfio-user library panicked on a client's message ({info}); that connection is dropped");
        } else {
            default_hook(info);
        }
    }));
}

/// Whether a panic being raised comes from the vfio-user library: the innermost frame on
/// the stack that is the library's or rnic-emu's (outside this module and the fuzzing
/// entry points) is the library's. Its location alone does not tell: a capacity overflow
/// the library causes is located in the standard library.
pub fn raised_by_the_library() -> bool {
    let trace = std::backtrace::Backtrace::force_capture().to_string();
    trace
        .lines()
        .find_map(|l| {
            // Every crate of ours: rnic_emu, rnic_emu_core, rnic_emu_server.
            let ours = l.contains("rnic_emu") && !l.contains("rnic_emu::logging::") && !l.contains("rnic_emu::fuzzing::");
            match (l.contains("vfio_user::"), ours) {
                (true, _) => Some(true),
                (_, true) => Some(false),
                _ => None,
            }
        })
        .unwrap_or(false)
}
