//! The process logger: `env_logger` (RUST_LOG) with one addition. The vfio-user library
//! logs every request it refuses ("Error handling command") at error level, which a
//! hostile client can trigger at will; those lines go through the same per-site limiter
//! as [`rnic_emu_core::guest_warn!`] (a burst per interval, then a suppressed count). The
//! refusals themselves are counted by [`rnic_emu_server::vfio`] in the function's
//! statistics.
//!
//! Panics raised inside that library by a hostile message (serve.rs catches them and
//! drops only that connection) are reported the same way, through a panic hook
//! ([`rnic_emu_server::panics`] tells them from ours): one rate-limited error line instead
//! of the default panic message per connection.

use log::{Level, Log, Metadata, Record};
use rnic_emu_core::ratelimit::RateLimit;

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
        if rnic_emu_server::panics::raised_by_the_library(module_path!()) {
            rnic_emu_core::guest_warn!("the vfio-user library panicked on a client's message ({info}); that connection is dropped");
        } else {
            default_hook(info);
        }
    }));
}
