//! Moved to [`crate::mem::access`]; re-exported here for callers that still use this path
//! (`crate::verbs::copy::GuestMem`).
pub use crate::mem::access::*;
