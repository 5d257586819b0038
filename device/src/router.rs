//! Moved to [`crate::mem::router`]; re-exported here for callers that still use this path.
pub use crate::mem::router::*;
