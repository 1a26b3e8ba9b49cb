//! The fast CPU path: multi-threaded twins of the shaders, bit-identical to them.

pub mod convert;
pub mod encode;
pub mod sincos;
pub mod table;

pub use encode::{Encoder, encode, encode_learned};
pub use table::{table, table_into};
