//! Moved to [`crate::mem::dma`]; re-exported here for callers that still use this path.
pub use crate::mem::dma::*;
