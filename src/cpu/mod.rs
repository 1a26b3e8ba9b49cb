//! The fast CPU path: multi-threaded twins of the shaders, bit-identical to them.

pub mod sincos;
pub mod table;

pub use table::{table, table_into};
