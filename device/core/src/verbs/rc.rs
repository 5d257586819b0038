//! Former home of the RC transport over the fabric; the protocol now lives in
//! [`super::requester`], [`super::responder`] and [`super::completer`] for both
//! transports, and the wire in [`super::transport`]. Kept so `crate::verbs::rc::Wire`
//! still resolves for the event loop.

pub use super::transport::{psn_add, psn_diff, Wire};
